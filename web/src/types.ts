// The shapes the pages read, as the API answers them (tests/server/openapi.snapshot.json).

export interface Session {
  signedIn: boolean;
  user: string;
  admin: boolean;
  groups: string[];
  csrfToken: string;
}

export interface PendingReason {
  code: string | null;
  message: string | null;
  position: number | null;
}

export interface JobSummary {
  id: string;
  name: string;
  user: string;
  virtualCluster: string;
  state: string;
  priorityClass: string;
  submittedAt: number;
  launchedAt: number | null;
  completedAt: number | null;
  attempt: number;
  exitCode: number | null;
  exitClass: string | null;
  taskCount: number;
  gpus: number;
  nodes: string[];
  pending: PendingReason | null;
}

export interface Task {
  role: string;
  index: number;
  state: string;
  node: string;
  address: string;
  gpus: number[];
  ports: Record<string, number[]>;
  attempt: number;
  job_attempt: number;
  exitCode: number | null;
  exitClass: string | null;
  diagnostics: string;
  startedAt: number | null;
  finishedAt: number | null;
  pid: number | null;
  usage: Record<string, number>;
}

export interface JobDetail extends JobSummary {
  format: string;
  diagnostics: string;
  roles: Record<string, unknown>[];
  tasks: Task[];
  retries: { platform: number; resource: number; user: number };
}

export interface JobEvent {
  at: number;
  kind: string;
  role: string | null;
  index: number | null;
  message: string;
}

export interface JobRef {
  id: string;
  user: string;
  name: string;
  virtualCluster: string;
  gpus: number;
}

export interface PendingDetail {
  id: string;
  state: string;
  virtualCluster: string;
  code: string | null;
  message: string | null;
  position: number | null;
  blockers: string[] | null;
  preempting: string[];
  blockerDetails?: JobRef[] | null;
  preemptingDetails?: JobRef[];
  /** What it waits for from the cloud pools, in words (docs/cloud.md). */
  pools?: string[];
}

export interface LogChunk {
  data: string;
  offset: number;
  nextOffset: number;
  complete: boolean;
  attempt: number;
}

export interface NodeOut {
  name: string;
  address: string;
  state: string;
  schedulable: boolean;
  hold: string;
  cpus: number;
  memoryMiB: number;
  gpus: number;
  gpuType: string | null;
  allocated: Record<string, number>;
  usage: Record<string, number>;
  tasks: number;
  labels: Record<string, string>;
  lastSeen: number;
  agentVersion: string | null;
  unsupported: Record<string, string>;
}

export interface VirtualCluster {
  name: string;
  description: string;
  guarantee: Record<string, number | null>;
  used: Record<string, number>;
  borrowLimit: Record<string, number | null> | null;
  members: string[];
  strictFifo: boolean;
  preemptWithin: boolean;
  userGpuCap: number | null;
  clusterTotal: Record<string, number>;
  /** Interactive jobs idle this long (seconds) are stopped; null: never (docs/notebooks.md). */
  idleTimeoutS?: number | null;
}

export interface ClusterStatus {
  totals: Record<string, number>;
  allocated: Record<string, number>;
  jobs: Record<string, number>;
  nodes: NodeOut[];
  version: string;
  /** The task proxy's port (null: off): a task's ports are at HOST:proxyPort/proxy/... */
  proxyPort: number | null;
}

export interface Problem {
  path: string;
  message: string;
  hint: string | null;
  line: number | null;
}

export interface PlanOut {
  name: string;
  admitted: boolean;
  nodes: number;
  placements: { role: string; index: number; node: string; address: string; gpus: number[] }[];
  reason: PendingReason | null;
  preempting: string[];
}

export interface JobTemplate {
  name: string;
  format: string;
  text: string;
}

export interface SubmittedJob {
  id: string;
  name: string;
  state: string;
  warnings: Problem[];
}

export interface FieldChange {
  field: string;
  before: unknown;
  after: unknown;
}

export interface ChangeResult {
  name: string;
  dryRun: boolean;
  before: Record<string, unknown>;
  after: Record<string, unknown>;
  changes: FieldChange[];
}

export interface JobCheck {
  valid: boolean;
  code: string | null;
  problems: Problem[];
  warnings: Problem[];
  plans: PlanOut[];
}

// ---- cloud pools (docs/cloud.md): GET /api/v1/pools, GET /api/v1/usage ----

export interface PoolMachine {
  node: string;
  requestId: string;
  /** launching, joined, draining or terminating */
  phase: string;
  offer: string | null;
  address: string | null;
  spot: boolean;
  pricePerHour: number;
  launchedAt: number;
  joinedAt: number | null;
  idleSince: number | null;
  lastError: string | null;
}

export interface Pool {
  name: string;
  provider: string;
  min: number;
  max: number;
  /** Set by an admin (`shoal cluster scale`); null: min and max rule. */
  target: number | null;
  size: number;
  idleTimeoutS: number;
  joinTimeoutS: number;
  pricePerHour: number | null;
  offerError: string | null;
  nodeHours: number;
  cost: number;
  machines: PoolMachine[];
}

export interface UsageRow {
  key: string;
  jobs: number;
  gpuHours: number;
  cpuHours: number;
  elapsedHours: number;
  peakMemoryMiB: number;
  poolNodeHours: number;
  poolCost: number;
}

export interface UsageReport {
  by: "user" | "vc";
  sinceS: number | null;
  /** own: a user who is not an admin sees only their own jobs' usage. */
  scope: "everyone" | "own";
  rows: UsageRow[];
}
