// The signed-in user's SSH public keys (docs/ssh.md, `shoal user key add|list|rm`): listed with
// their fingerprints, added by pasting a .pub line, removed after a confirmation.
import { useState } from "preact/hooks";
import { call, get } from "../api";
import { ErrorBanner, Loading, Notice } from "../components";
import { Field, inputProps, refusedField } from "../fields";
import { clock, useLoad } from "../util";

export interface SshKey {
  name: string;
  public_key: string;
  fingerprint: string;
  created_at: number;
}

const FORM = "ssh-key";

function KeyTable({ keys, onRemove }: { keys: SshKey[]; onRemove: (key: SshKey) => void }) {
  if (!keys.length) {
    return (
      <p class="muted" data-testid="no-ssh-keys">
        You have no SSH keys yet: add one below.
      </p>
    );
  }
  return (
    <table class="list" data-testid="ssh-keys-table">
      <thead>
        <tr>
          <th>Name</th>
          <th>Fingerprint</th>
          <th>Type</th>
          <th>Added</th>
          <th>
            <span class="sr-only">Actions</span>
          </th>
        </tr>
      </thead>
      <tbody>
        {keys.map((key) => (
          <tr data-key={key.name}>
            <td>{key.name}</td>
            <td class="mono" data-testid="fingerprint">
              {key.fingerprint}
            </td>
            <td>{key.public_key.split(" ", 1)[0]}</td>
            <td>{clock(key.created_at)}</td>
            <td class="actions">
              <button class="danger small" onClick={() => onRemove(key)} aria-label={`Remove key ${key.name}`}>
                Remove
              </button>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function AddKey({ onAdded, onRefused }: { onAdded: (key: SshKey) => void; onRefused: () => void }) {
  const [publicKey, setPublicKey] = useState("");
  const [name, setName] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const field = refusedField(error, ["public_key", "name"], "public_key");
  const keyError = field === "public_key" ? error : null;
  const nameError = field === "name" ? error : null;

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    try {
      const body = { public_key: publicKey, name: name.trim() || null };
      const { body: added } = await call<SshKey>("POST", "/api/v1/ssh-keys", { body });
      setError(null);
      setPublicKey("");
      setName("");
      onAdded(added);
    } catch (err) {
      setError(err);
      onRefused();
    } finally {
      setBusy(false);
    }
  };
  /** A refusal is about the text sent: editing it clears the message. */
  const edit = (set: (value: string) => void) => (e: Event) => {
    set((e.target as HTMLInputElement | HTMLTextAreaElement).value);
    setError(null);
  };

  return (
    <form class="stacked" onSubmit={submit} data-testid="add-ssh-key">
      <Field label="Public key (one line of a .pub file)" form={FORM} name="public_key" error={keyError}>
        <textarea
          {...inputProps(FORM, "public_key", keyError)}
          rows={3}
          spellcheck={false}
          autocomplete="off"
          placeholder="ssh-ed25519 AAAA... me@laptop (cat ~/.ssh/id_ed25519.pub)"
          value={publicKey}
          onInput={edit(setPublicKey)}
        />
      </Field>
      <Field label="Name (optional: the key's comment if it makes one)" form={FORM} name="name" error={nameError}>
        <input
          {...inputProps(FORM, "name", nameError)}
          autocomplete="off"
          placeholder="laptop"
          value={name}
          onInput={edit(setName)}
        />
      </Field>
      <div>
        <button type="submit" disabled={busy || !publicKey.trim()}>
          Add key
        </button>
      </div>
    </form>
  );
}

export function SshKeys() {
  const keys = useLoad(() => get<SshKey[]>("/api/v1/ssh-keys"), [], false);
  const [news, setNews] = useState<string | null>(null);
  const [removeError, setRemoveError] = useState<unknown>(null);

  const remove = async (key: SshKey) => {
    if (!confirm(`Remove SSH key ${key.name} (${key.fingerprint})?`)) return;
    try {
      await call("DELETE", `/api/v1/ssh-keys/${encodeURIComponent(key.name)}`);
      setRemoveError(null);
      setNews(`Removed key ${key.name}.`);
    } catch (err) {
      setRemoveError(err);
      setNews(null);
    }
    keys.reload();
  };

  return (
    <div>
      <h1>SSH keys</h1>
      <p class="muted">
        Your public keys log you in to the tasks of your jobs that use OpenPAI's <code>ssh</code> plugin, through{" "}
        <code>shoal job ssh JOB</code>. A job gets the keys you have when it is submitted. The CLI has the same
        list: <code>shoal user key list</code>.
      </p>
      {news ? (
        <Notice kind="success" testid="ssh-key-news">
          {news}
        </Notice>
      ) : null}
      <ErrorBanner error={removeError ?? keys.error} />
      <h2>Your keys</h2>
      {keys.data ? <KeyTable keys={keys.data} onRemove={remove} /> : <Loading what="your keys" />}
      <h2>Add a key</h2>
      <AddKey
        onAdded={(key) => {
          setRemoveError(null);
          setNews(`Added key ${key.name} (${key.fingerprint}).`);
          keys.reload();
        }}
        onRefused={() => setNews(null)}
      />
    </div>
  );
}
