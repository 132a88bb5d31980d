import { useState } from "preact/hooks";
import { call } from "../api";
import { ErrorBanner } from "../components";
import type { Session } from "../types";

export function Login({ onSignedIn }: { onSignedIn: (s: Session) => void }) {
  const [mode, setMode] = useState<"token" | "password">("token");
  const [token, setToken] = useState("");
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    const body = mode === "token" ? { token } : { username, password };
    try {
      const { body: session } = await call<Session>("POST", "/api/v1/session", {
        body,
        quiet401: true,
      });
      onSignedIn(session);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="login">
      <h1>shoal</h1>
      <p class="muted">Sign in to the cluster's dashboard.</p>
      <div class="tabs">
        <button class={mode === "token" ? "tab active" : "tab"} onClick={() => setMode("token")}>
          API token
        </button>
        <button
          class={mode === "password" ? "tab active" : "tab"}
          onClick={() => setMode("password")}
        >
          User and password
        </button>
      </div>
      <form onSubmit={submit}>
        {mode === "token" ? (
          <label>
            Token
            <input
              name="token"
              type="password"
              autocomplete="off"
              value={token}
              onInput={(e) => setToken((e.target as HTMLInputElement).value)}
              placeholder="shoal_… (from `shoal token create` or ~/.shoal/admin.token)"
            />
          </label>
        ) : (
          <>
            <label>
              User
              <input
                name="username"
                autocomplete="username"
                value={username}
                onInput={(e) => setUsername((e.target as HTMLInputElement).value)}
              />
            </label>
            <label>
              Password
              <input
                name="password"
                type="password"
                autocomplete="current-password"
                value={password}
                onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
              />
            </label>
          </>
        )}
        <ErrorBanner error={error} />
        <button type="submit" disabled={busy}>
          Sign in
        </button>
      </form>
    </div>
  );
}
