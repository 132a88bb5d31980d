import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { withQuery } from "../api";

// Frames (docs/terminal.md): binary = one channel byte (0 stdin, 1 stdout, 2 stderr) + data;
// text = JSON control ({"type": "resize" | "exit" | "error", ...}).
const STDIN = 0;

export function TerminalPage({ job, task }: { job: string; task: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting…");
  const [ended, setEnded] = useState(false);

  useEffect(() => {
    if (!host.current) return undefined;
    const term = new Terminal({ cursorBlink: true, fontSize: 14, lineHeight: 1.2, scrollback: 5000 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current);
    fit.fit();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const url = withQuery(`${scheme}://${location.host}/api/v1/jobs/${encodeURIComponent(job)}/exec`, {
      task: task || undefined,
      tty: true,
      cols: term.cols,
      rows: term.rows,
    });
    const socket = new WebSocket(url);
    socket.binaryType = "arraybuffer";
    const encoder = new TextEncoder();
    const decoder = new TextDecoder();
    socket.onopen = () => {
      setStatus(`connected to ${job} ${task}`);
      term.focus();
    };
    socket.onmessage = (event) => {
      if (typeof event.data === "string") {
        const message = JSON.parse(event.data);
        if (message.type === "exit") {
          setStatus(`the shell exited with ${message.code}`);
          setEnded(true);
        } else if (message.type === "error") {
          setStatus(`refused: ${message.message} (${message.code})`);
          setEnded(true);
        }
        return;
      }
      const bytes = new Uint8Array(event.data as ArrayBuffer);
      if (bytes.length > 1) term.write(decoder.decode(bytes.subarray(1), { stream: true }));
    };
    socket.onclose = (event) => {
      setEnded(true);
      setStatus((s) => (s.startsWith("connect") ? `closed: ${event.reason || `code ${event.code}`}` : s));
    };
    const input = term.onData((data) => {
      if (socket.readyState !== WebSocket.OPEN) return;
      const body = encoder.encode(data);
      const frame = new Uint8Array(body.length + 1);
      frame[0] = STDIN;
      frame.set(body, 1);
      socket.send(frame);
    });
    const resize = () => {
      fit.fit();
      if (socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
      }
    };
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      input.dispose();
      socket.close(1000, "the page was closed");
      term.dispose();
    };
  }, [job, task]);

  return (
    <div>
      <div class="titlebar">
        <h1>
          Terminal: <a href={`#/jobs/${encodeURIComponent(job)}`}>job {job}</a> {task}
        </h1>
        <span class={ended ? "muted" : ""} data-testid="terminal-status">
          {status}
        </span>
      </div>
      <div class="terminal" ref={host} data-testid="terminal" />
      <p class="muted">
        A shell in the task's environment, on its node, in its working directory (and its container).
        Closing this page ends the shell and what it started. Sessions are recorded.
      </p>
    </div>
  );
}
