// An admin's editor of one virtual cluster: the changed settings only (PATCH), previewed first
// (dryRun=true, nothing written), then saved; the API answers both with the list of changes.
import { useState } from "preact/hooks";
import { call } from "../api";
import { ErrorBanner, Notice } from "../components";
import type { ChangeResult, FieldChange, VirtualCluster } from "../types";

type Limit = Record<string, number | null>;

const FIELDS: [string, string][] = [
  ["guarantee_cpu", "Guaranteed CPUs"],
  ["guarantee_memory_mib", "Guaranteed memory (MiB)"],
  ["guarantee_gpu", "Guaranteed GPUs"],
  ["borrow_cpu", "May borrow CPUs"],
  ["borrow_memory_mib", "May borrow memory (MiB)"],
  ["borrow_gpu", "May borrow GPUs"],
];
const LABELS: Record<string, string> = {
  ...Object.fromEntries(FIELDS),
  members: "Members",
  description: "Description",
  idle_timeout_s: "Idle timeout of interactive jobs",
};

function initial(vc: VirtualCluster): Record<string, string> {
  const pick = (limit: Limit | null, key: string) => {
    const v = limit ? limit[key] : null;
    return v === null || v === undefined ? "" : String(v);
  };
  return {
    guarantee_cpu: pick(vc.guarantee, "cpu"),
    guarantee_memory_mib: pick(vc.guarantee, "memoryMiB"),
    guarantee_gpu: pick(vc.guarantee, "gpu"),
    borrow_cpu: pick(vc.borrowLimit, "cpu"),
    borrow_memory_mib: pick(vc.borrowLimit, "memoryMiB"),
    borrow_gpu: pick(vc.borrowLimit, "gpu"),
    members: vc.members.join(", "),
    idle_minutes: vc.idleTimeoutS ? String(vc.idleTimeoutS / 60) : "",
  };
}

function shown(field: string, value: unknown): string {
  if (field === "idle_timeout_s") return typeof value === "number" ? `${value / 60} min` : "never";
  if (value === null || value === undefined) {
    return field.startsWith("borrow_") || field.startsWith("guarantee_") ? "any" : "none";
  }
  if (Array.isArray(value)) return value.length ? value.join(", ") : "none (open to everyone)";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function changeText(change: FieldChange): string {
  return `${LABELS[change.field] ?? change.field}: ${shown(change.field, change.before)} → ${shown(change.field, change.after)}`;
}

export function Changes({ changes }: { changes: FieldChange[] }) {
  if (!changes.length) return <> nothing changes.</>;
  return (
    <ul>
      {changes.map((c) => (
        <li data-field={c.field}>{changeText(c)}</li>
      ))}
    </ul>
  );
}

export function VcEditor({
  vc,
  onSaved,
  onCancel,
}: {
  vc: VirtualCluster;
  onSaved: (changes: FieldChange[]) => void;
  onCancel: () => void;
}) {
  const [values, setValues] = useState(initial(vc));
  const [error, setError] = useState<unknown>(null);
  const [preview, setPreview] = useState<FieldChange[] | null>(null);
  const [busy, setBusy] = useState(false);
  const isDefault = vc.name === "default";

  /** The settings changed, as the API takes them; an error for a field that is not a number. */
  const patch = (): Record<string, unknown> => {
    const body: Record<string, unknown> = {};
    const before = initial(vc);
    for (const [key, label] of FIELDS) {
      const text = values[key].trim();
      if (text === before[key]) continue;
      const value = text === "" ? null : Number(text);
      if (value !== null && !Number.isFinite(value)) {
        throw new Error(`${label}: "${text}" is not a number (leave it empty for "any")`);
      }
      body[key] = value;
    }
    if (values.idle_minutes.trim() !== before.idle_minutes) {
      const text = values.idle_minutes.trim();
      const minutes = text === "" ? null : Number(text);
      if (minutes !== null && !(Number.isFinite(minutes) && minutes > 0)) {
        throw new Error(`Idle timeout: "${text}" is not a number of minutes above 0 (leave it empty: never)`);
      }
      body.idle_timeout_s = minutes === null ? null : minutes * 60;
    }
    if (values.members !== before.members) {
      body.members = values.members
        .split(",")
        .map((m) => m.trim())
        .filter(Boolean);
    }
    return body;
  };

  const send = async (dryRun: boolean) => {
    setBusy(true);
    try {
      const { body } = await call<ChangeResult>("PATCH", `/api/v1/virtual-clusters/${encodeURIComponent(vc.name)}`, {
        body: patch(),
        query: { dryRun },
      });
      setError(null);
      if (dryRun) setPreview(body.changes);
      else onSaved(body.changes);
    } catch (err) {
      setPreview(null);
      setError(err instanceof Error && !("status" in err) ? err.message : err);
    } finally {
      setBusy(false);
    }
  };

  const edit = (key: string, value: string) => {
    setValues({ ...values, [key]: value });
    setPreview(null);
  };

  return (
    <div class="vc-editor" data-testid="vc-editor" role="group" aria-label={`Edit virtual cluster ${vc.name}`}>
      {FIELDS.map(([key, label]) => (
        <label>
          {label}
          <input
            name={key}
            inputMode="decimal"
            placeholder="any"
            value={values[key]}
            onInput={(e) => edit(key, (e.target as HTMLInputElement).value)}
          />
        </label>
      ))}
      <label>
        Members (users and groups)
        <input
          name="members"
          placeholder="everyone"
          value={values.members}
          onInput={(e) => edit("members", (e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Stop idle interactive jobs after (minutes)
        <input
          name="idle_minutes"
          inputMode="decimal"
          placeholder="never"
          value={values.idle_minutes}
          onInput={(e) => edit("idle_minutes", (e.target as HTMLInputElement).value)}
        />
      </label>
      <div class="vc-editor-foot">
        {/* the server's FIXED_FOR_DEFAULT (services/vcs.py): a change to them is refused, and the
            refusal is shown below as the server words it */}
        {isDefault ? (
          <p class="hint" data-testid="default-note">
            The default VC's guarantees (CPUs, memory, GPUs) and members are fixed: its guarantee is what the
            other VCs leave, and it is open to everyone; the server refuses changes to them. Its borrowing limits
            can change.
          </p>
        ) : null}
        <ErrorBanner error={error} />
        {preview ? (
          <Notice kind="info" testid="vc-preview">
            Preview, nothing saved yet:
            <Changes changes={preview} />
          </Notice>
        ) : null}
        <div class="actions">
          <button class="secondary" disabled={busy} onClick={() => send(true)}>
            Preview changes
          </button>
          <button disabled={busy} onClick={() => send(false)}>
            Save
          </button>
          <button class="secondary" onClick={onCancel}>
            Cancel
          </button>
        </div>
      </div>
    </div>
  );
}
