// Charts over time from the server's bounded metrics history (docs/metrics.md).
import { get } from "./api";
import { ErrorBanner, type Series, TimeChart } from "./components";
import { useLoad } from "./util";

export interface MetricSeries {
  t: number[];
  [column: string]: number[] | (number | null)[] | unknown;
}

function column(body: MetricSeries, name: string): (number | null)[] {
  const values = body[name];
  return Array.isArray(values) ? (values as (number | null)[]) : [];
}

const CHARTS: { title: string; unit: string; lines: [string, string, string][] }[] = [
  {
    title: "CPU",
    unit: "cores",
    lines: [
      ["capacity", "cpu_capacity", "#9aa5b1"],
      ["reserved", "cpu_allocated", "#3d7dd8"],
      ["in use", "cpu_used", "#e8590c"],
    ],
  },
  {
    title: "Memory",
    unit: "GiB",
    lines: [
      ["capacity", "memory_capacity_gib", "#9aa5b1"],
      ["reserved", "memory_allocated_gib", "#3d7dd8"],
      ["in use", "memory_used_gib", "#e8590c"],
    ],
  },
  {
    title: "GPUs",
    unit: "GPUs",
    lines: [
      ["capacity", "gpu_capacity", "#9aa5b1"],
      ["reserved", "gpu_allocated", "#3d7dd8"],
      ["busy", "gpu_busy", "#e8590c"],
    ],
  },
];

function Charts({ body }: { body: MetricSeries }) {
  return (
    <div class="charts">
      {CHARTS.map((chart) => {
        const series: Series[] = chart.lines
          .map(([label, name, color]) => ({ label, values: column(body, name), color }))
          .filter((s) => s.values.length === body.t.length && s.values.some((v) => v !== null));
        if (!series.length) return null;
        return <TimeChart title={chart.title} unit={chart.unit} times={body.t} series={series} />;
      })}
    </div>
  );
}

export function ClusterCharts() {
  const metrics = useLoad(() => get<MetricSeries>("/api/v1/metrics/cluster"), [], true, 5000);
  return (
    <section>
      <ErrorBanner error={metrics.error} />
      {metrics.data ? <Charts body={metrics.data} /> : null}
    </section>
  );
}

export function NodeCharts({ name }: { name: string }) {
  const metrics = useLoad(
    () => get<MetricSeries>(`/api/v1/nodes/${encodeURIComponent(name)}/metrics`),
    [name],
    true,
    5000,
  );
  return (
    <section data-testid="node-charts">
      <h3>Load</h3>
      <ErrorBanner error={metrics.error} />
      {metrics.data ? <Charts body={metrics.data} /> : null}
    </section>
  );
}
