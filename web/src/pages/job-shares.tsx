// "Ports shared with" on a job's page (docs/proxy.md, "Sharing a job's ports"), for its owner and
// admins: the users and groups who may open its tasks' ports too, added and removed by sending
// the whole list (PUT /api/v1/jobs/{job}/shares). Nothing else of the job is shared.
import { useEffect, useState } from "preact/hooks";
import { call, get } from "../api";
import { ErrorBanner } from "../components";
import { Field, inputProps, refusedField } from "../fields";

interface Shares {
  users: string[];
  groups: string[];
}

type Kind = keyof Shares;
const SINGULAR: Record<Kind, string> = { users: "user", groups: "group" };

function ShareForm({
  kind,
  onAdd,
  error,
  busy,
}: {
  kind: Kind;
  onAdd: (kind: Kind, name: string) => Promise<boolean>;
  error: unknown;
  busy: boolean;
}) {
  const [name, setName] = useState("");
  const form = `share-${SINGULAR[kind]}`;
  const submit = async (event: Event) => {
    event.preventDefault();
    if (await onAdd(kind, name.trim())) setName("");
  };
  return (
    <form class="inline-form" onSubmit={submit} data-testid={form}>
      <Field label={`Share with ${SINGULAR[kind]}`} form={form} name={kind} error={error}>
        <input
          {...inputProps(form, kind, error)}
          autocomplete="off"
          value={name}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
      </Field>
      <button type="submit" class="secondary" disabled={busy || !name.trim()}>
        Add {SINGULAR[kind]}
      </button>
    </form>
  );
}

export function JobShares({ job }: { job: string }) {
  const [shares, setShares] = useState<Shares | null>(null);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [error, setError] = useState<{ kind: Kind | null; error: unknown }>({ kind: null, error: null });
  const [busy, setBusy] = useState(false);
  const path = `/api/v1/jobs/${encodeURIComponent(job)}/shares`;

  useEffect(() => {
    setShares(null);
    get<Shares>(path).then(setShares, setLoadError);
  }, [path]);

  /** Send the whole list; a refusal is shown under the field it names (else ``kind``'s). */
  const save = async (wanted: Shares, kind: Kind | null): Promise<boolean> => {
    setBusy(true);
    try {
      const { body } = await call<Shares>("PUT", path, { body: wanted });
      setShares(body);
      setError({ kind: null, error: null });
      return true;
    } catch (err) {
      const named = refusedField(err, ["users", "groups"], kind ?? "");
      setError({ kind: named ? (named as Kind) : null, error: err });
      return false;
    } finally {
      setBusy(false);
    }
  };

  const add = (kind: Kind, name: string) => {
    if (!shares || !name) return Promise.resolve(false);
    if (shares[kind].includes(name)) return Promise.resolve(true);
    return save({ ...shares, [kind]: [...shares[kind], name] }, kind);
  };
  const remove = (kind: Kind, name: string) => {
    if (!shares) return;
    void save({ ...shares, [kind]: shares[kind].filter((n) => n !== name) }, null);
  };

  const entries = shares ? (["users", "groups"] as Kind[]).flatMap((k) => shares[k].map((n) => [k, n] as const)) : [];
  return (
    <section class="shares" data-testid="job-shares" aria-labelledby="shares-title">
      <h2 id="shares-title">Ports shared with</h2>
      <p class="muted">
        The users and groups listed here may open this job's tasks' ports too (the Open links,{" "}
        <code>shoal job port-forward</code>); nothing else of the job is shared with them.
      </p>
      <ErrorBanner error={loadError} />
      {shares === null ? null : entries.length ? (
        <ul class="chips" data-testid="shares-list">
          {entries.map(([kind, name]) => (
            <li data-share={`${SINGULAR[kind]}:${name}`}>
              <span class="muted">{SINGULAR[kind]}</span> <strong>{name}</strong>{" "}
              <button
                class="secondary small"
                disabled={busy}
                onClick={() => remove(kind, name)}
                aria-label={`Remove ${SINGULAR[kind]} ${name} from the shares`}
              >
                Remove
              </button>
            </li>
          ))}
        </ul>
      ) : (
        <p data-testid="shares-none">Nobody else: only the job's owner and admins.</p>
      )}
      {error.error && error.kind === null ? <ErrorBanner error={error.error} /> : null}
      {shares ? (
        <div class="share-forms">
          <ShareForm kind="users" onAdd={add} busy={busy} error={error.kind === "users" ? error.error : null} />
          <ShareForm kind="groups" onAdd={add} busy={busy} error={error.kind === "groups" ? error.error : null} />
        </div>
      ) : null}
    </section>
  );
}
