// The AI SDK's UI message stream protocol against `askloop serve`, through the `ai` package's
// own chat client (AbstractChat + DefaultChatTransport: what useChat runs): a question arrives
// as a tool part awaiting output, addToolOutput + send resumes exactly that call, an approval
// goes through addToolApprovalResponse, an invalid answer is refused with nothing changed, and
// a client reloaded during a running turn resumes its stream (resumeStream, useChat's resume).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { NodeChat, asks, everythingServer, startServer, waitFor } from "./lib.mjs";

const KEY = "ak_protocol_test_key";
let server;

before(async () => {
  server = await startServer({
    keys: { [KEY]: "tenant-a" },
    agents: {
      free: { script: asks({ question: "What is your name?" }, "Nice to meet you.") },
      pick: { script: asks({ question: "Which repo?", options: [{ label: "main", description: "The app" }, { label: "docs" }] }, "Summary of the repo.") },
      ops: {
        script: { steps: [{ toolCalls: [{ id: "e1", name: "echo", args: { message: "hello" } }] }, { text: "Echoed." }] },
        toml: `[agents.ops.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = ["echo"]\n`,
      },
      slow: {
        script: { steps: [{ text: "Working on it.", toolCalls: [{ id: "l1", name: "trigger-long-running-operation", args: { duration: 4, steps: 4 } }] }, { text: "All done." }] },
        toml: `[agents.slow.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = false\n`,
      },
      gated: {
        script: { steps: [{ text: "Working on it.", toolCalls: [{ id: "l1", name: "trigger-long-running-operation", args: { duration: 4, steps: 4 } }] }, { text: "All done." }] },
        toml: `[agents.gated.mcp.everything]\ncommand = ["node", ${JSON.stringify(everythingServer)}, "stdio"]\nrequire_approval = true\n`,
      },
    },
  });
});

after(async () => {
  await server?.stop();
});

function toolParts(chat) {
  const last = chat.messages.at(-1);
  return (last?.parts ?? []).filter((part) => part.type.startsWith("tool-"));
}

function text(chat) {
  return chat.messages
    .at(-1)
    .parts.filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("");
}

async function serverMessages(agentId, chatId) {
  const response = await fetch(`${server.url}/api/agents/${agentId}/chat/${chatId}/messages`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(response.status, 200);
  return (await response.json()).messages;
}

test("a question arrives as a tool part, its output resumes the run, the continuation streams to finish", async () => {
  const id = randomUUID();
  const chat = new NodeChat({ url: server.url, agentId: "free", id, key: KEY });
  await chat.sendMessage({ text: "Hi" });
  assert.equal(chat.status, "ready");
  const [part] = toolParts(chat);
  assert.equal(part.type, "tool-ask_user");
  assert.equal(part.state, "input-available");
  assert.deepEqual(part.input, { question: "What is your name?" });
  const question = chat.messages.at(-1).parts.find((p) => p.type === "data-askloop-question");
  assert.equal(question.data.toolCallId, part.toolCallId);
  assert.equal(question.data.form.kind, "text");
  assert.match(chat.messages.at(-1).metadata.runId, /.+/);
  // The one pending call shape (docs/wire-format.md, "Pending calls").
  assert.equal(question.data.runId, chat.messages.at(-1).metadata.runId);
  assert.equal(question.data.payload.question, "What is your name?");
  assert.equal(question.data.suspendPayload, undefined);

  // A reload sees the same question, the same object.
  const stored = await serverMessages("free", id);
  const storedPart = stored.at(-1).parts.find((p) => p.type === "tool-ask_user");
  assert.equal(storedPart.state, "input-available");
  assert.equal(storedPart.toolCallId, part.toolCallId);
  assert.deepEqual(stored.at(-1).parts.find((p) => p.type === "data-askloop-question").data, question.data);

  await chat.addToolOutput({ tool: "ask_user", toolCallId: part.toolCallId, output: "Ada" });
  await chat.sendMessage();
  assert.equal(chat.status, "ready");
  const [answered] = toolParts(chat);
  assert.equal(answered.state, "output-available");
  assert.deepEqual(answered.output, { content: "User answered: Ada", isError: false });
  assert.equal(text(chat), "Let me ask.Nice to meet you.");

  const after = await serverMessages("free", id);
  assert.equal(after.at(-1).parts.find((p) => p.type === "tool-ask_user").state, "output-available");
});

test("an approval is answered through the protocol's approval response", async () => {
  const id = randomUUID();
  const chat = new NodeChat({ url: server.url, agentId: "ops", id, key: KEY });
  await chat.sendMessage({ text: "Echo hello" });
  const [part] = toolParts(chat);
  assert.equal(part.type, "tool-echo");
  assert.equal(part.state, "approval-requested");
  assert.deepEqual(part.input, { message: "hello" });
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await chat.sendMessage();
  assert.equal(chat.status, "ready");
  const [done] = toolParts(chat);
  assert.equal(done.state, "output-available");
  assert.match(JSON.stringify(done.output), /hello/);
  assert.match(text(chat), /Echoed\./);
});

test("a declined approval ends the call without running it", async () => {
  const id = randomUUID();
  const chat = new NodeChat({ url: server.url, agentId: "ops", id, key: KEY });
  await chat.sendMessage({ text: "Echo hello" });
  const [part] = toolParts(chat);
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: "not now" });
  await chat.sendMessage();
  assert.equal(chat.status, "ready");
  const [done] = toolParts(chat);
  assert.notEqual(done.state, "approval-requested");
  assert.match(JSON.stringify(done.output ?? done.errorText), /declin|not now/i);
});

test("an invalid answer is rejected with an error chunk and nothing changes", async () => {
  const id = randomUUID();
  const errors = [];
  const data = [];
  const chat = new NodeChat({ url: server.url, agentId: "pick", id, key: KEY, onError: (e) => errors.push(e.message), onData: (d) => data.push(d) });
  await chat.sendMessage({ text: "Summarize" });
  const [part] = toolParts(chat);
  const before = JSON.stringify(await serverMessages("pick", id));
  await chat.addToolOutput({ tool: "ask_user", toolCallId: part.toolCallId, output: "nope" });
  await chat.sendMessage();
  assert.equal(errors.length, 1, "one error chunk");
  assert.match(errors[0], /main/);
  const rejection = data.find((d) => d.type === "data-askloop-rejection");
  assert.ok(rejection?.data.problems[part.toolCallId], "the problem names the call");
  assert.equal(JSON.stringify(await serverMessages("pick", id)), before, "the stored chat is unchanged");

  // The right answer still goes through.
  chat.messages = await serverMessages("pick", id);
  await chat.addToolOutput({ tool: "ask_user", toolCallId: part.toolCallId, output: "main" });
  await chat.sendMessage();
  assert.match(text(chat), /Summary of the repo\./);
});

test("another tenant's chat is not found, and no key is 401", async () => {
  const response = await fetch(`${server.url}/api/agents/free/chat/${randomUUID()}/messages`);
  assert.equal(response.status, 401);
  const chat = await fetch(`${server.url}/api/agents/free/chat`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ id: randomUUID(), messages: [{ id: "m", role: "user", parts: [{ type: "text", text: "hi" }] }], trigger: "submit-message" }),
  });
  assert.equal(chat.status, 401);
});

test("a client reloaded during a running turn resumes it: resumeStream replays the turn, then follows it", async () => {
  const id = randomUUID();
  const first = new NodeChat({ url: server.url, agentId: "slow", id, key: KEY });
  const sent = first.sendMessage({ text: "Take your time" });
  await waitFor(() => toolParts(first).some((part) => part.state === "input-available"), 10_000, "the long call to start");

  // The reload: a new client starts from the stored chat, then resumes (useChat({resume: true})).
  const reloaded = new NodeChat({ url: server.url, agentId: "slow", id, key: KEY });
  // (The store holds the person's message, and the turn's steps as far as they are committed.)
  reloaded.messages = await serverMessages("slow", id);
  assert.equal(reloaded.messages[0].role, "user");
  await reloaded.resumeStream();
  await sent;
  assert.equal(reloaded.status, "ready");
  assert.equal(reloaded.messages.length, 2, "the resumed turn replaces the stored one, no copy");
  assert.equal(reloaded.messages.at(-1).id, first.messages.at(-1).id);
  assert.deepEqual(reloaded.messages.at(-1).parts, first.messages.at(-1).parts);
  assert.equal(text(reloaded), "Working on it.All done.");
  assert.equal(toolParts(reloaded)[0].state, "output-available");

  // Nothing runs now: 204, and the client changes nothing.
  const finished = JSON.stringify(reloaded.messages);
  await reloaded.resumeStream();
  assert.equal(reloaded.status, "ready");
  assert.equal(JSON.stringify(reloaded.messages), finished);
  const none = await fetch(`${server.url}/api/agents/slow/chat/${id}/stream`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(none.status, 204);
});

test("a client reloaded during a turn resumed by an approval gets the whole turn, in the message it had", async () => {
  const id = randomUUID();
  const first = new NodeChat({ url: server.url, agentId: "gated", id, key: KEY });
  await first.sendMessage({ text: "Take your time" });
  const [part] = toolParts(first);
  assert.equal(part.state, "approval-requested");
  await first.addToolApprovalResponse({ id: part.approval.id, approved: true });
  const sent = first.sendMessage();
  const running = async () => {
    const response = await fetch(`${server.url}/api/runs?threadId=${id}`, { headers: { Authorization: `Bearer ${KEY}` } });
    return (await response.json()).runs[0]?.status === "running";
  };
  await waitFor(running, 10_000, "the approved call to run");

  const reloaded = new NodeChat({ url: server.url, agentId: "gated", id, key: KEY });
  reloaded.messages = await serverMessages("gated", id);
  assert.equal(reloaded.messages.length, 2, "the person's message and the turn so far");
  const stored = reloaded.messages[1].id;
  await reloaded.resumeStream();
  await sent;
  assert.equal(reloaded.status, "ready");
  assert.equal(reloaded.messages.length, 2, "the stored turn is rebuilt in place, not added");
  assert.equal(reloaded.messages[1].id, stored);
  assert.equal(first.messages.at(-1).id, stored);
  assert.deepEqual(
    reloaded.messages[1].parts.map((p) => p.type),
    first.messages.at(-1).parts.map((p) => p.type),
  );
  assert.equal(text(reloaded), "Working on it.All done.");
  assert.equal(toolParts(reloaded)[0].state, "output-available");
  assert.deepEqual(toolParts(reloaded)[0].output, toolParts(first)[0].output);
});
