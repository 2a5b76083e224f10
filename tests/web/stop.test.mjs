// The page's Stop in real Chromium (issue 31): a turn whose model call is still streaming is
// stopped with the Stop button, which cancels the run on the server — not only the connection —
// so GET /api/runs/{runId} says `cancelled`. The server pauses the first model call after its
// first event (ASKLOOP_TEST_PAUSE_AT=model-stream, the CLI's test hook): a slow model.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { chromium } from "playwright-core";
import { startServer, waitFor } from "./lib.mjs";

const KEY = "ak_browser_stop_key";
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-stop" },
    agents: { slow: { script: { steps: [{ text: "Working on it for a long time." }] } } },
    env: { ASKLOOP_TEST_PAUSE_AT: "model-stream" },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function run(runId) {
  const response = await fetch(`${server.url}/api/runs/${encodeURIComponent(runId)}`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(response.status, 200);
  return response.json();
}

test("the page's Stop cancels the running turn's run on the server", async () => {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  await page.goto(`${server.url}/#/chat/slow/${randomUUID()}`);
  await page.getByRole("option", { name: "slow" }).waitFor({ state: "attached" });
  const stop = page.getByRole("button", { name: "Stop" });
  assert.equal(await stop.isVisible(), false, "no Stop while nothing runs");
  await page.getByLabel("Message").fill("Take your time");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  // The model streamed its first words and is paused mid-call: the turn runs.
  await page.locator(".message.assistant").filter({ hasText: "Working on it" }).waitFor();
  const messageId = await page.locator(".message.assistant").last().getAttribute("data-message-id");
  const runId = messageId.replace(/^msg-/, "");
  assert.equal((await run(runId)).status, "running");
  await stop.click();
  await page.getByText("Stopped: the run was cancelled.").waitFor();
  const stored = await waitFor(async () => {
    const body = await run(runId);
    return body.status === "cancelled" && body;
  }, 10_000, "the run to be cancelled");
  assert.equal(stored.status, "cancelled");
  assert.equal(await stop.isVisible(), false, "no Stop once the turn ended");
  // The page shows the chat as stored: the dropped model call left no message.
  await waitFor(async () => (await page.locator(".message.assistant").count()) === 0, 10_000, "the partial answer to go");
  // The thread goes on: the next turn runs to its end (the hook pauses the first call only).
  await page.getByLabel("Message").fill("Again, quickly");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator(".message.assistant").filter({ hasText: "Working on it for a long time." }).waitFor();
  await waitFor(async () => !(await stop.isVisible()), 10_000, "the turn to end");
  assert.deepEqual(problems, []);
  await context.close();
});
