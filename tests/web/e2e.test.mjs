// The page in real Chromium (Debian's /usr/bin/chromium, driven by playwright-core) against
// `askloop serve` with scripted agents: free text, single and multi select (with "Other"),
// approve and decline, two questions in one submit, the inbox showing another run's question
// in full (its text, options with descriptions, deadline) and, once answered, what the run did,
// reload mid-question and during a running turn (which goes on), a question
// carrying HTML rendered inert, a rejected answer beside its field, and the whole flow by
// keyboard. Screenshots go to the artifacts folder;
// with ASKLOOP_WEB_SCREENSHOT=1 the README's docs/page.png is rewritten too (a tracked file
// is never changed by a plain test run).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { NodeChat, artifacts, asks, everythingServer, repo, startServer } from "./lib.mjs";

const KEY = "ak_browser_test_key";
const XSS = `Is this safe? <img src=x onerror="window.__xss = 1"> <script>window.__xss = 2</script>`;
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-web" },
    agents: {
      free: { script: asks({ question: "What is your name?" }, "Nice to meet you.") },
      single: { script: asks({ question: "Which repo?", options: [{ label: "main", description: "The application" }, { label: "docs", description: "The website" }] }, "Summary of the repo.") },
      multi: {
        script: asks({ question: "Which days?", options: [{ label: "Mon" }, { label: "Tue" }, { label: "Wed" }], selectionMode: "multi_select" }, "Booked."),
        toml: "allow_other = true\n",
      },
      two: {
        script: {
          steps: [
            { toolCalls: [{ id: "a", name: "ask_user", args: { question: "First name?" } }, { id: "b", name: "ask_user", args: { question: "Pick a colour", options: [{ label: "red" }, { label: "blue" }] } }] },
            { text: "Both answered." },
          ],
        },
      },
      ops: {
        script: { steps: [{ toolCalls: [{ id: "e1", name: "echo", args: { message: "hello" } }] }, { text: "Done with echo." }] },
        toml: `[agents.ops.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = ["echo"]\n`,
      },
      slow: {
        script: { steps: [{ text: "Working on it.", toolCalls: [{ id: "l1", name: "trigger-long-running-operation", args: { duration: 4, steps: 4 } }] }, { text: "All done." }] },
        toml: `[agents.slow.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = false\n`,
      },
      xss: { script: asks({ question: XSS }, `Output <b>bold?</b> <img src=x onerror="window.__xss = 3">`) },
      deadline: {
        script: asks({ question: "Which repo?", options: [{ label: "main", description: "The application" }, { label: "docs", description: "The website" }] }, "Summary of the docs."),
        toml: "question_timeout_seconds = 3600\n",
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** A new page signed in with the key, on a new chat of `agent`. */
async function openChat(agent) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  await page.goto(`${server.url}/#/chat/${agent}/${randomUUID()}`);
  await page.getByRole("option", { name: agent }).waitFor({ state: "attached" });
  return { page, context, problems };
}

async function say(page, text) {
  await page.getByLabel("Message").fill(text);
  await page.getByRole("button", { name: "Send", exact: true }).click();
}

/** Presses Tab until the element `id` has focus (at most 20 times). */
async function tabTo(page, id) {
  for (let i = 0; i < 20; i++) {
    if (await page.evaluate((want) => document.activeElement?.id === want, id)) return;
    await page.keyboard.press("Tab");
  }
  assert.fail(`Tab never reached #${id}`);
}

test("free text: the question becomes a text box, focus moves to it, the answer continues the run", async () => {
  const { page, context, problems } = await openChat("free");
  await say(page, "Hi");
  const box = page.getByLabel("Your answer");
  await box.waitFor();
  assert.ok(await box.evaluate((el) => el === document.activeElement), "focus is on the new question");
  await page.screenshot({ path: join(artifacts, "question.png") });
  if (process.env.ASKLOOP_WEB_SCREENSHOT === "1") {
    await page.screenshot({ path: join(repo, "docs", "page.png") });
  }
  await box.fill("Ada");
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Nice to meet you.").waitFor();
  await page.getByText("ask_user: User answered: Ada").waitFor();
  await page.screenshot({ path: join(artifacts, "free-text-answered.png") });
  assert.deepEqual(problems, []);
  await context.close();
});

test("a blank answer is refused by the server, its message beside the field", async () => {
  const { page, context } = await openChat("free");
  await say(page, "Hi");
  const box = page.getByLabel("Your answer");
  await box.waitFor();
  await box.fill("   ");
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.locator(".question .problem").filter({ hasText: /empty|expected/i }).waitFor();
  await page.screenshot({ path: join(artifacts, "rejected.png") });
  await page.getByLabel("Your answer").fill("Ada");
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Nice to meet you.").waitFor();
  await context.close();
});

test("single select: radios with descriptions", async () => {
  const { page, context } = await openChat("single");
  await say(page, "Summarize");
  const docs = page.getByRole("radio", { name: "docs" });
  await docs.waitFor();
  await page.getByText("The website").waitFor();
  await page.screenshot({ path: join(artifacts, "single-select.png") });
  await docs.check();
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Summary of the repo.").waitFor();
  await page.getByText("User answered: docs").waitFor();
  await context.close();
});

test("multi select: checkboxes, and the person's own words", async () => {
  const { page, context } = await openChat("multi");
  await say(page, "Book");
  await page.getByRole("checkbox", { name: "Mon" }).check();
  await page.getByRole("checkbox", { name: "Wed" }).check();
  await page.getByLabel("Your own answer", { exact: true }).fill("Sunday morning");
  assert.ok(await page.getByRole("checkbox", { name: "Other: type my own answer" }).isChecked(), "typing picks the own answer");
  await page.screenshot({ path: join(artifacts, "multi-select.png") });
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Booked.").waitFor();
  await page.getByText(/User answered: Mon, Wed, .*Sunday morning/).waitFor();
  await context.close();
});

test("approve and decline: the tool and its arguments, Approve / Decline with a reason", async () => {
  for (const decision of ["Approve", "Decline"]) {
    const { page, context } = await openChat("ops");
    await say(page, "Echo it");
    await page.getByText("Tool: echo").waitFor();
    await page.getByLabel("Arguments of echo").filter({ hasText: '"message": "hello"' }).waitFor();
    await page.getByRole("radio", { name: decision }).check();
    if (decision === "Decline") await page.getByLabel("Reason (optional)").fill("not today");
    await page.screenshot({ path: join(artifacts, `approval-${decision.toLowerCase()}.png`) });
    await page.getByRole("button", { name: "Send answer" }).click();
    await page.getByText("Done with echo.").waitFor();
    if (decision === "Approve") await page.locator(".tool").filter({ hasText: /echo: .*hello/ }).waitFor();
    else await page.locator(".tool").filter({ hasText: /echo: .*(declin|not today)/i }).waitFor();
    await context.close();
  }
});

test("two questions at once show together and go in one submit", async () => {
  const { page, context } = await openChat("two");
  await say(page, "Ask me two things");
  await page.getByRole("heading", { name: "The agent asks 2 questions" }).waitFor();
  await page.getByLabel("Your answer").fill("Grace");
  await page.getByRole("radio", { name: "blue" }).check();
  await page.screenshot({ path: join(artifacts, "two-questions.png") });
  await page.getByRole("button", { name: "Send answers" }).click();
  await page.getByText("Both answered.").waitFor();
  await page.getByText("User answered: Grace").waitFor();
  await page.getByText("User answered: blue").waitFor();
  await context.close();
});

test("reload mid-question shows the same question", async () => {
  const { page, context } = await openChat("single");
  await say(page, "Summarize");
  await page.getByRole("radio", { name: "main" }).waitFor();
  const before = page.url();
  await page.reload();
  assert.equal(page.url(), before);
  await page.getByRole("radio", { name: "main" }).check();
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Summary of the repo.").waitFor();
  await context.close();
});

test("reload during a running turn shows the turn going on to its end", async () => {
  const { page, context, problems } = await openChat("slow");
  await say(page, "Take your time");
  await page.getByText("Working on it.").waitFor();
  await page.reload();
  await page.getByText("All done.").waitFor({ timeout: 15_000 });
  assert.equal(await page.getByText("Working on it.").count(), 1, "the turn once, not twice");
  assert.deepEqual(problems, []);
  await context.close();
});

test("HTML in a question and in model output is shown as text, never run", async () => {
  const { page, context } = await openChat("xss");
  await say(page, "Go");
  const legend = page.locator(".question legend");
  await legend.waitFor();
  assert.equal(await legend.textContent(), XSS);
  assert.equal(await page.locator("#pending img, #messages img, #pending script").count(), 0);
  await page.getByLabel("Your answer").fill(`<img src=x onerror="window.__xss = 4">`);
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Output <b>bold?</b>", { exact: false }).waitFor();
  assert.equal(await page.locator("main img, main b").count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  await page.screenshot({ path: join(artifacts, "inert-html.png") });
  const csp = (await page.request.get(server.url + "/")).headers()["content-security-policy"];
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  await context.close();
});

test("the inbox shows another run's question in full, live, and what the run did once answered", async () => {
  const { page, context, problems } = await openChat("free");
  await page.getByRole("link", { name: /Inbox/ }).click();
  await page.getByRole("heading", { name: "Inbox" }).waitFor();
  // Another client (the AI SDK's chat in Node) starts a run that asks, with a deadline.
  const other = new NodeChat({ url: server.url, agentId: "deadline", id: randomUUID(), key: KEY });
  await other.sendMessage({ text: "From elsewhere" });
  const runId = other.messages.at(-1).metadata.runId;
  const item = page.locator(`#inbox-list li[data-run-id="${runId}"]`);
  await item.waitFor({ timeout: 15_000 });
  // The question as the model asked it, each option with its description, the deadline.
  await item.locator("legend").filter({ hasText: /^Which repo\?$/ }).waitFor();
  assert.equal(await item.getByText("asks for an answer").count(), 0);
  await item.getByRole("radio", { name: "main" }).waitFor();
  await item.getByRole("radio", { name: "docs" }).waitFor();
  await item.getByText("The application").waitFor();
  await item.getByText("The website").waitFor();
  const deadline = item.locator(".deadline");
  await deadline.waitFor();
  assert.match(await deadline.textContent(), /^Answer by \S/);
  const run = await (await fetch(`${server.url}/api/runs/${runId}`, { headers: { Authorization: `Bearer ${KEY}` } })).json();
  const expiresAt = run.pendingToolCalls[0].expiresAt;
  assert.equal(await deadline.locator("time").getAttribute("datetime"), expiresAt);
  const inAnHour = Date.parse(expiresAt) - Date.now();
  assert.ok(inAnHour > 55 * 60_000 && inAnHour <= 60 * 60_000, `the deadline is in an hour: ${expiresAt}`);
  await page.screenshot({ path: join(artifacts, "inbox.png") });

  // Answered in place: the card stays and tells what the run did, with a way to its chat.
  await item.getByRole("radio", { name: "docs" }).check();
  await item.getByRole("button", { name: "Answer" }).click();
  await item.locator(".outcome .result").filter({ hasText: "The run completed: Summary of the docs." }).waitFor({ timeout: 15_000 });
  await item.getByText("You answered: docs").waitFor();
  assert.equal(await item.getByRole("radio").count(), 0, "the answered question is no longer a form");
  await page.screenshot({ path: join(artifacts, "inbox-answered.png") });
  await item.getByRole("link", { name: "Open its chat" }).click();
  await page.locator("#messages").getByText("Summary of the docs.").waitFor();
  await page.locator("#messages").getByText("User answered: docs").waitFor();
  assert.deepEqual(problems, []);
  await context.close();
});

test("keyboard only: key, message, answer, all without a pointer", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${server.url}/`);
  // The key box shows once the server said it needs a key.
  await page.getByLabel("API key").waitFor();
  await tabTo(page, "api-key");
  await page.keyboard.type(KEY);
  await page.keyboard.press("Enter");
  await page.goto(`${server.url}/#/chat/single/${randomUUID()}`);
  await page.getByRole("option", { name: "single" }).waitFor({ state: "attached" });
  await tabTo(page, "prompt");
  await page.keyboard.type("Summarize");
  await page.keyboard.press("Enter");
  await page.getByRole("radio", { name: "main" }).waitFor();
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("type")), "radio", "focus moved to the question");
  await page.keyboard.press("ArrowDown"); // the second choice, docs
  await page.keyboard.press("Tab");
  await page.keyboard.press("Enter");
  await page.getByText("User answered: docs").waitFor();
  await page.screenshot({ path: join(artifacts, "keyboard.png") });
  await context.close();
});
