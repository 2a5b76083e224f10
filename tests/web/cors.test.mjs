// Issue 31, cross-origin requests in real Chromium: a page of another origin calls `askloop serve`
// the way the `useChat` example of docs/http-api.md does (a POST to the chat route with a key in a header,
// JSON body, streamed answer). With the page's origin given by `--cors-origin` the browser lets
// it through (preflight, then the stream); a page of any other origin gets nothing; and a
// form-like post of another origin to the open loopback server (no preflight: cancel and
// continue need no body) is refused by the server itself.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { chromium } from "playwright-core";
import { asks, startServer } from "./lib.mjs";

const KEY = "ak_cors_test_key";
let server;
let browser;
const apps = [];

/** A page server on another port of 127.0.0.1 (another origin than askloop's): its URL. */
async function appServer() {
  const app = createServer((_, response) => {
    response.writeHead(200, { "content-type": "text/html" });
    response.end("<!doctype html><title>app</title><p>another origin</p>");
  });
  await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
  apps.push(app);
  return `http://127.0.0.1:${app.address().port}`;
}

let allowed;
let other;

before(async () => {
  allowed = await appServer();
  other = await appServer();
  server = await startServer({
    keys: { [KEY]: "tenant-cors" },
    agents: { assistant: { script: asks({ question: "Which repo?", options: [{ label: "main" }, { label: "docs" }] }) } },
    args: ["--cors-origin", allowed],
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
  for (const app of apps) app.close();
});

/** In a page of `origin`: what the chat transport's request to askloop gets. */
async function chatFrom(origin, chatId) {
  const page = await browser.newPage();
  await page.goto(origin + "/");
  const result = await page.evaluate(
    async ({ url, key, chatId }) => {
      try {
        const response = await fetch(`${url}/api/agents/assistant/chat`, {
          method: "POST",
          headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
          body: JSON.stringify({ id: chatId, trigger: "submit-message", messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "Summarize my project" }] }] }),
        });
        return { status: response.status, stream: response.headers.get("x-vercel-ai-ui-message-stream"), text: await response.text() };
      } catch (error) {
        return { failed: String(error) };
      }
    },
    { url: server.url, key: KEY, chatId },
  );
  await page.close();
  return result;
}

test("a configured origin's page streams a chat from askloop (CORS with a key)", async () => {
  const result = await chatFrom(allowed, "cors-allowed");
  assert.equal(result.failed, undefined, JSON.stringify(result));
  assert.equal(result.status, 200);
  assert.equal(result.stream, "v1", "the exposed header is readable");
  assert.match(result.text, /data-askloop-question/);
  assert.match(result.text, /data: \[DONE\]/);
});

test("another origin's page gets nothing from a keyed server", async () => {
  const result = await chatFrom(other, "cors-other");
  assert.ok(result.failed, `the browser let another origin read the answer: ${JSON.stringify(result)}`);
});

test("a cross-site post to the open loopback server (a form's, no preflight) changes nothing", async () => {
  const open = await startServer({ agents: { assistant: { script: asks({ question: "Which repo?", options: [{ label: "main" }, { label: "docs" }] }) } } });
  try {
    const started = await fetch(`${open.url}/api/agents/assistant/stream`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: "Summarize my project" }),
    });
    const first = (await started.text()).split("\n").find((line) => line.startsWith("data: {"));
    const runId = JSON.parse(first.slice(6)).runId;
    // What a form on any site can send: a simple POST, no preflight; cancel needs no body.
    const page = await browser.newPage();
    await page.goto(other + "/");
    await page.evaluate(async ({ url, runId }) => {
      await fetch(`${url}/api/runs/${runId}/cancel`, { method: "POST", mode: "no-cors" }).catch(() => {});
      await fetch(`${url}/api/runs/${runId}/continue`, { method: "POST", mode: "no-cors" }).catch(() => {});
    }, { url: open.url, runId });
    await page.close();
    const run = await (await fetch(`${open.url}/api/runs/${runId}`)).json();
    assert.equal(run.status, "suspended", JSON.stringify(run));
  } finally {
    await open.stop();
  }
});
