// Issue 33 in the page (real Chromium against `askloop serve`): the person's own words for a
// pick-one question, in the chat and in the Inbox; the chat shows that the agent works (with the
// time since the message was sent) before its first text, and streams the text as it comes
// (a model server of the test's own that holds each piece until the test lets it go); no API key
// box on a server that needs no key, and no 404 (the icon is served); a question answered
// elsewhere leaves the chat without a reload, and so does one answered while the chat was not
// shown (the chat reads itself again as its event stream opens); the status line never covers
// the Inbox's cards.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { NodeChat, artifacts, asks, startServer, waitFor } from "./lib.mjs";

const KEY = "ak_issue33_key";
const OWN = "Other: type my own answer";
const BIRTHDAY = { question: "What is your sister's name?", options: [{ label: "Alice" }, { label: "Bob" }] };
let model;
let keyed;
let open;
let browser;

/** A gate: `wait` resolves once `open()` was called. */
function gate() {
  let open;
  const wait = new Promise((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

/**
 * An OpenAI-compatible model server: each chat completion streams "Hello" once `first` opens
 * and " world" once `second` opens (`reset()` makes new gates for the next reply).
 */
async function startModel() {
  const state = { first: gate(), second: gate() };
  const server = createServer(async (request, response) => {
    for await (const _ of request); // the request itself does not matter
    if (request.method !== "POST" || !request.url.endsWith("/chat/completions")) {
      response.writeHead(404).end();
      return;
    }
    const { first, second } = state;
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 0, model: "fake", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    response.write(chunk({ role: "assistant", content: "" }));
    await first.wait;
    response.write(chunk({ content: "Hello" }));
    await second.wait;
    response.write(chunk({ content: " world" }));
    response.write(chunk({}, "stop"));
    response.end("data: [DONE]\n\n");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    state,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

before(async () => {
  model = await startModel();
  keyed = await startServer({
    keys: { [KEY]: "tenant-33" },
    env: { OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-test" },
    agents: {
      birthday: { script: asks(BIRTHDAY, "Happy birthday!"), toml: "allow_other = true\n" },
      repo: { script: asks({ question: "Which repo?", options: [{ label: "main" }, { label: "docs" }] }, "Summary of the repo.") },
      streamer: { model: "openai:fake" },
    },
  });
  open = await startServer({ agents: { hello: { script: { steps: [{ text: "Hello there." }] } } } });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await keyed?.stop();
  await open?.stop();
  model.state.first.open();
  model.state.second.open();
  await model?.close();
});

/** A new page signed in with the key, on a new chat of `agent`; its chat id. */
async function openChat(agent) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(keyed.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  const chatId = randomUUID();
  await page.goto(`${keyed.url}/#/chat/${agent}/${chatId}`);
  await page.getByRole("option", { name: agent }).waitFor({ state: "attached" });
  return { page, context, problems, chatId };
}

async function say(page, text) {
  await page.getByLabel("Message").fill(text);
  await page.getByRole("button", { name: "Send", exact: true }).click();
}

/** A JSON request to the keyed server with the key. */
async function api(method, path, body) {
  const response = await fetch(keyed.url + path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

test("a pick-one question in the chat takes the person's own words", async () => {
  const { page, context, problems } = await openChat("birthday");
  await say(page, "Write a birthday message for my sister");
  await page.getByRole("radio", { name: "Alice" }).waitFor();
  const own = page.getByRole("radio", { name: OWN });
  await own.waitFor();
  await page.getByLabel("Your own answer", { exact: true }).fill("Maria");
  assert.ok(await own.isChecked(), "typing picks the own answer");
  await page.screenshot({ path: join(artifacts, "own-answer-chat.png") });
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Happy birthday!").waitFor();
  await page.locator(".tool").filter({ hasText: /ask_user: .*Maria/ }).waitFor();
  assert.deepEqual(problems, []);
  await context.close();
});

test("a pick-one question in the Inbox takes the person's own words; the status line covers no card", async () => {
  const { page, context, problems } = await openChat("birthday");
  await page.getByRole("link", { name: /Inbox/ }).click();
  await page.getByRole("heading", { name: "Inbox" }).waitFor();
  const other = new NodeChat({ url: keyed.url, agentId: "birthday", id: randomUUID(), key: KEY });
  await other.sendMessage({ text: "From elsewhere" });
  const runId = other.messages.at(-1).metadata.runId;
  const item = page.locator(`#inbox-list li[data-run-id="${runId}"]`);
  await item.waitFor({ timeout: 15_000 });
  await item.getByRole("radio", { name: "Bob" }).waitFor();
  await item.getByRole("radio", { name: OWN }).waitFor();
  await item.getByLabel("Your own answer", { exact: true }).fill("Maria");
  await item.getByRole("button", { name: "Answer" }).click();
  await item.locator(".outcome .result").filter({ hasText: "The run completed: Happy birthday!" }).waitFor({ timeout: 15_000 });
  await item.getByText("You answered: Maria").waitFor();
  const run = await api("GET", `/api/runs/${runId}`);
  assert.ok(JSON.stringify(run.body.messages).includes("Maria"), "the model received the person's words");

  // The status line says the run was answered, above the cards, over none of them.
  const status = page.locator("#status");
  await status.filter({ hasText: `Answered run ${runId}.` }).waitFor();
  await page.screenshot({ path: join(artifacts, "own-answer-inbox.png") });
  const bar = await status.boundingBox();
  for (const box of [await page.locator("#inbox-title").boundingBox(), await item.locator(".meta").boundingBox()]) {
    const overlaps = bar.y < box.y + box.height && box.y < bar.y + bar.height;
    assert.ok(!overlaps, `the status line ${JSON.stringify(bar)} covers ${JSON.stringify(box)}`);
  }
  assert.deepEqual(problems, []);
  await context.close();
});

test("the chat shows the agent working before its first text, then streams the text", async () => {
  const { page, context, problems } = await openChat("streamer");
  await say(page, "Hi");
  const working = page.locator(".working");
  await working.waitFor();
  assert.match(await working.textContent(), /working… \d+ s$/);
  // The time counts on while nothing comes.
  await waitFor(async () => /working… [1-9]\d* s$/.test(await working.textContent()), 5_000, "the time to count");
  assert.equal(await page.locator(".message.assistant").count(), 0, "no empty bubble while nothing is written");
  assert.ok(await page.getByRole("button", { name: "Stop" }).isVisible());
  await page.screenshot({ path: join(artifacts, "working.png") });

  model.state.first.open();
  const reply = page.locator(".message.assistant");
  await reply.getByText("Hello").waitFor();
  assert.equal(await working.count(), 0, "the indicator gives way to the text");
  assert.doesNotMatch(await reply.textContent(), /world/, "the first piece shows before the rest is written");
  model.state.second.open();
  await reply.getByText("Hello world").waitFor();
  await page.getByRole("button", { name: "Stop" }).waitFor({ state: "hidden" });
  assert.deepEqual(problems, []);
  await context.close();
});

test("no API key box on a server that needs no key, and nothing the page asks for is missing", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const failed = [];
  page.on("response", (response) => {
    if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
  });
  await page.goto(`${open.url}/#/chat/hello/${randomUUID()}`);
  await page.getByRole("option", { name: "hello" }).waitFor({ state: "attached" });
  await say(page, "Hi");
  await page.getByText("Hello there.").waitFor();
  assert.ok(await page.locator("#key-form").isHidden(), "the key box is hidden");
  assert.equal(await page.getByLabel("API key").count(), 1);
  assert.ok(!(await page.getByLabel("API key").isVisible()));
  const icon = await page.request.get(open.url + (await page.locator('link[rel="icon"]').getAttribute("href")));
  assert.equal(icon.status(), 200);
  assert.match(icon.headers()["content-type"], /^image\/svg\+xml/);
  assert.equal((await page.request.get(open.url + "/favicon.ico")).status(), 200);
  assert.deepEqual(failed, []);
  await context.close();

  // A server with keys: the box shows (a request without a key was answered 401).
  const keyedPage = await browser.newPage();
  await keyedPage.goto(keyed.url + "/");
  await keyedPage.getByLabel("API key").waitFor({ state: "visible" });
  await keyedPage.getByText("This server needs an API key").waitFor();
  await keyedPage.close();
});

test("a question answered elsewhere leaves the chat without a reload", async () => {
  const { page, context, problems, chatId } = await openChat("repo");
  await say(page, "Summarize");
  await page.getByRole("radio", { name: "main" }).waitFor();
  const runs = await api("GET", `/api/runs?status=suspended&threadId=${chatId}`);
  assert.equal(runs.body.runs.length, 1, JSON.stringify(runs.body));
  const runId = runs.body.runs[0].runId;
  // Answered by another client (another tab, the CLI): the page is not told by its own request.
  const answered = await fetch(`${keyed.url}/api/runs/${runId}/responses`, {
    method: "POST",
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({ responses: [{ toolCallId: "q1", answer: "docs" }] }),
  });
  assert.equal(answered.status, 200);
  await answered.text();
  await page.getByRole("radio", { name: "main" }).waitFor({ state: "detached", timeout: 10_000 });
  await page.locator("#messages").getByText("Summary of the repo.").waitFor({ timeout: 10_000 });
  await page.locator("#messages").getByText("User answered: docs").waitFor();
  assert.equal(await page.locator("#pending form").count(), 0, "nothing is left to answer");
  assert.deepEqual(problems, []);
  await context.close();
});

test("a question answered while the chat was not shown is gone when it shows again", async () => {
  const { page, context, problems, chatId } = await openChat("repo");
  await say(page, "Summarize");
  await page.getByRole("radio", { name: "main" }).waitFor();
  const runs = await api("GET", `/api/runs?status=suspended&threadId=${chatId}`);
  const runId = runs.body.runs[0].runId;
  // The Inbox shows: the chat stops following the inbox events; the question is answered meanwhile.
  await page.getByRole("link", { name: /Inbox/ }).click();
  await page.getByRole("heading", { name: "Inbox" }).waitFor();
  const answered = await fetch(`${keyed.url}/api/runs/${runId}/responses`, {
    method: "POST",
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({ responses: [{ toolCallId: "q1", answer: "docs" }] }),
  });
  assert.equal(answered.status, 200);
  await answered.text();
  await waitFor(async () => (await api("GET", `/api/runs/${runId}`)).body.status === "completed", 10_000, "the run to complete");
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // the server's events of it went out
  // Back to the chat: it follows the events again, and reads itself again as the stream opens
  // (no event tells it: the answer came while it did not listen). Within 3 s, before its
  // every-4-s check of the questions shown could.
  await page.evaluate((hash) => {
    location.hash = hash; // the same page, not a reload
  }, `#/chat/repo/${chatId}`);
  await page.getByRole("radio", { name: "main" }).waitFor({ state: "detached", timeout: 3_000 });
  await page.locator("#messages").getByText("Summary of the repo.").waitFor({ timeout: 3_000 });
  assert.deepEqual(problems, []);
  await context.close();
});
