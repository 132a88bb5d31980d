import { get } from "../api";
import { Card, ErrorBanner, Loading, Meter } from "../components";
import { ClusterCharts } from "../chunks";
import type { Session } from "../types";
import { mib, num, useLoad } from "../util";
import { CloudPools } from "./pools";

const STATES = ["WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED"];

type Vector = { cpu: number | null; memoryMiB: number | null; gpu: number | null };

interface OverviewOut {
  nodes: { total: number; byState: Record<string, number> };
  capacity: Vector;
  allocated: Vector;
  used: Vector & { at: number | null };
  jobs: Record<string, number>;
  virtualClusters: {
    name: string;
    guarantee: Vector;
    used: Vector;
    borrowed: Vector;
    lent: Vector;
    waitingJobs: number;
    runningJobs: number;
  }[];
  /** The server has cloud pools (docs/cloud.md): GET /api/v1/pools answers. */
  cloudPools?: boolean;
}

function Resource({ title, data, key_, show }: { title: string; data: OverviewOut; key_: keyof Vector; show: (v: number | null) => string }) {
  const capacity = data.capacity[key_] ?? 0;
  const reserved = data.allocated[key_] ?? 0;
  const used = data.used[key_];
  return (
    <Card title={title}>
      <Meter used={reserved} total={capacity} label={`${show(reserved)} of ${show(capacity)} reserved`} />
      <p class="muted">{used === null ? "use: not reported" : `in use: ${show(used)}`}</p>
    </Card>
  );
}

function VcMeter({ used, guarantee, show }: { used: number | null; guarantee: number | null; show: (v: number | null) => string }) {
  return (
    <Meter
      used={used ?? 0}
      total={guarantee ?? used ?? 0}
      label={`${show(used)} / ${guarantee === null ? "any" : show(guarantee)}`}
    />
  );
}

export function Overview({ session }: { session: Session }) {
  const overview = useLoad(() => get<OverviewOut>("/api/v1/overview"), [], true, 1000, 15_000);
  const data = overview.data;
  const cores = (v: number | null) => num(v);
  return (
    <div>
      <h1>Cluster</h1>
      <ErrorBanner error={overview.error} />
      {!data ? (
        <Loading what="the cluster" />
      ) : (
        <>
          <div class="cards" data-testid="capacity">
            <Resource title="CPU (cores)" data={data} key_="cpu" show={cores} />
            <Resource title="Memory" data={data} key_="memoryMiB" show={mib} />
            <Resource title="GPUs" data={data} key_="gpu" show={cores} />
            <Card title="Nodes">
              <p class="big">{data.nodes.total}</p>
              <a href="#/nodes">
                {Object.entries(data.nodes.byState)
                  .filter(([, n]) => n)
                  .map(([s, n]) => `${n} ${s.toLowerCase().replace("_", " ")}`)
                  .join(", ") || "none"}
              </a>
            </Card>
          </div>
          <h2>Jobs by state</h2>
          <div class="states" data-testid="jobs-by-state">
            {STATES.map((state) => (
              <a class={`count state-${state.toLowerCase()}`} href={`#/jobs?state=${state}`}>
                <strong>{data.jobs[state] ?? 0}</strong> {state.toLowerCase()}
              </a>
            ))}
          </div>
        </>
      )}
      <h2>Use over time</h2>
      <ClusterCharts />
      <h2>Virtual clusters</h2>
      {data ? (
        <table class="list" data-testid="overview-vcs">
          <thead>
            <tr>
              <th>VC</th>
              <th>CPU used / guaranteed</th>
              <th>Memory</th>
              <th>GPUs</th>
              <th>Borrowed (cpu, gpu)</th>
              <th>Lent (cpu, gpu)</th>
              <th>Running</th>
              <th>Waiting</th>
            </tr>
          </thead>
          <tbody>
            {data.virtualClusters.map((vc) => (
              <tr>
                <td>
                  <a href="#/vcs">{vc.name}</a>
                </td>
                <td>
                  <VcMeter used={vc.used.cpu} guarantee={vc.guarantee.cpu} show={cores} />
                </td>
                <td>
                  <VcMeter used={vc.used.memoryMiB} guarantee={vc.guarantee.memoryMiB} show={mib} />
                </td>
                <td>
                  <VcMeter used={vc.used.gpu} guarantee={vc.guarantee.gpu} show={cores} />
                </td>
                <td>
                  {num(vc.borrowed.cpu)}, {num(vc.borrowed.gpu)}
                </td>
                <td>
                  {num(vc.lent.cpu)}, {num(vc.lent.gpu)}
                </td>
                <td>{vc.runningJobs}</td>
                <td>
                  <a href={`#/jobs?state=WAITING&vc=${encodeURIComponent(vc.name)}`}>{vc.waitingJobs}</a>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {data?.cloudPools ? <CloudPools session={session} /> : null}
    </div>
  );
}
