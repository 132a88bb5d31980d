import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { call, closeStream, onSignedOut, onStreamStatus, setCsrf } from "./api";
import { Submit, TerminalPage } from "./chunks";
import { Jobs } from "./pages/jobs";
import { JobPage } from "./pages/job";
import { Login } from "./pages/login";
import { NodePage, Nodes } from "./pages/nodes";
import { Overview } from "./pages/overview";
import { SshKeys } from "./pages/ssh-keys";
import { VirtualClusters } from "./pages/vcs";
import "./style.css";
import type { Session } from "./types";
import { splitRoute, useHashRoute } from "./util";

const NAV: [string, string][] = [
  ["overview", "Overview"],
  ["jobs", "Jobs"],
  ["submit", "Submit"],
  ["nodes", "Nodes"],
  ["vcs", "Virtual clusters"],
  ["ssh-keys", "SSH keys"],
];

function LiveDot() {
  const [live, setLive] = useState(false);
  useEffect(() => onStreamStatus(setLive), []);
  return (
    <span class={live ? "live on" : "live off"} title={live ? "live updates" : "reconnecting"}>
      {live ? "● live" : "○ reconnecting"}
    </span>
  );
}

function Page({ session }: { session: Session }) {
  const hash = useHashRoute();
  const { parts, params } = splitRoute(hash);
  const [page, arg] = parts;
  switch (page) {
    case "jobs":
      return arg ? <JobPage id={arg} session={session} /> : <Jobs session={session} params={params} />;
    case "submit":
      return <Submit clone={params.get("clone")} />;
    case "nodes":
      return arg ? <NodePage name={arg} session={session} /> : <Nodes session={session} />;
    case "vcs":
      return <VirtualClusters session={session} />;
    case "ssh-keys":
      return <SshKeys />;
    case "terminal":
      return <TerminalPage job={arg ?? ""} task={params.get("task") ?? ""} />;
    default:
      return <Overview session={session} />;
  }
}

function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [checked, setChecked] = useState(false);
  const hash = useHashRoute();
  const current = splitRoute(hash).parts[0] ?? "overview";

  useEffect(() => {
    call<Session>("GET", "/api/v1/session", { quiet401: true }).then(
      ({ body }) => {
        if (body.signedIn) {
          setCsrf(body.csrfToken);
          setSession(body);
        }
        setChecked(true);
      },
      () => setChecked(true),
    );
    return onSignedOut(() => {
      closeStream();
      setSession(null);
    });
  }, []);

  const signOut = async () => {
    try {
      await call("DELETE", "/api/v1/session");
    } finally {
      closeStream();
      setCsrf("");
      setSession(null);
    }
  };

  if (!checked) return <p class="muted">Loading…</p>;
  if (!session) {
    return (
      <Login
        onSignedIn={(s) => {
          setCsrf(s.csrfToken);
          setSession(s);
        }}
      />
    );
  }
  return (
    <div class="app">
      <header>
        <a class="brand" href="#/overview">
          shoal
        </a>
        <nav>
          {NAV.map(([path, label]) => (
            <a href={`#/${path}`} class={current === path ? "active" : ""}>
              {label}
            </a>
          ))}
        </nav>
        <LiveDot />
        <span class="who" data-testid="who">
          {session.user}
          {session.admin ? " (admin)" : ""}
        </span>
        <button class="secondary" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>
        <Page session={session} />
      </main>
    </div>
  );
}

render(<App />, document.getElementById("app")!);
