// The parts with big libraries, each loaded by the first page that shows it (its own chunk:
// vite.config.ts names them): the job file editor (CodeMirror), the terminal (xterm.js) and the
// charts (uPlot). The jobs list, a job's page and the others never download them.
import { lazy } from "./components";

export const Submit = lazy(() => import("./pages/submit").then((m) => m.Submit), "the job file editor");
export const TerminalPage = lazy(() => import("./pages/terminal").then((m) => m.TerminalPage), "the terminal");
export const ClusterCharts = lazy(() => import("./metrics").then((m) => m.ClusterCharts), "the charts");
export const NodeCharts = lazy(() => import("./metrics").then((m) => m.NodeCharts), "the charts");
