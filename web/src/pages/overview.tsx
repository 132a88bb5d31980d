import { get } from "../api";
import { Card, ErrorBanner, Loading, Meter } from "../components";
import { ClusterCharts } from "../metrics";
import type { ClusterStatus, VirtualCluster } from "../types";
import { mib, num, useLoad } from "../util";

const STATES = ["WAITING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED"];

export function Overview() {
  const cluster = useLoad(() => get<ClusterStatus>("/api/v1/cluster"), []);
  const vcs = useLoad(() => get<VirtualCluster[]>("/api/v1/virtual-clusters"), []);
  const data = cluster.data;
  return (
    <div>
      <h2>Cluster</h2>
      <ErrorBanner error={cluster.error} />
      {!data ? (
        <Loading what="the cluster" />
      ) : (
        <div class="cards" data-testid="capacity">
          <Card title="CPU">
            <Meter
              used={data.allocated.cpus ?? 0}
              total={data.totals.cpus ?? 0}
              label={`${num(data.allocated.cpus)} of ${num(data.totals.cpus)} cores reserved`}
            />
          </Card>
          <Card title="Memory">
            <Meter
              used={data.allocated.memoryMiB ?? 0}
              total={data.totals.memoryMiB ?? 0}
              label={`${mib(data.allocated.memoryMiB)} of ${mib(data.totals.memoryMiB)} reserved`}
            />
          </Card>
          <Card title="GPUs">
            <Meter
              used={data.allocated.gpus ?? 0}
              total={data.totals.gpus ?? 0}
              label={`${num(data.allocated.gpus)} of ${num(data.totals.gpus)} reserved`}
            />
          </Card>
          <Card title="Nodes">
            <p class="big">{data.nodes.length}</p>
            <a href="#/nodes">{data.nodes.filter((n) => n.state === "READY").length} ready</a>
          </Card>
        </div>
      )}
      <h3>Jobs by state</h3>
      {data ? (
        <div class="states" data-testid="jobs-by-state">
          {STATES.map((state) => (
            <a class={`count state-${state.toLowerCase()}`} href={`#/jobs?state=${state}`}>
              <strong>{data.jobs[state] ?? 0}</strong> {state.toLowerCase()}
            </a>
          ))}
        </div>
      ) : null}
      <h3>Use over time</h3>
      <ClusterCharts />
      <h3>Virtual clusters</h3>
      <ErrorBanner error={vcs.error} />
      <table class="list">
        <thead>
          <tr>
            <th>VC</th>
            <th>CPU used / guaranteed</th>
            <th>GPUs used / guaranteed</th>
            <th>Borrowing</th>
          </tr>
        </thead>
        <tbody>
          {(vcs.data ?? []).map((vc) => {
            const cpuG = vc.guarantee.cpu;
            const gpuG = vc.guarantee.gpu;
            const borrowing =
              (cpuG !== null && (vc.used.cpu ?? 0) > cpuG) || (gpuG !== null && (vc.used.gpu ?? 0) > gpuG);
            return (
              <tr>
                <td>
                  <a href="#/vcs">{vc.name}</a>
                </td>
                <td>
                  <Meter
                    used={vc.used.cpu ?? 0}
                    total={cpuG ?? vc.clusterTotal.cpu ?? 0}
                    label={`${num(vc.used.cpu)} / ${cpuG === null ? "any" : num(cpuG)}`}
                  />
                </td>
                <td>
                  <Meter
                    used={vc.used.gpu ?? 0}
                    total={gpuG ?? vc.clusterTotal.gpu ?? 0}
                    label={`${num(vc.used.gpu)} / ${gpuG === null ? "any" : num(gpuG)}`}
                  />
                </td>
                <td>{borrowing ? "yes" : ""}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
