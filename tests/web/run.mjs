// The web tests' one entry point: `node tests/web/run.mjs` (ASKLOOP_BIN: the askloop binary,
// else target/debug/askloop; CHROMIUM: the browser, else /usr/bin/chromium). Runs the protocol
// test, the browser tests and the cross-origin test with node's test runner.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const only = process.argv.slice(2);
const files = (only.length ? only : ["protocol.test.mjs", "e2e.test.mjs", "issue33.test.mjs", "issue34.test.mjs", "issue34-fork.test.mjs", "issue35.test.mjs", "links.test.mjs", "approvers.test.mjs", "stop.test.mjs", "cors.test.mjs"]).map((file) => join(here, file));
const result = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], { stdio: "inherit" });
process.exit(result.status ?? 1);
