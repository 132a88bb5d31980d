// Time charts (uPlot): loaded with the pages that draw them (the overview, a node), never with
// the others.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

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
