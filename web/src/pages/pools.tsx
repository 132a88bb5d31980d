// The overview's cloud pools (docs/cloud.md): each pool's size, bounds and target, its price,
// node-hours and cost so far, its machines by phase with their age, and the pool node-hours and
// cost each VC's jobs held (GET /api/v1/usage?by=vc, scoped as the API scopes it). Admins set a
// pool's size (PUT /api/v1/pools/{name}/target, `shoal cluster scale`). Shown only on a server
// with pools: the overview says whether it has any (`cloudPools`).
import { useState } from "preact/hooks";
import { call, get } from "../api";
import { ErrorBanner, Notice } from "../components";
import { Field, inputProps } from "../fields";
import type { Pool, PoolMachine, Session, UsageReport } from "../types";
import { duration, useLoad, useNow } from "../util";

const PHASES = ["launching", "joined", "draining", "terminating"];
const EVERY_MS = 5000; // machines age and cost grows without a change event

/** Hours or money as `shoal cluster pools` and `shoal usage` print them: two decimals, and a
 * small non-zero amount as "<0.01" rather than a misleading 0.00. */
export function amount(value: number): string {
  return value > 0 && value < 0.005 ? "<0.01" : value.toFixed(2);
}

function byPhase(machines: PoolMachine[]): string {
  const counts = PHASES.map((phase) => [phase, machines.filter((m) => m.phase === phase).length] as const);
  return (
    counts
      .filter(([, n]) => n)
      .map(([phase, n]) => `${n} ${phase}`)
      .join(", ") || "none"
  );
}

function ScaleControl({ pool, onScaled }: { pool: Pool; onScaled: () => void }) {
  const [value, setValue] = useState(String(pool.target ?? pool.size));
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const form = `pool-${pool.name}`;
  const send = async (target: number | null) => {
    setBusy(true);
    try {
      await call("PUT", `/api/v1/pools/${encodeURIComponent(pool.name)}/target`, { body: { target } });
      setError(null);
      onScaled();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const set = () => {
    const text = value.trim();
    const target = Number(text);
    if (!text || !Number.isInteger(target) || target < 0) {
      setError(`target: "${text}" is not a whole number of machines (0 or more)`);
      return;
    }
    void send(target);
  };
  return (
    <div class="inline-form" data-testid="pool-scale">
      <Field label={`Size of pool ${pool.name}`} form={form} name="target" error={error}>
        <input
          {...inputProps(form, "target", error)}
          type="number"
          min={0}
          max={pool.max}
          step={1}
          size={4}
          value={value}
          onInput={(e) => setValue((e.target as HTMLInputElement).value)}
        />
      </Field>
      <button class="secondary small" disabled={busy} onClick={set}>
        Set
      </button>
      <button
        class="secondary small"
        disabled={busy || pool.target === null}
        onClick={() => void send(null)}
        title="back to the cloud file's min and max"
      >
        Auto
      </button>
    </div>
  );
}

function PoolsTable({ pools, admin, reload }: { pools: Pool[]; admin: boolean; reload: () => void }) {
  return (
    <table class="list" data-testid="pools">
      <thead>
        <tr>
          <th>Pool</th>
          <th>Size</th>
          <th>Min–max</th>
          <th>Target</th>
          <th>Price / h</th>
          <th>Node-hours</th>
          <th>Cost</th>
          <th>Machines</th>
          {admin ? <th>Set size</th> : null}
        </tr>
      </thead>
      <tbody>
        {pools.map((pool) => (
          <tr data-pool={pool.name}>
            <td>
              <strong>{pool.name}</strong> <span class="muted">({pool.provider})</span>
            </td>
            <td data-testid="pool-size">{pool.size}</td>
            <td>
              {pool.min}–{pool.max}
            </td>
            <td data-testid="pool-target">{pool.target === null ? "auto" : pool.target}</td>
            <td data-testid="pool-price">{pool.pricePerHour === null ? "no offer" : pool.pricePerHour}</td>
            <td data-testid="pool-node-hours">{amount(pool.nodeHours)}</td>
            <td data-testid="pool-cost">{amount(pool.cost)}</td>
            <td data-testid="pool-phases">{byPhase(pool.machines)}</td>
            {admin ? (
              <td>
                <ScaleControl pool={pool} onScaled={reload} key={`${pool.name}-${pool.target}`} />
              </td>
            ) : null}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Machines({ pools }: { pools: Pool[] }) {
  const machines = pools.flatMap((pool) => pool.machines.map((machine) => ({ pool: pool.name, machine })));
  const now = useNow(machines.length > 0);
  if (!machines.length) return <p class="muted">No machines now.</p>;
  return (
    <table class="list" data-testid="pool-machines">
      <thead>
        <tr>
          <th>Pool</th>
          <th>Node</th>
          <th>Phase</th>
          <th>Age</th>
          <th>Offer</th>
          <th>Price / h</th>
          <th>Idle for</th>
          <th>Last error</th>
        </tr>
      </thead>
      <tbody>
        {machines.map(({ pool, machine }) => (
          <tr data-node={machine.node} data-phase={machine.phase}>
            <td>{pool}</td>
            <td>
              {machine.joinedAt ? <a href={`#/nodes/${encodeURIComponent(machine.node)}`}>{machine.node}</a> : machine.node}
            </td>
            <td>
              <span class={`badge phase-${machine.phase}`}>{machine.phase}</span>
            </td>
            <td data-testid="machine-age">{duration(now - machine.launchedAt)}</td>
            <td>
              {machine.offer ?? "not started yet"}
              {machine.spot ? " (spot)" : ""}
            </td>
            <td>{machine.pricePerHour}</td>
            <td>{machine.idleSince ? duration(now - machine.idleSince) : ""}</td>
            <td class="reason">{machine.lastError ?? ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function CostByVc() {
  const usage = useLoad(() => get<UsageReport>("/api/v1/usage", { by: "vc" }), [], true, 1000, EVERY_MS * 3);
  const report = usage.data;
  return (
    <>
      <h3>Pool machines held, by virtual cluster</h3>
      <ErrorBanner error={usage.error} />
      {report ? (
        <>
          <table class="list" data-testid="pool-cost-by-vc">
            <thead>
              <tr>
                <th>VC</th>
                <th>Pool node-hours</th>
                <th>Pool cost</th>
              </tr>
            </thead>
            <tbody>
              {report.rows.map((row) => (
                <tr data-vc={row.key}>
                  <td>{row.key}</td>
                  <td data-testid="vc-pool-node-hours">{amount(row.poolNodeHours)}</td>
                  <td data-testid="vc-pool-cost">{amount(row.poolCost)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <p class="muted">
            All time, each task charged its share of its machine for as long as it ran
            {report.scope === "own" ? "; your own jobs only" : ""}.
          </p>
        </>
      ) : null}
    </>
  );
}

export function CloudPools({ session }: { session: Session }) {
  const pools = useLoad(() => get<Pool[]>("/api/v1/pools"), [], true, 1000, EVERY_MS);
  const list = pools.data;
  return (
    <section data-testid="cloud-pools">
      <h2>Cloud pools</h2>
      <ErrorBanner error={pools.error} />
      {list ? (
        <>
          <PoolsTable pools={list} admin={session.admin} reload={pools.reload} />
          {list
            .filter((pool) => pool.offerError)
            .map((pool) => (
              <Notice kind="warning" testid="pool-offer-error">
                Pool {pool.name}: asking for offers failed: {pool.offerError}
              </Notice>
            ))}
          <h3>Machines</h3>
          <Machines pools={list} />
          <CostByVc />
        </>
      ) : null}
    </section>
  );
}
