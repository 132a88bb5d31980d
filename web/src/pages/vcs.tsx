import { useState } from "preact/hooks";
import { get } from "../api";
import { ErrorBanner, Loading, Meter, Notice } from "../components";
import type { FieldChange, JobSummary, Session, VirtualCluster } from "../types";
import { ago, mib, num, useLoad } from "../util";
import { Changes, VcEditor } from "./vc-editor";

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

export function VirtualClusters({ session }: { session: Session }) {
  const vcs = useLoad(() => get<VirtualCluster[]>("/api/v1/virtual-clusters"), []);
  const [editing, setEditing] = useState<string | null>(null);
  const [saved, setSaved] = useState<{ name: string; changes: FieldChange[] } | null>(null);
  return (
    <div>
      <h1>Virtual clusters</h1>
      <ErrorBanner error={vcs.error} />
      {saved ? (
        <Notice kind="success" testid="vc-saved">
          Saved virtual cluster {saved.name}:
          <Changes changes={saved.changes} />
        </Notice>
      ) : null}
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
              {session.admin ? (
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              ) : null}
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
                      <button
                        class="secondary small"
                        aria-expanded={editing === vc.name}
                        onClick={() => {
                          setEditing(editing === vc.name ? null : vc.name);
                          setSaved(null);
                        }}
                      >
                        Edit
                      </button>
                    </td>
                  ) : null}
                </tr>
                {editing === vc.name ? (
                  <tr>
                    <td colSpan={8}>
                      <VcEditor
                        vc={vc}
                        onSaved={(changes) => {
                          setSaved({ name: vc.name, changes });
                          setEditing(null);
                          vcs.reload();
                        }}
                        onCancel={() => setEditing(null)}
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
