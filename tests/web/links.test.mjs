// Issue 34 in a browser (real Chromium against `askloop serve`): an answer link. A link made
// with the tenant's key (POST /api/runs/{runId}/calls/{toolCallId}/link) opens, without any
// key, a page with that one question and the app's form; answering it shows the confirmation
// and the run goes on; the same link opened again says it no longer works.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { artifacts, asks, startServer } from "./lib.mjs";

const KEY = "ak_links_key";
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-links" },
    agents: {
      planner: {
        script: asks(
          {
            question: "Which city should the trip start in?",
            options: [
              { label: "Lisbon", description: "by the sea" },
              { label: "Porto", description: "by the river" },
            ],
          },
          "Lisbon it is.",
          "city",
        ),
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** A JSON request with the tenant's key. */
async function api(method, path, body) {
  const response = await fetch(server.url + path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, text, json: () => JSON.parse(text) };
}

test("an answer link opens its one question without a key, answers it once, then no longer works", async () => {
  const started = await api("POST", "/api/agents/planner/stream", { messages: "Plan a trip" });
  assert.equal(started.status, 200, started.text);
  const runId = started.text.match(/"runId":"([^"]+)"/)[1];
  const made = await api("POST", `/api/runs/${runId}/calls/city/link`, { expiresInSeconds: 600 });
  assert.equal(made.status, 201, made.text);
  const { url } = made.json();
  assert.match(url, /\/answer\/al_[0-9a-f]{64}$/);

  const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text());
  });
  const response = await page.goto(url);
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-security-policy"], /script-src 'self'/);
  await page.getByText("Which city should the trip start in?").waitFor();
  assert.equal(await page.getByLabel("API key").count(), 0, "no key asked for");
  await page.screenshot({ path: join(artifacts, "issue34-link-question.png") });

  // Nothing chosen: the form's own problem, nothing sent.
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Choose one.").waitFor();
  await page.getByRole("radio", { name: /Lisbon/ }).check();
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByRole("heading", { name: "Thank you" }).waitFor();
  await page.getByText("Your answer was sent: Lisbon").waitFor();
  await page.screenshot({ path: join(artifacts, "issue34-link-answered.png") });

  let run;
  for (let tries = 0; tries < 100; tries += 1) {
    run = (await api("GET", `/api/runs/${runId}`)).json();
    if (run.status === "completed") break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.equal(run.status, "completed");

  const again = await page.goto(url);
  assert.equal(again.status(), 410);
  await page.getByRole("heading", { name: "This link no longer works" }).waitFor();
  assert.deepEqual(problems.filter((text) => !/status of 410/.test(text)), []);
  await context.close();
});
