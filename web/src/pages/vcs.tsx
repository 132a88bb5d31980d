import { useState } from "preact/hooks";
import { call, get } from "../api";
import { ErrorBanner, Loading, Meter } from "../components";
import type { JobSummary, Session, VirtualCluster } from "../types";
import { ago, mib, num, useLoad } from "../util";

type Limit = Record<string, number | null>;

function limitText(limit: Limit | null, key: string, memory = false): string {
  if (!limit) return "any";
  const value = limit[key];
  if (value === null || value === undefined) return "any";
  return memory ? mib(value) : num(value);
}

function UseMeter({ vc, resource, memory = false }: { vc: VirtualCluster; resource: string; memory?: boolean }) {
  const used = vc.used[resource] ?? 0;
  const guarantee = vc.guarantee[resource];
  const total = guarantee ?? vc.clusterTotal[resource] ?? 0;
  const borrowed = guarantee !== null && guarantee !== undefined && used > guarantee;
  const show = (v: number) => (memory ? mib(v) : num(v));
  return (
    <div class={borrowed ? "borrowing" : ""}>
      <Meter used={used} total={total} label={`${show(used)} / ${guarantee === null ? "any" : show(guarantee ?? 0)}`} />
      {borrowed ? <span class="muted">borrowing {show(used - (guarantee ?? 0))}</span> : null}
    </div>
  );
}

function Queue({ vc }: { vc: string }) {
  const queue = useLoad(
    () =>
      get<JobSummary[]>("/api/v1/jobs", { vc, state: ["WAITING"], user: "all", sort: "submitted", limit: 10 }),
    [vc],
  );
  if (!queue.data || queue.data.length === 0) return <span class="muted">empty</span>;
  return (
    <span>
      {queue.data.map((job) => (
        <a href={`#/jobs/${encodeURIComponent(job.id)}`} title={job.pending?.message ?? ""}>
          {job.pending?.position ? `#${job.pending.position} ` : ""}
          {job.name} ({job.user}, {ago(job.submittedAt)}){" "}
        </a>
      ))}
    </span>
  );
}

const FIELDS: [string, string][] = [
  ["guarantee_cpu", "Guaranteed CPUs"],
  ["guarantee_memory_mib", "Guaranteed memory (MiB)"],
  ["guarantee_gpu", "Guaranteed GPUs"],
  ["borrow_cpu", "May borrow CPUs"],
  ["borrow_memory_mib", "May borrow memory (MiB)"],
  ["borrow_gpu", "May borrow GPUs"],
];

function initial(vc: VirtualCluster): Record<string, string> {
  const pick = (limit: Limit | null, key: string) => {
    const v = limit ? limit[key] : null;
    return v === null || v === undefined ? "" : String(v);
  };
  return {
    guarantee_cpu: pick(vc.guarantee, "cpu"),
    guarantee_memory_mib: pick(vc.guarantee, "memoryMiB"),
    guarantee_gpu: pick(vc.guarantee, "gpu"),
    borrow_cpu: pick(vc.borrowLimit, "cpu"),
    borrow_memory_mib: pick(vc.borrowLimit, "memoryMiB"),
    borrow_gpu: pick(vc.borrowLimit, "gpu"),
    members: vc.members.join(", "),
  };
}

function Editor({ vc, onDone }: { vc: VirtualCluster; onDone: () => void }) {
  const [values, setValues] = useState(initial(vc));
  const [error, setError] = useState<unknown>(null);
  const [changes, setChanges] = useState<string | null>(null);
  const patch = () => {
    const body: Record<string, unknown> = {};
    const before = initial(vc);
    for (const [key] of FIELDS) {
      if (values[key] !== before[key]) body[key] = values[key] === "" ? null : Number(values[key]);
    }
    if (values.members !== before.members) {
      body.members = values.members.split(",").map((m) => m.trim()).filter(Boolean);
    }
    return body;
  };
  const send = async (dryRun: boolean) => {
    try {
      const { body } = await call<{ changes: Record<string, [unknown, unknown]> }>(
        "PATCH",
        `/api/v1/virtual-clusters/${encodeURIComponent(vc.name)}`,
        { body: patch(), query: { dryRun } },
      );
      setError(null);
      const text = Object.entries(body.changes ?? {})
        .map(([k, [a, b]]) => `${k}: ${JSON.stringify(a)} → ${JSON.stringify(b)}`)
        .join("; ");
      setChanges(text || "nothing changes");
      if (!dryRun) onDone();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div class="vc-editor" data-testid="vc-editor">
      {FIELDS.map(([key, label]) => (
        <label>
          {label}
          <input
            name={key}
            inputMode="decimal"
            placeholder="any"
            value={values[key]}
            onInput={(e) => setValues({ ...values, [key]: (e.target as HTMLInputElement).value })}
          />
        </label>
      ))}
      <label>
        Members (users and groups)
        <input
          name="members"
          value={values.members}
          onInput={(e) => setValues({ ...values, members: (e.target as HTMLInputElement).value })}
        />
      </label>
      <ErrorBanner error={error} />
      {changes ? <p class="muted">{changes}</p> : null}
      <button class="secondary" onClick={() => send(true)}>
        Preview changes
      </button>{" "}
      <button onClick={() => send(false)}>Save</button>
    </div>
  );
}

export function VirtualClusters({ session }: { session: Session }) {
  const vcs = useLoad(() => get<VirtualCluster[]>("/api/v1/virtual-clusters"), []);
  const [editing, setEditing] = useState<string | null>(null);
  return (
    <div>
      <h2>Virtual clusters</h2>
      <ErrorBanner error={vcs.error} />
      {!vcs.data ? (
        <Loading what="virtual clusters" />
      ) : (
        <table class="list" data-testid="vcs-table">
          <thead>
            <tr>
              <th>VC</th>
              <th>CPU used / guaranteed</th>
              <th>Memory</th>
              <th>GPUs</th>
              <th>May borrow (cpu, mem, gpu)</th>
              <th>Members</th>
              <th>Queue</th>
              {session.admin ? <th /> : null}
            </tr>
          </thead>
          <tbody>
            {vcs.data.map((vc) => (
              <>
                <tr data-vc={vc.name}>
                  <td>
                    <strong>{vc.name}</strong>
                    <div class="muted">{vc.description}</div>
                  </td>
                  <td>
                    <UseMeter vc={vc} resource="cpu" />
                  </td>
                  <td>
                    <UseMeter vc={vc} resource="memoryMiB" memory />
                  </td>
                  <td>
                    <UseMeter vc={vc} resource="gpu" />
                  </td>
                  <td>
                    {limitText(vc.borrowLimit, "cpu")}, {limitText(vc.borrowLimit, "memoryMiB", true)},{" "}
                    {limitText(vc.borrowLimit, "gpu")}
                  </td>
                  <td>{vc.members.join(", ")}</td>
                  <td>
                    <Queue vc={vc.name} />
                  </td>
                  {session.admin ? (
                    <td>
                      {vc.name === "default" ? null : (
                        <button class="secondary small" onClick={() => setEditing(editing === vc.name ? null : vc.name)}>
                          Edit
                        </button>
                      )}
                    </td>
                  ) : null}
                </tr>
                {editing === vc.name ? (
                  <tr>
                    <td colSpan={8}>
                      <Editor
                        vc={vc}
                        onDone={() => {
                          vcs.reload();
                        }}
                      />
                    </td>
                  </tr>
                ) : null}
              </>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
