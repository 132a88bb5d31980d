// The page's only way to the server: the same REST API the CLI uses, authorised by the session
// cookie (HttpOnly, so this code never sees it) plus the CSRF header on state-changing calls.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: unknown = null,
  ) {
    super(message);
  }
}

let csrfToken = "";
const signedOutListeners = new Set<() => void>();

export function setCsrf(token: string): void {
  csrfToken = token;
}

export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

type Query = Record<string, string | number | boolean | string[] | undefined | null>;

export function withQuery(path: string, query?: Query): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) value.forEach((v) => params.append(key, v));
    else params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

export interface Answer<T> {
  body: T;
  headers: Headers;
}

export async function call<T>(
  method: string,
  path: string,
  options: { query?: Query; body?: unknown; quiet401?: boolean } = {},
): Promise<Answer<T>> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-Shoal-CSRF"] = csrfToken;
  let response: Response;
  try {
    response = await fetch(withQuery(path, options.query), {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: "same-origin",
    });
  } catch {
    throw new ApiError(
      0,
      "ServerUnreachable",
      `the shoal server at ${location.host} does not answer (is it running?); the page retries`,
    );
  }
  if (response.status === 401 && !options.quiet401) signedOutListeners.forEach((l) => l());
  if (!response.ok) {
    let code = `HTTP${response.status}`;
    let message = response.statusText || `the server answered ${response.status}`;
    let details: unknown = null;
    try {
      const error = await response.json();
      code = error.code ?? code;
      message = error.message ?? message;
      details = error.problems ?? error.details ?? null; // shoal's errors carry `problems`
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(response.status, code, message, details);
  }
  const body = response.status === 204 ? (undefined as T) : ((await response.json()) as T);
  return { body, headers: response.headers };
}

export async function get<T>(path: string, query?: Query): Promise<T> {
  return (await call<T>("GET", path, { query })).body;
}

export async function post<T>(path: string, body?: unknown, query?: Query): Promise<T> {
  return (await call<T>("POST", path, { body: body ?? {}, query })).body;
}

// ---- live updates: one EventSource for the whole page ----

type ChangeListener = () => void;
type StatusListener = (connected: boolean) => void;
const changeListeners = new Set<ChangeListener>();
const statusListeners = new Set<StatusListener>();
let source: EventSource | null = null;
let connected = false;

function setConnected(value: boolean): void {
  connected = value;
  statusListeners.forEach((l) => l(value));
}

function openStream(): void {
  if (source) return;
  source = new EventSource("/api/v1/stream");
  source.addEventListener("open", () => setConnected(true));
  source.addEventListener("error", () => setConnected(false));
  source.addEventListener("change", () => changeListeners.forEach((l) => l()));
}

export function closeStream(): void {
  source?.close();
  source = null;
  setConnected(false);
}

export function onChange(listener: ChangeListener): () => void {
  openStream();
  changeListeners.add(listener);
  return () => changeListeners.delete(listener);
}

export function onStreamStatus(listener: StatusListener): () => void {
  statusListeners.add(listener);
  listener(connected);
  return () => statusListeners.delete(listener);
}
