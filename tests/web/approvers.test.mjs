// Issue 34 in the page (real Chromium against `askloop serve`): who may answer. An agent needs
// two approvers with the role `ops`, not the one who started the run. In the Inbox, the card says
// how many approvers the call needs and who approved so far; the first approval is recorded (the
// outcome says "Approval 1 of 2 recorded" and who decided, from which route); the starter's own
// approval is refused with the server's reason beside the card; a second approver runs the tool.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { artifacts, everythingServer, startServer } from "./lib.mjs";

const KEYS = { alice: "ak_approvers_alice", bob: "ak_approvers_bob", carol: "ak_approvers_carol" };
let server;
let browser;

function keyToml(label) {
  const hash = createHash("sha256").update(KEYS[label]).digest("hex");
  return `\n[[server.keys]]\nhash = "${hash}"\nresource = "team"\nlabel = "${label}"\nroles = ["ops"]\n`;
}

before(async () => {
  server = await startServer({
    agents: {
      ops: {
        script: { steps: [{ toolCalls: [{ id: "e1", name: "echo", args: { message: "ship" } }] }, { text: "Shipped." }] },
        toml:
          `roles = ["ops"]\nself_approval = false\nquorum = 2\n` +
          `[agents.ops.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = ["echo"]\n` +
          keyToml("alice") + keyToml("bob") + keyToml("carol"),
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The Inbox card of `runId` in a page that uses `who`'s key. */
async function inboxCard(who, runId) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 800 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEYS[who]);
  await page.getByRole("button", { name: "Use key" }).click();
  await page.getByRole("link", { name: /Inbox/ }).click();
  await page.getByRole("heading", { name: "Inbox" }).waitFor();
  const item = page.locator(`#inbox-list li[data-run-id="${runId}"]`).first();
  await item.waitFor({ timeout: 15_000 });
  return { context, page, item, problems };
}

test("a quorum of two: the card shows the votes, the starter is refused, the second approver runs the tool", async () => {
  // Alice starts the run over HTTP; it waits for approval of its echo call.
  const started = await fetch(`${server.url}/api/agents/ops/stream`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEYS.alice}` },
    body: JSON.stringify({ messages: "Ship it" }),
  });
  const runId = JSON.parse((await started.text()).split("\n").find((line) => line.startsWith("data: {")).slice(6)).runId;

  // Bob: the first of two approvals.
  const bob = await inboxCard("bob", runId);
  await bob.item.getByText("Needs 2 approvers; approved so far: 0").waitFor();
  await bob.item.getByRole("radio", { name: "Approve" }).check();
  await bob.item.getByRole("button", { name: "Answer" }).click();
  await bob.item.locator(".outcome .result").filter({ hasText: "Approval 1 of 2 recorded; the call waits for more approvers." }).waitFor({ timeout: 15_000 });
  await bob.item.locator(".decisions li").filter({ hasText: /^approve by bob \(roles ops; via POST \/api\/runs\/\{runId\}\/responses\) at / }).waitFor();
  await bob.page.screenshot({ path: join(artifacts, "approvers-first-vote.png") });
  assert.deepEqual(bob.problems, []);
  await bob.context.close();

  // Alice, who started the run, may not approve it: the server's reason beside the card.
  const alice = await inboxCard("alice", runId);
  await alice.item.getByText(/approved so far: 1 — bob/).waitFor();
  await alice.item.getByRole("radio", { name: "Approve" }).check();
  await alice.item.getByRole("button", { name: "Answer" }).click();
  await alice.item.locator(".problem").filter({ hasText: "alice started this run and may not approve its calls" }).waitFor();
  await alice.page.screenshot({ path: join(artifacts, "approvers-self-refused.png") });
  await alice.context.close();

  // Carol: the second approver; the tool runs once and the run completes.
  const carol = await inboxCard("carol", runId);
  await carol.item.getByRole("radio", { name: "Approve" }).check();
  await carol.item.getByRole("button", { name: "Answer" }).click();
  await carol.item.locator(".outcome .result").filter({ hasText: "The run completed: Shipped." }).waitFor({ timeout: 15_000 });
  await carol.item.locator(".decisions li").filter({ hasText: /^approve by carol / }).waitFor();
  assert.equal(await carol.item.locator(".decisions li").count(), 2, "bob's and carol's approvals");
  await carol.context.close();

  const run = await (await fetch(`${server.url}/api/runs/${runId}`, { headers: { authorization: `Bearer ${KEYS.carol}` } })).json();
  assert.equal(run.status, "completed");
  assert.equal(run.startedBy.id, "alice");
  assert.deepEqual(run.decisions.map((decision) => decision.by), ["bob", "carol"]);
});
