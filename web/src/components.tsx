import type { ComponentChildren, ComponentType, FunctionComponent } from "preact";
import { useEffect, useState } from "preact/hooks";
import { errorText } from "./util";

export function StateBadge({ state }: { state: string }) {
  return <span class={`badge state-${state.toLowerCase()}`} data-state={state}>{state}</span>;
}

export function ErrorBanner({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <div class="notice error" role="alert" data-kind="error">
      {errorText(error)}
    </div>
  );
}

export type NoticeKind = "info" | "success" | "warning" | "error";

/** A message styled by what it is: information (a job stopped by its user), a success, a
 * warning, or an error (which ``ErrorBanner`` shows for a failed call). */
export function Notice({
  kind,
  children,
  testid,
}: {
  kind: NoticeKind;
  children: ComponentChildren;
  testid?: string;
}) {
  return (
    <div
      class={`notice ${kind}`}
      role={kind === "error" ? "alert" : "status"}
      data-kind={kind}
      data-testid={testid}
    >
      {children}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return <p class="muted">Loading {what}…</p>;
}

export function Card({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <section class="card">
      <h2>{title}</h2>
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

/** A component whose code is loaded when it is first shown (``import()``: its own chunk, so
 * pages that do not show it never download it). */
export function lazy<P extends object>(
  load: () => Promise<ComponentType<P>>,
  what: string,
): FunctionComponent<P> {
  let loaded: ComponentType<P> | null = null;
  let loading: Promise<ComponentType<P>> | null = null;
  return function Lazy(props: P) {
    const [, setReady] = useState(false);
    const [error, setError] = useState<unknown>(null);
    useEffect(() => {
      if (loaded) return undefined;
      let live = true;
      loading ??= load();
      loading.then(
        (component) => {
          loaded = component;
          if (live) setReady(true);
        },
        (err) => {
          loading = null;
          if (live) setError(err);
        },
      );
      return () => {
        live = false;
      };
    }, []);
    if (loaded) {
      const Loaded = loaded;
      return <Loaded {...props} />;
    }
    if (error) return <ErrorBanner error={`could not load ${what} (${errorText(error)}): reload the page`} />;
    return <Loading what={what} />;
  };
}
