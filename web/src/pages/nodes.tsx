import { useState } from "preact/hooks";
import { get, post } from "../api";
import { ErrorBanner, Loading, Meter, StateBadge } from "../components";
import { NodeCharts } from "../chunks";
import type { NodeOut, Session } from "../types";
import { ago, clock, mib, num, useLoad } from "../util";

function Actions({ node, onDone }: { node: NodeOut; onDone: (e: unknown) => void }) {
  const act = async (verb: string) => {
    try {
      await post(`/api/v1/nodes/${encodeURIComponent(node.name)}/${verb}`);
      onDone(null);
    } catch (err) {
      onDone(err);
    }
  };
  return (
    <span class="actions">
      {node.schedulable ? (
        <>
          <button class="secondary small" onClick={() => act("cordon")}>
            Cordon
          </button>
          <button class="secondary small" onClick={() => act("drain")}>
            Drain
          </button>
        </>
      ) : (
        <button class="secondary small" onClick={() => act("uncordon")}>
          Uncordon
        </button>
      )}
    </span>
  );
}

function NodeRow({ node, admin, onDone }: { node: NodeOut; admin: boolean; onDone: (e: unknown) => void }) {
  const cpu = node.allocated.cpus ?? 0;
  const memory = node.allocated.memoryMiB ?? 0;
  const gpus = node.allocated.gpus ?? 0;
  return (
    <tr data-node={node.name}>
      <td>
        <a href={`#/nodes/${encodeURIComponent(node.name)}`}>{node.name}</a>
      </td>
      <td>
        <StateBadge state={node.state} />
        {node.schedulable ? "" : <span class="muted"> cordoned</span>}
      </td>
      <td>{node.address}</td>
      <td>
        <Meter used={cpu} total={node.cpus} label={`${num(cpu)} / ${num(node.cpus)}`} />
      </td>
      <td>
        <Meter used={memory} total={node.memoryMiB} label={`${mib(memory)} / ${mib(node.memoryMiB)}`} />
      </td>
      <td>
        {node.gpus ? (
          <Meter used={gpus} total={node.gpus} label={`${gpus} / ${node.gpus} ${node.gpuType ?? ""}`} />
        ) : (
          "—"
        )}
      </td>
      <td>{node.tasks}</td>
      <td>
        {Object.entries(node.labels)
          .map(([k, v]) => `${k}=${v}`)
          .join(" ")}
      </td>
      <td>{ago(node.lastSeen)}</td>
      {admin ? (
        <td>
          <Actions node={node} onDone={onDone} />
        </td>
      ) : null}
    </tr>
  );
}

export function Nodes({ session }: { session: Session }) {
  const nodes = useLoad(() => get<NodeOut[]>("/api/v1/nodes"), []);
  const [error, setError] = useState<unknown>(null);
  const done = (err: unknown) => {
    setError(err);
    nodes.reload();
  };
  return (
    <div>
      <h1>Nodes</h1>
      <ErrorBanner error={error ?? nodes.error} />
      {!nodes.data ? (
        <Loading what="nodes" />
      ) : (
        <table class="list" data-testid="nodes-table">
          <thead>
            <tr>
              <th>Node</th>
              <th>State</th>
              <th>Address</th>
              <th>CPU reserved</th>
              <th>Memory reserved</th>
              <th>GPUs reserved</th>
              <th>Tasks</th>
              <th>Labels</th>
              <th>Seen</th>
              {session.admin ? (
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              ) : null}
            </tr>
          </thead>
          <tbody>
            {nodes.data.map((node) => (
              <NodeRow node={node} admin={session.admin} onDone={done} />
            ))}
          </tbody>
        </table>
      )}
      {nodes.data && nodes.data.length === 0 ? (
        <p class="muted">No node has joined. `shoal up` starts local ones; `shoal agent join` adds machines.</p>
      ) : null}
    </div>
  );
}

interface NodeTask {
  jobId: string;
  jobName: string;
  user: string;
  role: string;
  index: number;
  state: string;
  cpu: number;
  memoryMiB: number;
  gpus: number[];
  ports: Record<string, number[]>;
  startedAt: number | null;
  usage: Record<string, number>;
  command: string | null;
}

function NodeTasks({ name }: { name: string }) {
  const tasks = useLoad(() => get<NodeTask[]>(`/api/v1/nodes/${encodeURIComponent(name)}/tasks`), [name]);
  return (
    <section>
      <h2>Tasks on this node</h2>
      <ErrorBanner error={tasks.error} />
      {tasks.data && tasks.data.length === 0 ? <p class="muted">None.</p> : null}
      {tasks.data && tasks.data.length ? (
        <table class="list" data-testid="node-tasks">
          <thead>
            <tr>
              <th>Job</th>
              <th>Task</th>
              <th>User</th>
              <th>State</th>
              <th>CPU</th>
              <th>Memory</th>
              <th title="The indices of the GPUs the task was given on this node">GPU indices</th>
              <th>Ports</th>
              <th>Started</th>
            </tr>
          </thead>
          <tbody>
            {tasks.data.map((t) => (
              <tr>
                <td>
                  <a href={`#/jobs/${encodeURIComponent(t.jobId)}`}>
                    {t.jobName} <span class="muted">{t.jobId}</span>
                  </a>
                </td>
                <td title={t.command ?? ""}>
                  {t.role}/{t.index}
                </td>
                <td>{t.user}</td>
                <td>
                  <StateBadge state={t.state} />
                </td>
                <td>{num(t.cpu)}</td>
                <td>{mib(t.memoryMiB)}</td>
                <td>{t.gpus.length ? t.gpus.join(", ") : "none"}</td>
                <td>
                  {Object.entries(t.ports)
                    .map(([k, v]) => `${k}=${v.join(",")}`)
                    .join(" ")}
                </td>
                <td>{ago(t.startedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

interface NodeEvent {
  at: number;
  kind: string;
  by: string;
  message: string;
}

export function NodePage({ name, session }: { name: string; session: Session }) {
  const nodes = useLoad(() => get<NodeOut[]>("/api/v1/nodes"), [name]);
  const events = useLoad(() => get<NodeEvent[]>(`/api/v1/nodes/${encodeURIComponent(name)}/events`), [name]);
  const [error, setError] = useState<unknown>(null);
  const node = nodes.data?.find((n) => n.name === name);
  if (nodes.data && !node) {
    return (
      <div>
        <h1>Node {name}</h1>
        <ErrorBanner error={`no node ${name}`} />
      </div>
    );
  }
  if (!node) return <Loading what={`node ${name}`} />;
  return (
    <div>
      <div class="titlebar">
        <h1>
          {node.name} <StateBadge state={node.state} />
        </h1>
        {session.admin ? (
          <Actions
            node={node}
            onDone={(err) => {
              setError(err);
              nodes.reload();
            }}
          />
        ) : null}
      </div>
      <ErrorBanner error={error} />
      <dl class="facts">
        <dt>Address</dt>
        <dd>{node.address}</dd>
        <dt>Capacity</dt>
        <dd>
          {num(node.cpus)} CPUs, {mib(node.memoryMiB)}, {node.gpus} GPUs {node.gpuType ?? ""}
        </dd>
        <dt>Agent</dt>
        <dd>
          {node.agentVersion ?? ""} · seen {ago(node.lastSeen)}
        </dd>
        {Object.keys(node.unsupported).length ? (
          <>
            <dt>Cannot</dt>
            <dd>
              {Object.entries(node.unsupported)
                .map(([k, v]) => `${k}: ${v}`)
                .join("; ")}
            </dd>
          </>
        ) : null}
      </dl>
      <NodeCharts name={node.name} />
      <NodeTasks name={node.name} />
      <h2>Events</h2>
      <ol class="timeline">
        {(events.data ?? []).map((e) => (
          <li>
            <time>{clock(e.at)}</time> <strong>{e.kind}</strong> {e.message}{" "}
            <span class="muted">{e.by}</span>
          </li>
        ))}
      </ol>
    </div>
  );
}
