// Issue 34 in the page (real Chromium against `askloop serve`): edit, then approve. The approval
// card's "Edit arguments" opens a JSON box prefilled with the call's arguments; arguments that do
// not fit the tool's input schema come back with the server's reasons beside the card and nothing
// runs; fitting ones run the tool with them.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { artifacts, everythingServer, startServer } from "./lib.mjs";

const KEY = "ak_issue34_key";
let server;
let browser;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-web" },
    agents: {
      ops: {
        script: { steps: [{ toolCalls: [{ id: "e1", name: "echo", args: { message: "hello" } }] }, { text: "Done with echo." }] },
        toml: `[agents.ops.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = ["echo"]\n`,
      },
    },
  });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("edit, then approve: a misfit shows the server's reasons, a fit runs the tool with the edited arguments", async () => {
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(server.url + "/");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Use key" }).click();
  await page.goto(`${server.url}/#/chat/ops/${randomUUID()}`);
  await page.getByRole("option", { name: "ops" }).waitFor({ state: "attached" });
  await page.getByLabel("Message").fill("Echo it");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.getByText("Tool: echo").waitFor();

  await page.getByRole("button", { name: "Edit arguments" }).click();
  const editor = page.getByLabel("Arguments (JSON), approved as edited");
  assert.deepEqual(JSON.parse(await editor.inputValue()), { message: "hello" }, "prefilled with the call's arguments");
  assert.ok(await page.getByRole("radio", { name: "Approve" }).isChecked(), "editing approves");

  // Not an object the tool takes: the server's reasons beside the card; nothing ran.
  await editor.fill('{"message": 5}');
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.locator(".question .problem").filter({ hasText: /edited arguments do not fit the tool: .*message/ }).waitFor();
  await page.screenshot({ path: join(artifacts, "issue34-edit-refused.png") });
  assert.equal(await page.getByText("Done with echo.").count(), 0);

  // Edit once more (the card may be drawn again from the server's state), with arguments that
  // fit.
  const edit = page.getByRole("button", { name: "Edit arguments" });
  if (await edit.isVisible()) await edit.click();
  await page.getByLabel("Arguments (JSON), approved as edited").fill('{"message": "edited hello"}');
  await page.getByRole("button", { name: "Send answer" }).click();
  await page.getByText("Done with echo.").waitFor();
  await page.locator(".tool").filter({ hasText: /echo: .*edited hello/ }).waitFor();
  await page.screenshot({ path: join(artifacts, "issue34-edit-approved.png") });
  assert.deepEqual(problems, []);
  await context.close();
});
