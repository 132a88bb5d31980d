import { useMemo, useState } from "preact/hooks";
import { get, post } from "../api";
import { ErrorBanner, Loading, Notice, type NoticeKind, StateBadge } from "../components";
import type { ClusterStatus, JobDetail, JobEvent, Session, Task } from "../types";
import {
  FINAL_STATES,
  clock,
  duration,
  errorText,
  exitMeaning,
  go,
  mib,
  num,
  takeSubmitWarnings,
  useLoad,
  useNow,
} from "../util";
import { JobShares } from "./job-shares";
import { Logs } from "./logs";
import { WhyWaiting } from "./why";

function taskKey(task: { role: string; index: number }): string {
  return `${task.role}/${task.index}`;
}

/** An exit code with its class and what it means ("-210 STOPPED: stopped on request ..."). */
function ExitCode({ code, exitClass }: { code: number | null; exitClass: string | null }) {
  if (code === null) return <>{exitClass ?? ""}</>;
  return (
    <span class="exit" data-code={code}>
      <strong>{code}</strong> {exitClass ?? ""}
      <span class="exit-meaning"> {exitMeaning(code)}</span>
    </span>
  );
}

/** Labels of ports that speak no HTTP (OpenPAI's ssh plugin, torchrun's rendezvous): no Open link. */
const NOT_WEB_PORTS = new Set(["ssh", "master"]);

/** Where the task proxy serves a task's labelled port (docs/notebooks.md): the proxy's own port
 * on the dashboard's host, so the session cookie (host-wide) signs the user in there too. */
export function proxyUrl(proxyPort: number, job: string, task: Task, label: string): string {
  const path = [job, task.role, String(task.index), label].map(encodeURIComponent).join("/");
  return `${location.protocol}//${location.hostname}:${proxyPort}/proxy/${path}/`;
}

/** "Open" links to a running task's labelled ports, each in a new tab. */
function OpenLinks({ job, task, proxyPort }: { job: string; task: Task; proxyPort: number | null }) {
  if (task.state !== "RUNNING" || !proxyPort) return null;
  const labels = Object.keys(task.ports).filter((label) => !NOT_WEB_PORTS.has(label));
  return (
    <>
      {labels.map((label) => (
        <a
          class="button small"
          data-testid="open-port"
          data-label={label}
          href={proxyUrl(proxyPort, job, task, label)}
          target="_blank"
          rel="noopener noreferrer"
          aria-label={`Open ${label} of task ${taskKey(task)} (new tab)`}
          title={`Open port ${label} in a new tab, through the task proxy`}
        >
          Open {label}
        </a>
      ))}
    </>
  );
}

function Tasks({
  job,
  onLogs,
  proxyPort,
}: {
  job: JobDetail;
  onLogs: (t: Task) => void;
  proxyPort: number | null;
}) {
  const now = useNow(job.tasks.some((t) => t.startedAt && !t.finishedAt));
  return (
    <table class="list" data-testid="tasks-table">
      <thead>
        <tr>
          <th>Task</th>
          <th>State</th>
          <th>Node</th>
          <th>Address</th>
          <th title="The indices of the GPUs the task was given on its node">GPU indices</th>
          <th>Ports</th>
          <th>Try</th>
          <th>Exit</th>
          <th>Ran</th>
          <th>CPU time</th>
          <th>Peak mem</th>
          <th>
            <span class="sr-only">Actions</span>
          </th>
        </tr>
      </thead>
      <tbody>
        {job.tasks.map((task) => (
          <tr data-task={taskKey(task)}>
            <td>{taskKey(task)}</td>
            <td>
              <StateBadge state={task.state} />
            </td>
            <td>{task.node ? <a href={`#/nodes/${encodeURIComponent(task.node)}`}>{task.node}</a> : ""}</td>
            <td>{task.address}</td>
            <td data-testid="gpu-indices">{task.gpus.length ? task.gpus.join(", ") : "none"}</td>
            <td>
              {Object.entries(task.ports)
                .map(([k, v]) => `${k}=${v}`)
                .join(" ")}
            </td>
            <td>{task.attempt}</td>
            <td title={task.diagnostics}>
              <ExitCode code={task.exitCode} exitClass={task.exitClass} />
            </td>
            <td data-testid="ran">{task.startedAt ? duration((task.finishedAt ?? now) - task.startedAt) : ""}</td>
            <td>{task.usage.cpuSeconds !== undefined ? `${num(task.usage.cpuSeconds)}s` : ""}</td>
            <td>{mib(task.usage.peakMemoryMiB)}</td>
            <td class="actions">
              <button class="secondary small" onClick={() => onLogs(task)}>
                Logs
              </button>
              {task.state === "RUNNING" ? (
                <a
                  class="button small"
                  href={`#/terminal/${encodeURIComponent(job.id)}?task=${encodeURIComponent(taskKey(task))}`}
                >
                  Terminal
                </a>
              ) : null}
              <OpenLinks job={job.id} task={task} proxyPort={proxyPort} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** A job's diagnostics are news of any kind: "every task finished ..." is a success, "stopped by
 * alice" information, a failure's reason an error. */
function diagnosticsKind(state: string): NoticeKind {
  if (state === "SUCCEEDED") return "success";
  if (state === "FAILED") return "error";
  return "info";
}

export function JobPage({ id, session }: { id: string; session: Session }) {
  const job = useLoad(() => get<JobDetail>(`/api/v1/jobs/${encodeURIComponent(id)}`), [id]);
  const events = useLoad(() => get<JobEvent[]>(`/api/v1/jobs/${encodeURIComponent(id)}/events`), [id]);
  const cluster = useLoad(() => get<ClusterStatus>("/api/v1/cluster"), [], false);
  const warnings = useMemo(() => takeSubmitWarnings(id), [id]);
  const [task, setTask] = useState<string | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [stopping, setStopping] = useState(false);

  if (job.error && !job.data) {
    return (
      <div>
        <h1>Job {id}</h1>
        <ErrorBanner error={job.error} />
        <a href="#/jobs">All jobs</a>
      </div>
    );
  }
  if (!job.data) return <Loading what={`job ${id}`} />;
  const detail = job.data;
  const shown = task ?? (detail.tasks[0] ? taskKey(detail.tasks[0]) : null);
  const stop = async () => {
    if (!confirm(`Stop job ${detail.name}?`)) return;
    setStopping(true);
    try {
      await post(`/api/v1/jobs/${encodeURIComponent(detail.id)}/stop`);
      setActionError(null);
      job.reload();
    } catch (err) {
      setActionError(err);
    } finally {
      setStopping(false);
    }
  };
  return (
    <div>
      <div class="titlebar">
        <h1>
          {detail.name} <span class="muted">{detail.id}</span> <StateBadge state={detail.state} />
        </h1>
        <div class="actions">
          {!FINAL_STATES.has(detail.state) && detail.state !== "STOPPING" ? (
            <button class="danger" onClick={stop} disabled={stopping}>
              Stop
            </button>
          ) : null}
          <button class="secondary" onClick={() => go(`/submit?clone=${encodeURIComponent(detail.id)}`)}>
            Clone and resubmit
          </button>
        </div>
      </div>
      <ErrorBanner error={actionError} />
      {warnings.length ? (
        <Notice kind="warning" testid="submit-warnings">
          Submitted with {warnings.length === 1 ? "a warning" : `${warnings.length} warnings`}:
          <ul>
            {warnings.map((w) => (
              <li>
                <strong>{w.path || "(file)"}</strong>: {w.message}
              </li>
            ))}
          </ul>
        </Notice>
      ) : null}
      <dl class="facts">
        <dt>User</dt>
        <dd>{detail.user}</dd>
        <dt>Virtual cluster</dt>
        <dd>{detail.virtualCluster}</dd>
        <dt>Priority</dt>
        <dd>{detail.priorityClass}</dd>
        <dt>Format</dt>
        <dd>{detail.format}</dd>
        <dt>GPU count</dt>
        <dd>{detail.gpus}</dd>
        <dt>Submitted</dt>
        <dd>{clock(detail.submittedAt)}</dd>
        <dt>Started</dt>
        <dd>{clock(detail.launchedAt)}</dd>
        <dt>Ended</dt>
        <dd>{clock(detail.completedAt)}</dd>
        <dt>Attempt</dt>
        <dd>
          {detail.attempt} (retries: platform {detail.retries.platform}, resource{" "}
          {detail.retries.resource}, user {detail.retries.user})
        </dd>
        {detail.exitCode !== null ? (
          <>
            <dt>Exit</dt>
            <dd data-testid="job-exit">
              <ExitCode code={detail.exitCode} exitClass={detail.exitClass} />
            </dd>
          </>
        ) : null}
      </dl>
      {detail.diagnostics ? (
        <Notice kind={diagnosticsKind(detail.state)} testid="diagnostics">
          <span class="diagnostics">{detail.diagnostics}</span>
        </Notice>
      ) : null}
      <WhyWaiting job={detail} session={session} />
      {session.admin || session.user === detail.user ? <JobShares job={detail.id} /> : null}
      <h2>Tasks</h2>
      {detail.tasks.length ? (
        <Tasks
          job={detail}
          onLogs={(t) => setTask(taskKey(t))}
          proxyPort={cluster.data?.proxyPort ?? null}
        />
      ) : (
        <p class="muted">No task has been placed yet.</p>
      )}
      {shown ? <Logs job={detail} task={shown} /> : null}
      <h2>Timeline</h2>
      <ErrorBanner error={events.error} />
      <ol class="timeline" data-testid="timeline">
        {(events.data ?? []).map((e) => (
          <li>
            <time>{clock(e.at)}</time> <strong>{e.kind}</strong>
            {e.role ? ` ${e.role}/${e.index ?? 0}` : ""} {e.message}
          </li>
        ))}
      </ol>
      {job.error ? <p class="muted">Last refresh failed: {errorText(job.error)}</p> : null}
    </div>
  );
}
