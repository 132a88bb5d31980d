import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, get, post, withQuery } from "../api";
import { ErrorBanner, Loading, StateBadge } from "../components";
import type { JobDetail, JobEvent, LogChunk, PendingDetail, Task } from "../types";
import { FINAL_STATES, clock, duration, errorText, go, mib, num, useLoad } from "../util";

function taskKey(task: { role: string; index: number }): string {
  return `${task.role}/${task.index}`;
}

function WhyWaiting({ job }: { job: JobDetail }) {
  const why = useLoad(
    () => get<PendingDetail>(`/api/v1/jobs/${encodeURIComponent(job.id)}/pending-reason`),
    [job.id, job.state],
  );
  if (job.state !== "WAITING") return null;
  const reason = why.data;
  return (
    <section class="why" data-testid="why-waiting">
      <h3>Why it is waiting</h3>
      <ErrorBanner error={why.error} />
      {reason ? (
        <>
          <p>
            <strong>{reason.code ?? "queued"}</strong>
            {reason.position ? ` · position ${reason.position} in ${reason.virtualCluster}'s queue` : ""}
          </p>
          <p>{reason.message ?? "The scheduler has not looked at it yet."}</p>
          {reason.blockers && reason.blockers.length ? (
            <p>
              Ahead of it:{" "}
              {reason.blockers.map((b) => (
                <a href={`#/jobs/${encodeURIComponent(b)}`}>{b} </a>
              ))}
            </p>
          ) : null}
        </>
      ) : (
        <p class="muted">…</p>
      )}
    </section>
  );
}

function Tasks({ job, onLogs }: { job: JobDetail; onLogs: (t: Task) => void }) {
  return (
    <table class="list" data-testid="tasks-table">
      <thead>
        <tr>
          <th>Task</th>
          <th>State</th>
          <th>Node</th>
          <th>Address</th>
          <th>GPUs</th>
          <th>Ports</th>
          <th>Try</th>
          <th>Exit</th>
          <th>Ran</th>
          <th>CPU time</th>
          <th>Peak mem</th>
          <th />
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
            <td>{task.gpus.join(",")}</td>
            <td>
              {Object.entries(task.ports)
                .map(([k, v]) => `${k}=${v}`)
                .join(" ")}
            </td>
            <td>{task.attempt}</td>
            <td title={task.diagnostics}>
              {task.exitCode ?? ""} {task.exitClass ?? ""}
            </td>
            <td>
              {task.startedAt
                ? duration((task.finishedAt ?? Date.now() / 1000) - task.startedAt)
                : ""}
            </td>
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
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Logs({ job, task }: { job: JobDetail; task: string }) {
  const [stream, setStream] = useState<"stdout" | "stderr">("stdout");
  const [follow, setFollow] = useState(true);
  const [text, setText] = useState("");
  const [complete, setComplete] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const box = useRef<HTMLPreElement>(null);
  const [role, index] = task.split("/");

  useEffect(() => {
    let offset = 0;
    let stopped = false;
    let timer: number | undefined;
    setText("");
    setComplete(false);
    const base = `/api/v1/jobs/${encodeURIComponent(job.id)}/logs`;
    const pull = async () => {
      try {
        for (;;) {
          const chunk = await get<LogChunk>(base, { role, index, stream, offset });
          if (stopped) return;
          if (chunk.data) setText((t) => t + chunk.data);
          offset = chunk.nextOffset;
          setError(null);
          if (chunk.complete) {
            setComplete(true);
            return;
          }
          if (!chunk.data) break;
        }
      } catch (err) {
        if (stopped) return;
        if (!(err instanceof ApiError && err.code === "NoTaskError")) setError(err);
      }
      if (!stopped && follow) timer = window.setTimeout(pull, 1000);
    };
    pull();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, [job.id, task, stream, follow]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [text, follow]);

  const download = withQuery(`/api/v1/jobs/${encodeURIComponent(job.id)}/logs/download`, {
    role,
    index,
    stream,
  });
  return (
    <section class="logs" data-testid="logs">
      <div class="logbar">
        <h3>Logs of {task}</h3>
        <div class="tabs">
          {(["stdout", "stderr"] as const).map((s) => (
            <button class={s === stream ? "tab active" : "tab"} onClick={() => setStream(s)}>
              {s}
            </button>
          ))}
        </div>
        <label class="inline">
          <input
            type="checkbox"
            checked={follow}
            onChange={(e) => setFollow((e.target as HTMLInputElement).checked)}
          />{" "}
          follow
        </label>
        <a class="button secondary small" href={download} download>
          Download full log
        </a>
        {complete ? <span class="muted">complete</span> : null}
      </div>
      <ErrorBanner error={error} />
      <pre ref={box} class="log" data-testid="log-text">
        {text || (complete ? "(empty)" : "")}
      </pre>
    </section>
  );
}

export function JobPage({ id }: { id: string }) {
  const job = useLoad(() => get<JobDetail>(`/api/v1/jobs/${encodeURIComponent(id)}`), [id]);
  const events = useLoad(() => get<JobEvent[]>(`/api/v1/jobs/${encodeURIComponent(id)}/events`), [id]);
  const [task, setTask] = useState<string | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const [stopping, setStopping] = useState(false);

  if (job.error && !job.data) {
    return (
      <div>
        <h2>Job {id}</h2>
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
        <h2>
          {detail.name} <span class="muted">{detail.id}</span> <StateBadge state={detail.state} />
        </h2>
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
      <dl class="facts">
        <dt>User</dt>
        <dd>{detail.user}</dd>
        <dt>Virtual cluster</dt>
        <dd>{detail.virtualCluster}</dd>
        <dt>Priority</dt>
        <dd>{detail.priorityClass}</dd>
        <dt>Format</dt>
        <dd>{detail.format}</dd>
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
            <dd>
              {detail.exitCode} {detail.exitClass ?? ""}
            </dd>
          </>
        ) : null}
      </dl>
      {detail.diagnostics ? <pre class="diagnostics">{detail.diagnostics}</pre> : null}
      <WhyWaiting job={detail} />
      <h3>Tasks</h3>
      {detail.tasks.length ? (
        <Tasks job={detail} onLogs={(t) => setTask(taskKey(t))} />
      ) : (
        <p class="muted">No task has been placed yet.</p>
      )}
      {shown ? <Logs job={detail} task={shown} /> : null}
      <h3>Timeline</h3>
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
