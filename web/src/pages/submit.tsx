import { yaml as yamlLanguage } from "@codemirror/lang-yaml";
import { type Diagnostic, linter, lintGutter, setDiagnostics } from "@codemirror/lint";
import { EditorView, basicSetup } from "codemirror";
import { useEffect, useRef, useState } from "preact/hooks";
import { parseDocument } from "yaml";
import { ApiError, get, post } from "../api";
import { ErrorBanner, Notice } from "../components";
import type { JobCheck, JobTemplate, PlanOut, Problem, SubmittedJob } from "../types";
import { go, keepSubmitWarnings } from "../util";

const FORMATS = ["auto", "native", "pai", "pai-v1", "maro"];

/** The line of a problem: the one the server gave, else the node its dotted path names. */
function lineOf(text: string, problem: Problem): number {
  if (problem.line) return problem.line;
  try {
    const doc = parseDocument(text);
    const path = problem.path.split(/\.|\[(\d+)\]/).filter(Boolean);
    for (let n = path.length; n > 0; n--) {
      const keys = path.slice(0, n).map((p) => (/^\d+$/.test(p) ? Number(p) : p));
      const node = doc.getIn(keys, true) as { range?: [number, number, number] } | undefined;
      if (node && node.range) return text.slice(0, node.range[0]).split("\n").length;
    }
  } catch {
    /* the text is not YAML at all: the first line */
  }
  return 1;
}

function diagnosticsFor(view: EditorView, problems: Problem[], severity: "error" | "warning"): Diagnostic[] {
  const text = view.state.doc.toString();
  return problems.map((problem) => {
    const number = Math.min(Math.max(1, lineOf(text, problem)), view.state.doc.lines);
    const line = view.state.doc.line(number);
    return {
      from: line.from,
      to: line.to,
      severity,
      message: `${problem.path || "(file)"}: ${problem.message}${problem.hint ? `; ${problem.hint}` : ""}`,
    };
  });
}

function problemsOf(error: unknown): Problem[] {
  if (error instanceof ApiError && Array.isArray(error.details)) return error.details as Problem[];
  return [];
}

export function Submit({ clone }: { clone: string | null }) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const [templates, setTemplates] = useState<JobTemplate[]>([]);
  const [format, setFormat] = useState("auto");
  const [vc, setVc] = useState("");
  const [problems, setProblems] = useState<Problem[]>([]);
  const [warnings, setWarnings] = useState<Problem[]>([]);
  const [checkError, setCheckError] = useState<unknown>(null);
  const [plan, setPlan] = useState<PlanOut[] | null>(null);
  const [submitError, setSubmitError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [version, setVersion] = useState(0);
  // What the shown check is of (text version, format, VC): anything else is being checked, and
  // until its answer the plan shown is stale and Submit waits.
  const current = `${version}|${format}|${vc}`;
  const [checked, setChecked] = useState("");
  const latest = useRef("");
  latest.current = current;
  const stale = checked !== current;

  useEffect(() => {
    if (!host.current) return undefined;
    view.current = new EditorView({
      parent: host.current,
      doc: "",
      extensions: [
        basicSetup,
        EditorView.contentAttributes.of({ "aria-label": "Job file (YAML or JSON)" }),
        yamlLanguage(),
        lintGutter(),
        linter(null),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) setVersion((v) => v + 1);
        }),
      ],
    });
    const load = async () => {
      const list = await get<JobTemplate[]>("/api/v1/job-templates");
      setTemplates(list);
      let text = list[0]?.text ?? "";
      if (clone) {
        const source = await get<{ text: string; format: string; virtualCluster: string }>(
          `/api/v1/jobs/${encodeURIComponent(clone)}/source`,
        );
        text = source.text;
        setVc(source.virtualCluster);
      }
      view.current?.dispatch({ changes: { from: 0, to: view.current.state.doc.length, insert: text } });
    };
    load().catch(setSubmitError);
    return () => view.current?.destroy();
  }, [clone]);

  const body = () => ({
    spec: view.current?.state.doc.toString() ?? "",
    format,
    virtual_cluster: vc || null,
  });

  // Validation as you type: a dry run (`job plan`) half a second after the last keystroke.
  useEffect(() => {
    if (version === 0) return undefined;
    const mine = current;
    const timer = window.setTimeout(async () => {
      try {
        const check = await post<JobCheck>("/api/v1/jobs/check", body());
        if (mine !== latest.current) return;
        setPlan(check.valid ? check.plans : null);
        setProblems(check.problems);
        setWarnings(check.warnings);
        setCheckError(null);
      } catch (err) {
        if (mine !== latest.current) return;
        setPlan(null);
        setWarnings([]);
        setCheckError(err);
      }
      setChecked(mine);
    }, 500);
    return () => window.clearTimeout(timer);
  }, [version, format, vc]);

  useEffect(() => {
    const editor = view.current;
    if (!editor) return;
    const marks = [...diagnosticsFor(editor, problems, "error"), ...diagnosticsFor(editor, warnings, "warning")];
    editor.dispatch(setDiagnostics(editor.state, marks));
  }, [problems, warnings]);

  const submit = async () => {
    setBusy(true);
    setSubmitError(null);
    try {
      const jobs = await post<SubmittedJob[]>("/api/v1/jobs", body());
      keepSubmitWarnings(jobs[0].id, jobs[0].warnings ?? []);
      go(`/jobs/${encodeURIComponent(jobs[0].id)}`);
    } catch (err) {
      setSubmitError(err);
      setProblems(problemsOf(err));
    } finally {
      setBusy(false);
    }
  };

  const pick = (name: string) => {
    const template = templates.find((t) => t.name === name);
    if (template && view.current) {
      view.current.dispatch({
        changes: { from: 0, to: view.current.state.doc.length, insert: template.text },
      });
      setFormat("auto");
    }
  };

  return (
    <div>
      <h1>{clone ? `Clone job ${clone}` : "Submit a job"}</h1>
      <div class="filters">
        <label class="inline">
          Template{" "}
          <select aria-label="Template" onChange={(e) => pick((e.target as HTMLSelectElement).value)}>
            {templates.map((t) => (
              <option value={t.name}>{t.name}</option>
            ))}
          </select>
        </label>
        <label class="inline">
          Format{" "}
          <select
            aria-label="Format"
            value={format}
            onChange={(e) => setFormat((e.target as HTMLSelectElement).value)}
          >
            {FORMATS.map((f) => (
              <option value={f}>{f}</option>
            ))}
          </select>
        </label>
        <label class="inline">
          VC{" "}
          <input
            aria-label="Virtual cluster"
            placeholder="from the file"
            value={vc}
            onChange={(e) => setVc((e.target as HTMLInputElement).value.trim())}
          />
        </label>
      </div>
      <div class="editor" ref={host} data-testid="editor" />
      <div
        class={stale ? "check stale" : "check"}
        data-testid="validation"
        data-stale={stale ? "true" : "false"}
        aria-busy={stale}
        aria-live="polite"
      >
        {stale && version > 0 ? (
          <p class="checking" data-testid="checking">
            Checking the file as it is now… (what is below is of an earlier text)
          </p>
        ) : null}
        {warnings.length ? (
          <Notice kind="warning" testid="warnings">
            {warnings.length === 1 ? "A warning" : `${warnings.length} warnings`} about this file:
            <ul class="warnings">
              {warnings.map((w) => (
                <li>
                  <strong>
                    {w.path || "(file)"}
                    {w.line ? ` (line ${w.line})` : ""}
                  </strong>
                  : {w.message}
                  {w.hint ? <span class="hint"> — {w.hint}</span> : null}
                </li>
              ))}
            </ul>
          </Notice>
        ) : null}
        {problems.length ? (
          <ul class="problems">
            {problems.map((p) => (
              <li>
                <strong>
                  {p.path || "(file)"}
                  {p.line ? ` (line ${p.line})` : ""}
                </strong>
                : {p.message}
                {p.hint ? <span class="hint"> — {p.hint}</span> : null}
              </li>
            ))}
          </ul>
        ) : checkError ? (
          <ErrorBanner error={checkError} />
        ) : plan ? (
          <div class="plan" data-testid="plan">
            {plan.map((p) => (
              <div>
                <strong>✓ {p.name}</strong>:{" "}
                {p.admitted
                  ? `would start now: ${p.placements
                      .map((t) => `${t.role}/${t.index}→${t.node}${t.gpus.length ? ` (GPU indices ${t.gpus.join(",")})` : ""}`)
                      .join(", ")}`
                  : `would wait: ${p.reason?.code ?? ""} ${p.reason?.message ?? ""}`}
                {p.preempting.length ? ` (preempting ${p.preempting.join(", ")})` : ""}
              </div>
            ))}
          </div>
        ) : (
          <p class="muted">Checked as you type.</p>
        )}
      </div>
      <ErrorBanner error={submitError} />
      <button onClick={submit} disabled={busy || stale || problems.length > 0}>
        Submit
      </button>
      {stale && version > 0 ? <span class="muted"> waiting for the check of the current text</span> : null}
    </div>
  );
}
