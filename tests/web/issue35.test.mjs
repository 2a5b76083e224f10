// Issue 35 in the page (real Chromium against `askloop serve`): a supervisor whose researcher
// sub-agent asks. The researcher's work shows collapsed under the supervisor's tool call (its
// text inside once opened); its question is the chat's own, with a line saying who asked; one
// answer lets the whole team go on. Needs askloop.toml's `subagents` and `description`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { artifacts, startServer } from "./lib.mjs";

const KEY = "ak_issue35_key";
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-web" },
    agents: {
      researcher: {
        script: {
          steps: [
            { text: "Looking into it.", toolCalls: [{ id: "r1", name: "ask_user", args: { question: "Which source?", options: [{ label: "arxiv" }, { label: "web" }] } }] },
            { text: "Found it in arxiv." },
          ],
        },
        toml: 'description = "Finds papers; may ask which source to use."\n',
      },
      supervisor: {
        script: { steps: [{ toolCalls: [{ id: "s1", name: "researcher", args: { prompt: "Find the paper." } }] }, { text: "Report done." }] },
        toml: 'tools = []\nsubagents = ["researcher"]\n',
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("a sub-agent's work shows collapsed under its call, its question as the chat's with who asked", async () => {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  await page.goto(`${server.url}/#/chat/supervisor/${randomUUID()}`);
  await page.getByRole("option", { name: "supervisor" }).waitFor({ state: "attached" });
  await page.getByLabel("Message").fill("Write the report.");
  await page.getByRole("button", { name: "Send", exact: true }).click();

  // The researcher's question, asked through the supervisor.
  await page.getByTestId("question-origin").filter({ hasText: "asked by researcher (via supervisor)" }).waitFor();
  await page.locator(".question legend").filter({ hasText: "Which source?" }).waitFor();

  // Its work: collapsed by default, under the supervisor's call; its text once opened.
  const work = page.getByTestId("subagent");
  await work.filter({ hasText: "Sub-agent researcher: waits for an answer" }).waitFor();
  assert.equal(await work.count(), 1);
  assert.equal(await work.evaluate((box) => box.open), false, "collapsed by default");
  assert.equal(await work.evaluate((box) => box.previousElementSibling?.textContent ?? ""), "researcher: waits for an answer", "under the supervisor's call");
  assert.equal(await page.getByText("Looking into it.").isVisible(), false);
  await work.locator("summary").click();
  await page.getByText("Looking into it.").waitFor();
  assert.equal(await page.locator(".message.assistant .text").filter({ hasText: "Looking into it." }).count(), 0, "never the supervisor's own text");
  await page.screenshot({ path: join(artifacts, "issue35-question.png") });

  // One answer: the researcher goes on, then the supervisor.
  await page.getByRole("radio", { name: "arxiv" }).check();
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Report done.").waitFor();
  await work.filter({ hasText: "Sub-agent researcher: done" }).waitFor();
  await work.filter({ hasText: "Found it in arxiv." }).waitFor();
  assert.equal(await page.locator(".questions").count(), 0, "no question left");
  await page.screenshot({ path: join(artifacts, "issue35-done.png") });
  assert.deepEqual(problems, []);
  await context.close();
});
