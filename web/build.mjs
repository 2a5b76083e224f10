// Builds the page into web/dist: src/main.ts bundled and minified (esbuild) into app.js, the
// answer link's page src/answer.ts into answer.js, the HTML files and app.css copied. The output is committed (the server embeds it, so `cargo build` needs no npm);
// CI rebuilds it and checks that nothing changed, so the build must be reproducible: no
// timestamps, no absolute paths, no source maps.
import { build } from "esbuild";
import { copyFile, mkdir, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const dist = join(root, "dist");
await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });
for (const [entry, outfile] of [
  ["src/main.ts", "dist/app.js"],
  ["src/answer.ts", "dist/answer.js"],
]) {
  await build({
    absWorkingDir: root,
    entryPoints: [entry],
    outfile,
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    platform: "browser",
    legalComments: "none",
    charset: "utf8",
    logLevel: "warning",
  });
}
for (const file of ["index.html", "answer.html", "link-gone.html", "app.css", "icon.svg"]) {
  await copyFile(join(root, "src", file), join(dist, file));
}
