// Helpers of the web tests: start `askloop serve` (ASKLOOP_BIN, else target/debug/askloop) with
// scripted agents in a temporary folder, wait for its start line, stop it; a Node Chat on the
// `ai` package's AbstractChat (the client code useChat runs).
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { AbstractChat, DefaultChatTransport } from "ai";

const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, "../..");
export const askloopBin = process.env.ASKLOOP_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug", "askloop");
const require = createRequire(import.meta.url);
/** The entry of the MCP "everything" server (its `echo` tool is the one approvals gate). */
export const everythingServer = require.resolve("@modelcontextprotocol/server-everything/dist/index.js");

/** Where screenshots go (docs/page.png only with ASKLOOP_WEB_SCREENSHOT=1). */
export const artifacts = process.env.ASKLOOP_WEB_ARTIFACTS ?? join(tmpdir(), "askloop-web-artifacts");
mkdirSync(artifacts, { recursive: true });

/** The steps of a scripted model: ask with `args` first, then say `text`. */
export function asks(args, text = "Thanks, done.", id = "q1") {
  return { steps: [{ text: "Let me ask.", toolCalls: [{ id, name: "ask_user", args }] }, { text }] };
}

/**
 * Starts `askloop serve` with `agents` ({id: {script, toml?}}, or {model, toml?} for another
 * model SPEC than a script), API keys `keys`
 * ({secret: resource}), more `serve` flags `args` and more environment variables `env`, and
 * returns {url, stop}.
 */
export async function startServer({ agents, keys = {}, args = [], env: extraEnv = {} }) {
  const dir = mkdtempSync(join(tmpdir(), "askloop-web-"));
  let toml = `store = "sqlite://${join(dir, "runs.db")}"\nmodel = "scripted:${join(dir, "default.json")}"\n`;
  writeFileSync(join(dir, "default.json"), JSON.stringify({ steps: [{ text: "Hello." }] }));
  for (const [id, agent] of Object.entries(agents)) {
    let model = agent.model;
    if (!model) {
      const script = join(dir, `${id}.json`);
      writeFileSync(script, JSON.stringify(agent.script));
      model = `scripted:${script}`;
    }
    toml += `\n[agents.${id}]\nmodel = "${model}"\n${agent.toml ?? ""}\n`;
  }
  writeFileSync(join(dir, "askloop.toml"), toml);
  const env = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn", ...extraEnv };
  const keyList = Object.entries(keys).map(([secret, resource]) => `${secret}=${resource}`).join(",");
  if (keyList) env.ASKLOOP_API_KEYS = keyList;
  else delete env.ASKLOOP_API_KEYS;
  const child = spawn(askloopBin, ["--config", join(dir, "askloop.toml"), "serve", "--addr", "127.0.0.1:0", ...args], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (data) => {
    stderr += data;
  });
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`askloop serve did not start in 30 s: ${stderr}`)), 30_000);
    let out = "";
    child.stdout.on("data", (data) => {
      out += data;
      const match = out.match(/listening on (http:\/\/[^\s]+)/);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`askloop serve exited with ${code}: ${stderr}`));
    });
  });
  return {
    url,
    dir,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A chat state for Node: plain arrays (what useChat keeps in React state). */
class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), structuredClone(message), ...this.messages.slice(index + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

/** The AI SDK's chat client (AbstractChat + DefaultChatTransport) against askloop. */
export class NodeChat extends AbstractChat {
  constructor({ url, agentId, id, key, onData, onError }) {
    super({
      id,
      state: new State(),
      transport: new DefaultChatTransport({
        api: `${url}/api/agents/${agentId}/chat`,
        headers: key ? { Authorization: `Bearer ${key}` } : {},
      }),
      onData,
      onError,
    });
  }
}

/** Waits until `check()` is truthy (polling every 50 ms), at most `ms`. */
export async function waitFor(check, ms = 10_000, what = "a condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
