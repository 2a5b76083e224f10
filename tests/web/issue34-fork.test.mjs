// Issue 34 in the page (real Chromium against `askloop serve`): fork from a question. An answered
// question shows "Change answer"; it asks the question again as it was asked, and the new answer
// starts a fork of the run (POST /api/runs/{runId}/fork): the chat moves to the fork's thread,
// which goes on with the new answer, and the original run keeps its answer.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { artifacts, asks, startServer } from "./lib.mjs";

const KEY = "ak_issue34_fork_key";
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-fork" },
    agents: {
      planner: {
        script: asks({ question: "Which database?", options: [{ label: "MySQL" }, { label: "PostgreSQL" }] }, "Noted, thanks."),
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** GET `path` of the server with the test's key, as JSON. */
async function api(path) {
  const reply = await fetch(server.url + path, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(reply.status, 200, path);
  return reply.json();
}

/** The answers recorded in run `runId`'s tool results, in order. */
async function answers(runId) {
  const detail = await api(`/api/runs/${encodeURIComponent(runId)}`);
  return detail.messages.filter((message) => message.role === "tool").flatMap((message) => message.results.map((result) => result.answer));
}

test("change answer: the fork goes on with the new answer, the original keeps its own", async () => {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  const thread = randomUUID();
  await page.goto(`${server.url}/#/chat/planner/${thread}`);
  await page.getByRole("option", { name: "planner" }).waitFor({ state: "attached" });
  await page.getByLabel("Message").fill("Plan my app");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.getByRole("radio", { name: "MySQL" }).check();
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Noted, thanks.").waitFor();
  await page.getByText("User answered: MySQL").waitFor();

  await page.getByRole("button", { name: "Change answer" }).click();
  await page.getByRole("radio", { name: "PostgreSQL" }).check();
  await page.screenshot({ path: join(artifacts, "issue34-change-answer.png") });
  await page.getByRole("button", { name: "Fork with this answer" }).click();
  await page.waitForFunction((old) => !location.hash.endsWith(old), thread);
  await page.getByText("User answered: PostgreSQL").waitFor();
  await page.getByText("Noted, thanks.").waitFor();
  assert.equal(await page.getByText("User answered: MySQL").count(), 0, "the fork's thread holds the new answer only");
  await page.screenshot({ path: join(artifacts, "issue34-forked.png") });

  const { runs } = await api("/api/runs");
  assert.equal(runs.length, 2, JSON.stringify(runs));
  const fork = runs.find((run) => run.forkedFrom);
  const original = runs.find((run) => !run.forkedFrom);
  assert.ok(fork && original, JSON.stringify(runs));
  assert.equal(fork.forkedFrom.runId, original.runId);
  assert.equal(original.threadId, thread);
  assert.notEqual(fork.threadId, thread);
  assert.deepEqual(await answers(original.runId), ["MySQL"], "the original keeps its answer");
  assert.deepEqual(await answers(fork.runId), ["PostgreSQL"], "the fork holds the new answer only");
  assert.equal(original.status, "completed");
  assert.equal(fork.status, "completed");
  assert.deepEqual(problems, []);
  await context.close();
});
