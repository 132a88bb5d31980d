// One task's log: stdout or stderr, followed while it grows, downloadable whole.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, get, withQuery } from "../api";
import { ErrorBanner } from "../components";
import type { JobDetail, LogChunk } from "../types";

export function Logs({ job, task }: { job: JobDetail; task: string }) {
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
  const placeholder = complete
    ? `(empty: the task wrote nothing to ${stream})`
    : follow
      ? `waiting for output on ${stream}…`
      : `no output on ${stream} yet (follow is off)`;
  return (
    <section class="logs" data-testid="logs">
      <div class="logbar">
        <h2>Logs of {task}</h2>
        <div class="tabs">
          {(["stdout", "stderr"] as const).map((s) => (
            <button class={s === stream ? "tab active" : "tab"} aria-pressed={s === stream} onClick={() => setStream(s)}>
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
      <pre
        ref={box}
        class="log"
        data-testid="log-text"
        role="log"
        aria-live="off"
        aria-label={`${stream} of ${task}`}
        tabIndex={0}
      >
        {text || (
          <span class="log-placeholder" data-testid="log-placeholder">
            {placeholder}
          </span>
        )}
      </pre>
    </section>
  );
}
