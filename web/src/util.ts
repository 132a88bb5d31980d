// Formatting and small hooks shared by the pages.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, onChange } from "./api";

export const FINAL_STATES = new Set(["SUCCEEDED", "FAILED", "STOPPED"]);

export function ago(epoch: number | null | undefined, now = Date.now() / 1000): string {
  if (!epoch) return "";
  const s = Math.max(0, Math.round(now - epoch));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || seconds < 0) return "";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export function clock(epoch: number | null | undefined): string {
  if (!epoch) return "";
  return new Date(epoch * 1000).toLocaleString();
}

export function mib(value: number | null | undefined): string {
  if (value === null || value === undefined) return "";
  if (value >= 1024) return `${(value / 1024).toFixed(value >= 10240 ? 0 : 1)} GiB`;
  return `${Math.round(value)} MiB`;
}

export function num(value: number | null | undefined, digits = 1): string {
  if (value === null || value === undefined) return "";
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

export function errorText(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  return String(error);
}

export interface Loaded<T> {
  data: T | null;
  error: unknown;
  reload: () => void;
}

/** Load with ``loader`` now, again when ``deps`` change, again whenever the server says
 * something changed (at most every ``minGapMs``) when ``live``, and every ``everyMs`` if set
 * (figures that change without an event: load charts). */
export function useLoad<T>(
  loader: () => Promise<T>,
  deps: unknown[],
  live = true,
  minGapMs = 400,
  everyMs = 0,
): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const generation = useRef(0);
  const last = useRef(0);
  const timer = useRef<number | undefined>(undefined);

  const run = () => {
    const mine = ++generation.current;
    last.current = Date.now();
    loader().then(
      (value) => {
        if (mine === generation.current) {
          setData(value);
          setError(null);
        }
      },
      (err) => {
        if (mine === generation.current) setError(err);
      },
    );
  };

  useEffect(() => {
    setData(null);
    run();
    const every = everyMs > 0 ? window.setInterval(run, everyMs) : undefined;
    const off = live
      ? onChange(() => {
          const wait = Math.max(0, minGapMs - (Date.now() - last.current));
          window.clearTimeout(timer.current);
          timer.current = window.setTimeout(run, wait);
        })
      : () => undefined;
    return () => {
      off();
      window.clearInterval(every);
      window.clearTimeout(timer.current);
      generation.current++;
    };
  }, deps);

  return { data, error, reload: run };
}

export function useHashRoute(): string {
  const [hash, setHash] = useState(location.hash || "#/overview");
  useEffect(() => {
    const update = () => setHash(location.hash || "#/overview");
    window.addEventListener("hashchange", update);
    return () => window.removeEventListener("hashchange", update);
  }, []);
  return hash;
}

export function splitRoute(hash: string): { parts: string[]; params: URLSearchParams } {
  const [path, query = ""] = hash.replace(/^#\/?/, "").split("?", 2);
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query) };
}

export function go(path: string): void {
  location.hash = path;
}

/** The time now in epoch seconds, advancing every ``everyMs`` while ``active``: durations of
 * running things tick without waiting for the server. */
export function useNow(active: boolean, everyMs = 1000): number {
  const [now, setNow] = useState(Date.now() / 1000);
  useEffect(() => {
    if (!active) return undefined;
    setNow(Date.now() / 1000);
    const timer = window.setInterval(() => setNow(Date.now() / 1000), everyMs);
    return () => window.clearInterval(timer);
  }, [active, everyMs]);
  return active ? now : Date.now() / 1000;
}

// The exit codes shoal sets itself (OpenPAI's, core/lifecycle.py EXIT_CODES), and signals.
const EXIT_CODES: Record<number, string> = {
  [-210]: "stopped on request: by a user, by the job's own end, or by its agent shutting down",
  [-220]: "timed out: the job's max runtime was reached",
  [-1001]: "platform failure: it could not launch, or its node or agent was lost",
  [-1200]: "out of memory: killed by its memory limit",
  [-7120]: "preempted: its resources were given to another job",
  [-8000]: "ended without an exit code",
};
const SIGNALS: Record<number, string> = {
  1: "SIGHUP",
  2: "SIGINT",
  3: "SIGQUIT",
  4: "SIGILL",
  6: "SIGABRT",
  7: "SIGBUS",
  8: "SIGFPE",
  9: "SIGKILL",
  11: "SIGSEGV",
  13: "SIGPIPE",
  14: "SIGALRM",
  15: "SIGTERM",
};

/** What an exit code means, in words (empty for none). */
export function exitMeaning(code: number | null | undefined): string {
  if (code === null || code === undefined) return "";
  if (code in EXIT_CODES) return EXIT_CODES[code];
  if (code === 0) return "success";
  if (code > 128 && code <= 128 + 64) {
    const signal = code - 128;
    return `killed by signal ${signal}${SIGNALS[signal] ? ` (${SIGNALS[signal]})` : ""}`;
  }
  if (code < 0) return "set by the platform";
  return "the command's own exit code (non-zero: it failed)";
}

// Warnings the server gave when a job was submitted, shown once on the job's page.
const submitWarnings = new Map<string, { path: string; message: string }[]>();

export function keepSubmitWarnings(job: string, warnings: { path: string; message: string }[]): void {
  if (warnings.length) submitWarnings.set(job, warnings);
}

export function takeSubmitWarnings(job: string): { path: string; message: string }[] {
  const warnings = submitWarnings.get(job) ?? [];
  submitWarnings.delete(job);
  return warnings;
}
