// The dashboard's build: `make web` (npm ci, then this) writes it into the Python package, which
// the shoal server serves at /ui/. Everything is bundled: the page loads nothing from elsewhere.
//
// The big libraries are chunks of their own, loaded by `import()` (src/chunks.tsx) only on the
// pages that use them: `editor` (CodeMirror and the YAML parser: Submit), `terminal` (xterm.js)
// and `charts` (uPlot: the overview and a node's page). Every script and style sheet is also
// written gzipped beside itself (NAME.gz), which the server sends to browsers that accept gzip.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { type Plugin, defineConfig } from "vite";

const CHUNKS: { name: string; test: RegExp }[] = [
  { name: "editor", test: /node_modules[\\/](@codemirror|codemirror|@lezer|@marijn|style-mod|w3c-keyname|crelt|yaml)[\\/]/ },
  { name: "terminal", test: /node_modules[\\/]@xterm[\\/]/ },
  { name: "charts", test: /node_modules[\\/]uplot[\\/]/ },
];

/** NAME.gz beside every .js and .css written (level 9: built once, sent many times). */
function precompress(): Plugin {
  return {
    name: "shoal-precompress",
    apply: "build",
    enforce: "post",
    writeBundle(options, bundle) {
      const dir = options.dir ?? "";
      for (const file of Object.keys(bundle)) {
        if (!/\.(js|css)$/.test(file)) continue;
        const path = join(dir, file);
        writeFileSync(`${path}.gz`, gzipSync(readFileSync(path), { level: 9 }));
      }
    },
  };
}

export default defineConfig({
  base: "/ui/",
  build: {
    outDir: fileURLToPath(new URL("../src/shoal/server/web/dist", import.meta.url)),
    emptyOutDir: true,
    chunkSizeWarningLimit: 600,
    sourcemap: false,
    rolldownOptions: {
      checks: { bundlerTimings: false }, // gzip -9 in writeBundle is slow on purpose: no report
      output: {
        codeSplitting: { groups: CHUNKS },
      },
    },
  },
  plugins: [precompress()],
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  server: { proxy: { "/api": "http://127.0.0.1:8476" } },
});
