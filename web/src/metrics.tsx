// Charts over time from the server's bounded metrics history (docs/metrics.md): columns as uPlot
// takes them, `t` and one list per figure with null where there is no figure.
import { get } from "./api";
import { type Series, TimeChart } from "./charts";
import { ErrorBanner } from "./components";
import { useLoad } from "./util";

type Column = (number | null)[];

export interface MetricSeries {
  t: number[];
  series: Record<string, Column>;
  gpus?: { index: number; series: Record<string, Column> }[];
}

const GIB = (values: Column): Column => values.map((v) => (v === null ? null : v / 1024));

const CHARTS: { title: string; unit: string; lines: [string, string, string][]; scale?: (c: Column) => Column }[] = [
  {
    title: "CPU",
    unit: "cores",
    lines: [
      ["capacity", "cpuCapacity", "#9aa5b1"],
      ["reserved", "cpuAllocated", "#3d7dd8"],
      ["in use", "cpuUsed", "#e8590c"],
    ],
  },
  {
    title: "Memory",
    unit: "GiB",
    scale: GIB,
    lines: [
      ["capacity", "memoryCapacityMiB", "#9aa5b1"],
      ["reserved", "memoryAllocatedMiB", "#3d7dd8"],
      ["in use", "memoryUsedMiB", "#e8590c"],
    ],
  },
  {
    title: "GPUs",
    unit: "GPUs",
    lines: [
      ["capacity", "gpuCapacity", "#9aa5b1"],
      ["reserved", "gpuAllocated", "#3d7dd8"],
      ["busy", "gpuUsed", "#e8590c"],
    ],
  },
];

const COLORS = ["#e8590c", "#2f9e44", "#7048e8", "#1098ad", "#d6336c", "#f59f00", "#495057", "#3d7dd8"];

/** Leave out the points before the first figure: a young cluster's hour is mostly empty, and
 * the chart should span what there is. */
function trimmed(body: MetricSeries): MetricSeries {
  const columns = [...Object.values(body.series), ...(body.gpus ?? []).flatMap((g) => Object.values(g.series))];
  let first = body.t.findIndex((_, i) => columns.some((c) => c[i] !== null && c[i] !== undefined));
  if (first < 0) first = Math.max(0, body.t.length - 1);
  const cut = (c: Column) => c.slice(first);
  return {
    t: body.t.slice(first),
    series: Object.fromEntries(Object.entries(body.series).map(([k, v]) => [k, cut(v)])),
    gpus: body.gpus?.map((g) => ({
      index: g.index,
      series: Object.fromEntries(Object.entries(g.series).map(([k, v]) => [k, cut(v)])),
    })),
  };
}

function Charts({ body: raw }: { body: MetricSeries }) {
  const body = trimmed(raw);
  const charts = CHARTS.map((chart) => {
    const series: Series[] = chart.lines
      .map(([label, name, color]) => {
        const values = body.series[name] ?? [];
        return { label, values: chart.scale ? chart.scale(values) : values, color };
      })
      .filter((s) => s.values.length === body.t.length && s.values.some((v) => v !== null));
    // GPUs: only when the cluster has some
    if (chart.title === "GPUs" && !series.some((s) => s.values.some((v) => v))) return null;
    if (!series.length) return null;
    return <TimeChart title={chart.title} unit={chart.unit} times={body.t} series={series} />;
  });
  const gpus = body.gpus ?? [];
  return (
    <div class="charts">
      {charts}
      {gpus.length ? (
        <TimeChart
          title="GPU utilisation (NVML)"
          unit="%"
          times={body.t}
          series={gpus.map((g, i) => ({
            label: `GPU ${g.index}`,
            values: g.series.utilizationPercent ?? [],
            color: COLORS[i % COLORS.length],
          }))}
        />
      ) : null}
    </div>
  );
}

export function ClusterCharts() {
  const metrics = useLoad(() => get<MetricSeries>("/api/v1/metrics/cluster"), [], false, 0, 10_000);
  return (
    <section data-testid="cluster-charts">
      <ErrorBanner error={metrics.error} />
      {metrics.data ? <Charts body={metrics.data} /> : null}
    </section>
  );
}

export function NodeCharts({ name }: { name: string }) {
  const metrics = useLoad(
    () => get<MetricSeries>(`/api/v1/nodes/${encodeURIComponent(name)}/metrics`),
    [name],
    false,
    0,
    10_000,
  );
  return (
    <section data-testid="node-charts">
      <h2>Load</h2>
      <ErrorBanner error={metrics.error} />
      {metrics.data ? <Charts body={metrics.data} /> : null}
    </section>
  );
}
