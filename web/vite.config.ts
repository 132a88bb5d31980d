// The dashboard's build: `make web` (npm ci, then this) writes it into the Python package, which
// the shoal server serves at /ui/. Everything is bundled: the page loads nothing from elsewhere.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  base: "/ui/",
  build: {
    outDir: fileURLToPath(new URL("../src/shoal/server/web/dist", import.meta.url)),
    emptyOutDir: true,
    chunkSizeWarningLimit: 1500,
    sourcemap: false,
  },
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  server: { proxy: { "/api": "http://127.0.0.1:8476" } },
});
