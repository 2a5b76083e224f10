// The compatibility test: the reference framework's own JavaScript client (@mastra/client-js,
// pinned in package.json, used unmodified) drives a running `askloop serve` with scripted models.
//
//   cd tests/compat && npm ci && node run.mjs
//
// ASKLOOP_BIN is the binary (default: $CARGO_TARGET_DIR/debug/askloop, else <repo>/target/debug/askloop).
// Covers: listAgents and details; stream -> `tool-call-suspended` seen through the client's own
// stream processing -> listSuspendedRuns -> resumeStream with the answer -> streamed text ->
// finish; an invalid answer (400 with the allowed labels); an unknown run (404); declineToolCall
// and approveToolCall of an MCP tool that requires approval; approving a finished run (409);
// sub-agents (issue 35): a supervisor whose researcher sub-agent asks — the supervisor's stream
// ends with the nested question (composite id `s1~r1`, `subagent` origin), listSuspendedRuns
// lists the supervisor's run only, resumeStream on the root answers it in one stream (the
// researcher's `subagent-chunk`s, then the supervisor's finish), and resumeStream of the child
// run itself is 409 `child_run`. (These need askloop.toml's `subagents` and `description`.)
// Any failure prints what differed and exits 1.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { MastraClient, MastraClientError } from '@mastra/client-js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const bin =
  process.env.ASKLOOP_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(repo, 'target'), 'debug', 'askloop');
const STEP_DEADLINE_MS = Number(process.env.COMPAT_DEADLINE_MS ?? 20000);

// ---------------------------------------------------------------------------------------------
// The client logs (console.error) when its own stream parser rejects a chunk, e.g. a
// `tool-result` without its `tool-call` in the same response. That is an incompatibility: record
// every such line and fail the case it happened in.
const clientErrors = [];
const consoleError = console.error;
console.error = (...args) => {
  clientErrors.push(args.map((arg) => (arg instanceof Error ? arg.stack ?? arg.message : String(arg))).join(' '));
  consoleError(...args);
};

const failures = [];
let passed = 0;

class Mismatch extends Error {}

function check(condition, what, detail) {
  if (!condition) {
    throw new Mismatch(`${what}${detail === undefined ? '' : `\n    got: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`}`);
  }
}

function withDeadline(promise, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Mismatch(`${what}: no end within ${STEP_DEADLINE_MS} ms (the server must close the body after data: [DONE])`)), STEP_DEADLINE_MS);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

async function test(name, body) {
  const errorsBefore = clientErrors.length;
  try {
    await body();
    const logged = clientErrors.slice(errorsBefore);
    check(logged.length === 0, 'the client logged errors while processing the stream', logged.join('\n'));
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (error) {
    const text = error instanceof Mismatch ? error.message : error?.stack ?? String(error);
    failures.push({ name, text });
    console.log(`FAIL ${name}\n    ${text.split('\n').join('\n    ')}`);
  }
}

/** Every chunk of a streaming call, through the client's own `processDataStream`. */
async function chunksOf(responsePromise, what) {
  return withDeadline(
    (async () => {
      const response = await responsePromise;
      const chunks = [];
      await response.processDataStream({ onChunk: async (chunk) => void chunks.push(chunk) });
      return chunks;
    })(),
    what,
  );
}

const types = (chunks) => chunks.map((chunk) => chunk.type);
const textOf = (chunks) => chunks.filter((c) => c.type === 'text-delta').map((c) => c.payload.text).join('');

/** Awaits a call expected to fail with an HTTP status; returns the client's error. */
async function rejection(promise, status, what) {
  let result;
  try {
    result = await withDeadline(Promise.resolve(promise), what);
  } catch (error) {
    if (error instanceof Mismatch) throw error;
    check(error instanceof MastraClientError, `${what}: the client should throw a MastraClientError`, String(error));
    check(error.status === status, `${what}: status ${status}`, `${error.status} ${error.message}`);
    check(
      error.body && typeof error.body.code === 'string' && typeof error.body.message === 'string',
      `${what}: the body is our error JSON {code, message, details?}`,
      error.body ?? error.message,
    );
    return error;
  }
  // A streaming call resolved: read it so the failure says what came instead.
  const chunks = result?.processDataStream ? await chunksOf(Promise.resolve(result), what) : result;
  throw new Mismatch(`${what}: expected HTTP ${status}, the call succeeded\n    got: ${JSON.stringify(chunks)}`);
}

// ---------------------------------------------------------------------------------------------
// The server: a temporary folder with the scripts, an askloop.toml with an approval agent, a store.

const tmp = mkdtempSync(join(tmpdir(), 'askloop-compat-'));
const notes = join(tmp, 'notes');
mkdirSync(notes);
const target = join(notes, 'todo.md');

const askScript = join(tmp, 'ask.json');
writeFileSync(
  askScript,
  JSON.stringify({
    steps: [
      {
        toolCalls: [
          { id: 'c1', name: 'ask_user', args: { question: 'Which repo?', options: [{ label: 'main' }, { label: 'docs' }] } },
        ],
      },
      { text: 'Summary of the chosen repo.' },
    ],
  }),
);
const writeScript = join(tmp, 'write.json');
writeFileSync(
  writeScript,
  JSON.stringify({
    steps: [
      { toolCalls: [{ id: 'w1', name: 'write_file', args: { path: target, content: 'buy milk\n' } }] },
      { text: 'Noted.' },
    ],
  }),
);
const researcherScript = join(tmp, 'researcher.json');
writeFileSync(
  researcherScript,
  JSON.stringify({
    steps: [
      {
        text: 'Looking into it.',
        toolCalls: [
          { id: 'r1', name: 'ask_user', args: { question: 'Which source?', options: [{ label: 'arxiv' }, { label: 'web' }] } },
        ],
      },
      { text: 'Found it in arxiv.' },
    ],
  }),
);
const supervisorScript = join(tmp, 'supervisor.json');
writeFileSync(
  supervisorScript,
  JSON.stringify({
    steps: [
      { toolCalls: [{ id: 's1', name: 'researcher', args: { prompt: 'Find the paper.' } }] },
      { text: 'Report done.' },
    ],
  }),
);
const fsServer = join(here, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
writeFileSync(
  join(tmp, 'askloop.toml'),
  [
    '[agents.files]',
    'name = "Files"',
    `model = ${JSON.stringify(`scripted:${writeScript}`)}`,
    'tools = []',
    '',
    '[agents.files.mcp.fs]',
    `command = ["node", ${JSON.stringify(fsServer)}, "notes"]`,
    'require_approval = ["write_file"]',
    '',
    '[agents.researcher]',
    `model = ${JSON.stringify(`scripted:${researcherScript}`)}`,
    'description = "Finds papers; may ask which source to use."',
    '',
    '[agents.supervisor]',
    `model = ${JSON.stringify(`scripted:${supervisorScript}`)}`,
    'tools = []',
    'subagents = ["researcher"]',
    '',
  ].join('\n'),
);

function fail(message) {
  consoleError(`compat: ${message}`);
  rmSync(tmp, { recursive: true, force: true });
  process.exit(1);
}

if (!existsSync(bin)) fail(`no askloop binary at ${bin} (build it, or set ASKLOOP_BIN)`);
if (!existsSync(fsServer)) fail(`no ${fsServer}: run npm ci in ${here}`);

const serverArgs = [
  'serve',
  '--addr', '127.0.0.1:0',
  '--model', `scripted:${askScript}`,
  '--store', `sqlite://${join(tmp, 'askloop.db')}`,
  '--config', join(tmp, 'askloop.toml'),
];
const server = spawn(bin, serverArgs, { cwd: tmp, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'warn' } });
let serverStderr = '';
server.stderr.on('data', (data) => {
  serverStderr += data;
});
const exited = new Promise((resolveExit) => server.on('exit', (code, signal) => resolveExit({ code, signal })));

// `askloop serve: listening on http://ADDR ...` is the first line on stdout.
const baseUrl = await new Promise((resolveUrl, rejectUrl) => {
  const lines = createInterface({ input: server.stdout });
  const timer = setTimeout(() => rejectUrl(new Error('no "listening on http://…" line on stdout within 30 s')), 30000);
  lines.on('line', (line) => {
    const match = /listening on (http:\/\/[^\s,;]+)/.exec(line);
    if (match) {
      clearTimeout(timer);
      resolveUrl(match[1].replace(/\/$/, ''));
    }
  });
  exited.then(({ code, signal }) => rejectUrl(new Error(`askloop serve exited (${code ?? signal}) before listening`)));
}).catch((error) => {
  server.kill('SIGKILL');
  fail(`${error.message}\n  command: ${bin} ${serverArgs.join(' ')}\n  stderr:\n${serverStderr}`);
});
console.log(`askloop serve at ${baseUrl} (${bin})`);

// ---------------------------------------------------------------------------------------------

const client = new MastraClient({ baseUrl, retries: 0 });
const assistant = client.getAgent('assistant');
const files = client.getAgent('files');

await test('listAgents lists the built-in and the configured agent', async () => {
  const agents = await client.listAgents();
  check(agents && typeof agents === 'object' && !Array.isArray(agents), 'GET /api/agents is an object keyed by agent id', agents);
  check('assistant' in agents && 'files' in agents, 'it has "assistant" and "files"', Object.keys(agents));
  check(typeof agents.files.name === 'string', 'an agent has a name', agents.files);
});

await test('details of an agent; an unknown agent is 404', async () => {
  const details = await files.details();
  check(details.name === 'Files', 'details().name is the configured name', details);
  check(details.tools && typeof details.tools === 'object' && 'write_file' in details.tools, 'details().tools has the MCP tool write_file', details.tools);
  check(details.tools.write_file.requireApproval === true, 'write_file requires approval', details.tools.write_file);
  await rejection(client.getAgent('no-such-agent').details(), 404, 'details() of an unknown agent');
});

let runId;
await test('stream: the run suspends on ask_user (tool-call-suspended through processDataStream)', async () => {
  const chunks = await chunksOf(assistant.stream('Summarize my project', { memory: { thread: 'compat-thread', resource: 'compat-user' } }), 'stream');
  check(chunks.length > 0, 'the stream has chunks');
  runId = chunks[0].runId;
  check(typeof runId === 'string' && runId.length > 0, 'the first chunk carries the runId', chunks[0]);
  check(chunks.every((c) => c.runId === runId), 'every chunk carries the same runId', chunks);
  check(chunks[0].type === 'start', 'the first chunk is start', types(chunks));
  const last = chunks.at(-1);
  check(last.type === 'tool-call-suspended', 'the stream ends with tool-call-suspended', types(chunks));
  check(last.payload.toolCallId === 'c1' && last.payload.toolName === 'ask_user', 'it suspends call c1 of ask_user', last.payload);
  check(last.payload.suspendPayload?.question === 'Which repo?', 'suspendPayload has the question', last.payload);
  check(typeof last.payload.resumeSchema === 'string' && JSON.parse(last.payload.resumeSchema), 'resumeSchema is a JSON Schema as a string', last.payload);
  check(types(chunks).includes('tool-call'), 'the call was announced (tool-call) before it suspended', types(chunks));
});

await test('listSuspendedRuns has the suspended run and its question', async () => {
  check(runId, 'needs the run of the stream case');
  const list = await assistant.listSuspendedRuns({ resourceId: 'compat-user' });
  check(Array.isArray(list?.runs) && typeof list.total === 'number', 'the answer is {runs: [...], total}', list);
  const run = list.runs.find((r) => r.runId === runId);
  check(run, `it lists run ${runId}`, list);
  check(run.status === 'suspended', 'its status is suspended', run);
  const call = run.toolCalls?.find((c) => c.toolCallId === 'c1');
  check(call && call.toolName === 'ask_user' && call.requiresApproval === false, 'its toolCalls have c1 (ask_user, no approval)', run);
});

await test('resumeStream with an invalid answer is 400 with the allowed labels', async () => {
  check(runId, 'needs the run of the stream case');
  const error = await rejection(assistant.resumeStream('gitlab', { runId, toolCallId: 'c1' }), 400, 'resumeStream("gitlab")');
  check(JSON.stringify(error.body.details ?? null).includes('main'), 'details name the allowed labels', error.body);
});

await test('resumeStream: the answer, streamed text, finish', async () => {
  check(runId, 'needs the run of the stream case');
  const chunks = await chunksOf(assistant.resumeStream('main', { runId, toolCallId: 'c1' }), 'resumeStream');
  check(chunks.every((c) => c.runId === runId), 'every chunk carries the runId', chunks);
  const result = chunks.find((c) => c.type === 'tool-result' && c.payload.toolCallId === 'c1');
  check(result, 'a tool-result of c1', types(chunks));
  check(JSON.stringify(result.payload.result).includes('User answered: main'), 'the result carries the answer', result.payload);
  const callAt = chunks.findIndex((c) => c.type === 'tool-call' && c.payload.toolCallId === 'c1');
  check(callAt >= 0 && callAt < chunks.indexOf(result), 'the resumed stream re-announces c1 before its tool-result', types(chunks));
  check(textOf(chunks) === 'Summary of the chosen repo.', 'the streamed text is the model\'s', textOf(chunks));
  const last = chunks.at(-1);
  check(last.type === 'finish' && last.payload.stepResult?.reason === 'stop', 'the stream ends with finish (reason stop)', last);
});

await test('resumeStream of an unknown run is 404', async () => {
  await rejection(assistant.resumeStream('main', { runId: 'no-such-run', toolCallId: 'c1' }), 404, 'resumeStream of an unknown run');
});

await test('resumeStream of a finished run with another answer is 409', async () => {
  check(runId, 'needs the run of the stream case');
  // (The same answer again is a harmless repeat: 200 with a note, see docs/http-api.md.)
  await rejection(assistant.resumeStream('docs', { runId, toolCallId: 'c1' }), 409, 'resumeStream of a finished run');
});

/** Starts a run of `files` and returns it at its tool-call-approval. */
async function untilApproval(thread) {
  const chunks = await chunksOf(files.stream('Note: buy milk', { memory: { thread, resource: 'compat-user' } }), 'stream (files)');
  const last = chunks.at(-1);
  check(last?.type === 'tool-call-approval', 'the stream ends with tool-call-approval', types(chunks));
  check(last.payload.toolCallId === 'w1' && last.payload.toolName === 'write_file', 'for call w1 of write_file', last.payload);
  check(!existsSync(target), 'nothing is written before the approval');
  return last.runId;
}

await test('declineToolCall: the tool never runs, the model gets the reason, the run finishes', async () => {
  const run = await untilApproval('compat-decline');
  const chunks = await chunksOf(files.declineToolCall({ runId: run, toolCallId: 'w1', reason: 'not that folder' }), 'declineToolCall');
  const result = chunks.find((c) => c.type === 'tool-result' && c.payload.toolCallId === 'w1');
  check(result, 'a tool-result of w1', types(chunks));
  check(JSON.stringify(result.payload).includes('not that folder'), 'the result carries the reason', result.payload);
  check(chunks.at(-1)?.type === 'finish', 'the stream ends with finish', types(chunks));
  check(textOf(chunks) === 'Noted.', 'then the model\'s text', textOf(chunks));
  check(!existsSync(target), 'a declined call never writes');
});

let approvedRun;
await test('approveToolCall: the tool runs, the run finishes', async () => {
  approvedRun = await untilApproval('compat-approve');
  const chunks = await chunksOf(files.approveToolCall({ runId: approvedRun, toolCallId: 'w1' }), 'approveToolCall');
  const result = chunks.find((c) => c.type === 'tool-result' && c.payload.toolCallId === 'w1');
  check(result, 'a tool-result of w1', types(chunks));
  check(result.payload.isError !== true, 'the write succeeded', result.payload);
  check(chunks.at(-1)?.type === 'finish', 'the stream ends with finish', types(chunks));
  check(existsSync(target) && readFileSync(target, 'utf8') === 'buy milk\n', 'the file was written');
});

await test('approveToolCall of a finished run is 409; of an unknown run 404', async () => {
  check(approvedRun, 'needs the run of the approve case');
  await rejection(files.approveToolCall({ runId: approvedRun, toolCallId: 'w1' }), 409, 'approveToolCall of a finished run');
  await rejection(files.declineToolCall({ runId: 'no-such-run', toolCallId: 'w1' }), 404, 'declineToolCall of an unknown run');
});

const supervisor = client.getAgent('supervisor');
const researcher = client.getAgent('researcher');
let rootRun;
let childRun;
await test('sub-agents: the supervisor\'s stream ends with the researcher\'s question (composite id, origin)', async () => {
  const chunks = await chunksOf(supervisor.stream('Write the report.', { memory: { thread: 'compat-team', resource: 'compat-user' } }), 'stream (supervisor)');
  rootRun = chunks[0]?.runId;
  check(chunks.every((c) => c.runId === rootRun), 'every chunk carries the root run\'s id', chunks);
  const nested = chunks.filter((c) => c.type === 'subagent-chunk');
  check(nested.length > 0, 'the researcher\'s chunks come as subagent-chunk', types(chunks));
  check(nested.every((c) => c.payload.agentId === 'researcher' && c.payload.toolCallId === 's1'), 'marked with the sub-agent and the supervisor\'s call', nested);
  const last = chunks.at(-1);
  check(last.type === 'tool-call-suspended', 'the stream ends with tool-call-suspended', types(chunks));
  check(last.payload.toolCallId === 's1~r1' && last.payload.toolName === 'ask_user', 'the nested call s1~r1 of ask_user', last.payload);
  check(last.payload.suspendPayload?.question === 'Which source?', 'with the researcher\'s question', last.payload);
  check(JSON.stringify(last.payload.subagent?.path) === '["researcher"]' && last.payload.subagent?.toolCallId === 'r1', 'and its origin', last.payload);
  childRun = last.payload.subagent.runId;
  check(typeof childRun === 'string' && childRun !== rootRun, 'the child run is another run', last.payload);
});

await test('sub-agents: listSuspendedRuns lists the root only, with the nested call', async () => {
  check(rootRun, 'needs the run of the sub-agent stream case');
  const list = await supervisor.listSuspendedRuns({ resourceId: 'compat-user' });
  const run = list.runs.find((r) => r.runId === rootRun);
  check(run && run.toolCalls?.length === 1 && run.toolCalls[0].toolCallId === 's1~r1', 'the supervisor\'s run waits for s1~r1', list);
  const children = await researcher.listSuspendedRuns({ resourceId: 'compat-user' });
  check(children.total === 0, 'the child run is no entry of its own', children);
});

await test('sub-agents: resumeStream of the child run itself is 409 child_run', async () => {
  check(childRun, 'needs the run of the sub-agent stream case');
  const error = await rejection(researcher.resumeStream('arxiv', { runId: childRun, toolCallId: 'r1' }), 409, 'resumeStream of the child run');
  check(error.body.code === 'child_run' && error.body.message.includes(rootRun), 'code child_run, naming the root run', error.body);
});

await test('sub-agents: resumeStream on the root answers the nested question: the researcher\'s chunks, then the finish', async () => {
  check(rootRun, 'needs the run of the sub-agent stream case');
  const chunks = await chunksOf(supervisor.resumeStream('arxiv', { runId: rootRun, toolCallId: 's1~r1' }), 'resumeStream (nested)');
  check(chunks.every((c) => c.runId === rootRun), 'every chunk carries the root run\'s id', chunks);
  const inner = chunks.filter((c) => c.type === 'subagent-chunk').map((c) => c.payload.chunk);
  check(inner.some((c) => c.type === 'tool-result' && c.payload.toolCallId === 'r1' && JSON.stringify(c.payload.result).includes('arxiv')), 'the researcher\'s r1 got the answer', inner);
  check(inner.filter((c) => c.type === 'text-delta').map((c) => c.payload.text).join('').includes('Found it in arxiv.'), 'the researcher went on', inner);
  const parentResult = chunks.find((c) => c.type === 'tool-result' && c.payload.toolCallId === 's1');
  check(parentResult && JSON.stringify(parentResult.payload.result).includes('Found it in arxiv.'), 'the supervisor\'s s1 has the researcher\'s text', parentResult);
  check(chunks.findIndex((c) => c.type === 'subagent-chunk') < chunks.indexOf(parentResult), 'the child\'s chunks come first', types(chunks));
  check(textOf(chunks) === 'Report done.', 'then the supervisor\'s text', textOf(chunks));
  check(chunks.at(-1)?.type === 'finish', 'the stream ends with finish', types(chunks));
});

// ---------------------------------------------------------------------------------------------

server.kill('SIGTERM');
const exit = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 10000))]);
if (exit === null) {
  server.kill('SIGKILL');
  failures.push({ name: 'shutdown', text: 'askloop serve did not exit within 10 s of SIGTERM' });
}
if (failures.length > 0) {
  consoleError(`\n${failures.length} failed, ${passed} passed`);
  consoleError(`askloop serve stderr:\n${serverStderr.split('\n').slice(-40).join('\n')}`);
  consoleError(`(scratch folder kept: ${tmp})`);
  process.exit(1);
}
rmSync(tmp, { recursive: true, force: true });
console.log(`\nall ${passed} passed`);
