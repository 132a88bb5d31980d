// Why a job waits, as `shoal job why` says it: its reason and queue position, and the jobs in
// its way with their owner, name and GPUs (a link only where the viewer may open that job).
import { get } from "../api";
import { ErrorBanner } from "../components";
import type { JobDetail, JobRef, PendingDetail, Session } from "../types";
import { useLoad } from "../util";

// Reasons that keep a waiting job out of its VC's queue (no position there).
const OUT_OF_QUEUE = new Set(["ImageNotFound", "ArrayConcurrencyLimit"]);

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

function OtherJob({ job, here, session }: { job: JobRef; here: string; session: Session }) {
  const mayOpen = session.admin || job.user === session.user;
  const label = (
    <>
      {job.user === session.user ? "your" : `${job.user}'s`} job <strong>{job.name}</strong> (id {job.id}
      {job.virtualCluster !== here ? `, VC ${job.virtualCluster}` : ""}),{" "}
      {job.gpus ? `holding ${plural(job.gpus, "GPU", "GPUs")}` : "holding no GPU"}
    </>
  );
  return (
    <li data-job={job.id} data-user={job.user}>
      {mayOpen ? <a href={`#/jobs/${encodeURIComponent(job.id)}`}>{label}</a> : label}
    </li>
  );
}

function Jobs({
  ids,
  details,
  here,
  session,
}: {
  ids: string[];
  details: JobRef[] | null | undefined;
  here: string;
  session: Session;
}) {
  if (details) {
    return (
      <ul class="joblist">
        {details.map((job) => (
          <OtherJob job={job} here={here} session={session} />
        ))}
      </ul>
    );
  }
  // a server that gives ids only: bare ids, linked for admins (who may open any job)
  return (
    <ul class="joblist">
      {ids.map((id) => (
        <li data-job={id}>{session.admin ? <a href={`#/jobs/${encodeURIComponent(id)}`}>job {id}</a> : `job ${id}`}</li>
      ))}
    </ul>
  );
}

export function WhyWaiting({ job, session }: { job: JobDetail; session: Session }) {
  const why = useLoad(
    () => get<PendingDetail>(`/api/v1/jobs/${encodeURIComponent(job.id)}/pending-reason`),
    [job.id, job.state],
    true,
    400,
    job.state === "WAITING" ? 5000 : 0, // a pool's launch ("launching, 40 s") ages without an event
  );
  if (job.state !== "WAITING") return null;
  const reason = why.data;
  const queued = !(reason?.code && OUT_OF_QUEUE.has(reason.code));
  return (
    <section class="why" data-testid="why-waiting">
      <h2>Why it is waiting</h2>
      <ErrorBanner error={why.error} />
      {reason ? (
        <>
          <p>
            <strong>{reason.code ?? "queued"}</strong>
            {queued
              ? reason.position
                ? ` · position ${reason.position} in ${reason.virtualCluster}'s queue`
                : ` · in ${reason.virtualCluster}'s queue (position not computed yet)`
              : ""}
          </p>
          <p>{reason.message ?? "The scheduler has not looked at it yet."}</p>
          {reason.pools?.length ? (
            <ul class="joblist" data-testid="why-pools" aria-label="What it waits for from the cloud pools">
              {reason.pools.map((line) => (
                <li>{line}</li>
              ))}
            </ul>
          ) : null}
          {reason.preempting.length ? (
            <div data-testid="preempting">
              <p>Being made room for by preempting:</p>
              <Jobs ids={reason.preempting} details={reason.preemptingDetails} here={job.virtualCluster} session={session} />
            </div>
          ) : null}
          {reason.blockers === null ? (
            <p>It would not fit even on an idle cluster.</p>
          ) : reason.blockers.length ? (
            <div data-testid="blockers">
              <p>It fits once these jobs finish or are preempted:</p>
              <Jobs ids={reason.blockers} details={reason.blockerDetails} here={job.virtualCluster} session={session} />
            </div>
          ) : null}
        </>
      ) : (
        <p class="muted">…</p>
      )}
    </section>
  );
}
