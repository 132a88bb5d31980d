import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { errorText } from "./util";

export function StateBadge({ state }: { state: string }) {
  return <span class={`badge state-${state.toLowerCase()}`} data-state={state}>{state}</span>;
}

export function ErrorBanner({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      {errorText(error)}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return <p class="muted">Loading {what}…</p>;
}

export function Card({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <section class="card">
      <h3>{title}</h3>
      {children}
    </section>
  );
}

export function Meter({ used, total, label }: { used: number; total: number; label: string }) {
  const share = total > 0 ? Math.min(1, used / total) : 0;
  return (
    <div class="meter" title={label}>
      <div class="meter-bar" style={{ width: `${Math.round(share * 100)}%` }} />
      <span>{label}</span>
    </div>
  );
}

export interface Series {
  label: string;
  values: (number | null)[];
  color: string;
}

/** A time chart (uPlot): ``times`` in epoch seconds, one line per series. */
export function TimeChart({
  title,
  times,
  series,
  unit,
  height = 180,
}: {
  title: string;
  times: number[];
  series: Series[];
  unit: string;
  height?: number;
}) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const shape = series.map((s) => s.label).join("|");
  useEffect(() => {
    if (!host.current) return undefined;
    const width = Math.max(280, host.current.clientWidth || 480);
    chart.current = new uPlot(
      {
        title,
        width,
        height,
        scales: { x: { time: true } },
        axes: [{}, { label: unit, size: 60 }],
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2 }))],
      },
      [times, ...series.map((s) => s.values)] as uPlot.AlignedData,
      host.current,
    );
    const resize = () => {
      if (host.current && chart.current) {
        chart.current.setSize({ width: Math.max(280, host.current.clientWidth), height });
      }
    };
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      chart.current?.destroy();
      chart.current = null;
    };
  }, [shape, title, unit, height]);
  useEffect(() => {
    chart.current?.setData([times, ...series.map((s) => s.values)] as uPlot.AlignedData);
  }, [times, series]);
  return <div class="chart" ref={host} data-points={times.length} />;
}
