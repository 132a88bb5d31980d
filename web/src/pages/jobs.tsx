import { useEffect, useState } from "preact/hooks";
import { call, get } from "../api";
import { ErrorBanner, Loading, StateBadge } from "../components";
import type { JobSummary, Session, VirtualCluster } from "../types";
import { ago, duration, useLoad, useNow } from "../util";

const STATES = ["WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED"];
const PAGE = 25;
const COLUMNS: [string, string][] = [
  ["name", "Job"],
  ["user", "User"],
  ["vc", "VC"],
  ["state", "State"],
  ["priority", "Priority"],
  ["submitted", "Submitted"],
];

function elapsed(job: JobSummary, now: number): string {
  if (!job.launchedAt) return "";
  return duration((job.completedAt ?? now) - job.launchedAt);
}

export function Jobs({ session, params }: { session: Session; params: URLSearchParams }) {
  const [search, setSearch] = useState(params.get("q") ?? "");
  const [query, setQuery] = useState(search);
  const [state, setState] = useState(params.get("state") ?? "");
  const [user, setUser] = useState(params.get("user") ?? (session.admin ? "all" : ""));
  const [vc, setVc] = useState(params.get("vc") ?? "");
  const [sort, setSort] = useState("-submitted");
  const [page, setPage] = useState(0);

  useEffect(() => {
    const t = window.setTimeout(() => {
      setQuery(search.trim());
      setPage(0);
    }, 250);
    return () => window.clearTimeout(t);
  }, [search]);

  const vcs = useLoad(() => get<VirtualCluster[]>("/api/v1/virtual-clusters"), [], false);
  const jobs = useLoad(async () => {
    const answer = await call<JobSummary[]>("GET", "/api/v1/jobs", {
      query: {
        q: query,
        state: state ? [state] : undefined,
        user: user || undefined,
        vc,
        sort,
        limit: PAGE,
        offset: page * PAGE,
        total: true,
      },
    });
    return { rows: answer.body, total: Number(answer.headers.get("X-Total-Count") ?? 0) };
  }, [query, state, user, vc, sort, page]);

  const now = useNow(Boolean(jobs.data?.rows.some((j) => j.launchedAt && !j.completedAt)));
  const total = jobs.data?.total ?? 0;
  const pages = Math.max(1, Math.ceil(total / PAGE));
  const sortBy = (key: string) => {
    setSort(sort === `-${key}` ? key : `-${key}`);
    setPage(0);
  };

  return (
    <div>
      <h1>Jobs</h1>
      <div class="filters">
        <input
          type="search"
          placeholder="Search name or id"
          aria-label="Search jobs"
          value={search}
          onInput={(e) => setSearch((e.target as HTMLInputElement).value)}
        />
        <select
          aria-label="State"
          value={state}
          onChange={(e) => {
            setState((e.target as HTMLSelectElement).value);
            setPage(0);
          }}
        >
          <option value="">any state</option>
          {STATES.map((s) => (
            <option value={s}>{s}</option>
          ))}
        </select>
        <input
          aria-label="User"
          placeholder={session.admin ? "all users" : "my jobs"}
          value={user === "all" ? "" : user}
          onChange={(e) => {
            const value = (e.target as HTMLInputElement).value.trim();
            setUser(value || (session.admin ? "all" : ""));
            setPage(0);
          }}
        />
        <select
          aria-label="Virtual cluster"
          value={vc}
          onChange={(e) => {
            setVc((e.target as HTMLSelectElement).value);
            setPage(0);
          }}
        >
          <option value="">any VC</option>
          {(vcs.data ?? []).map((v) => (
            <option value={v.name}>{v.name}</option>
          ))}
        </select>
        <a class="button" href="#/submit">
          Submit a job
        </a>
      </div>
      <ErrorBanner error={jobs.error} />
      {!jobs.data ? (
        <Loading what="jobs" />
      ) : (
        <>
          <table class="list" data-testid="jobs-table">
            <thead>
              <tr>
                <th>Id</th>
                {COLUMNS.map(([key, label]) => (
                  <th
                    class="sortable"
                    aria-sort={sort === key ? "ascending" : sort === `-${key}` ? "descending" : undefined}
                  >
                    <button class="sort" onClick={() => sortBy(key)}>
                      {label}
                      {sort === key ? " ▲" : sort === `-${key}` ? " ▼" : ""}
                    </button>
                  </th>
                ))}
                <th>Tasks</th>
                <th title="GPUs the job asks for, all its tasks together">GPU count</th>
                <th>Ran</th>
                <th>Waiting because</th>
              </tr>
            </thead>
            <tbody>
              {jobs.data.rows.map((job) => (
                <tr data-job={job.id}>
                  <td>
                    <a href={`#/jobs/${encodeURIComponent(job.id)}`}>{job.id}</a>
                  </td>
                  <td>
                    <a href={`#/jobs/${encodeURIComponent(job.id)}`}>{job.name}</a>
                  </td>
                  <td>{job.user}</td>
                  <td>{job.virtualCluster}</td>
                  <td>
                    <StateBadge state={job.state} />
                    {job.exitClass && job.state === "FAILED" ? (
                      <span class="muted"> {job.exitClass}</span>
                    ) : null}
                  </td>
                  <td>{job.priorityClass}</td>
                  <td title={new Date(job.submittedAt * 1000).toLocaleString()}>
                    {ago(job.submittedAt)}
                  </td>
                  <td>{job.taskCount}</td>
                  <td>{job.gpus}</td>
                  <td data-testid="ran">{elapsed(job, now)}</td>
                  <td class="reason">
                    {job.pending?.code
                      ? `${job.pending.position ? `#${job.pending.position} ` : ""}${job.pending.code}`
                      : ""}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {jobs.data.rows.length === 0 ? <p class="muted">No job matches.</p> : null}
          <div class="pager">
            <button class="secondary" disabled={page === 0} onClick={() => setPage(page - 1)}>
              ‹ Newer
            </button>
            <span>
              page {page + 1} of {pages} · {total} jobs
            </span>
            <button
              class="secondary"
              disabled={page + 1 >= pages}
              onClick={() => setPage(page + 1)}
            >
              Older ›
            </button>
          </div>
        </>
      )}
    </div>
  );
}
