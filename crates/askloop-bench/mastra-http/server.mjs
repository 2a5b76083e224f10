// The reference framework's own HTTP server (Mastra 1.71 behind its Hono adapter, LibSQL file
// store) with a scripted model, for `askloop-bench http --url`: the same agent routes and the
// same ask cycle as askloop's benchmark (first step asks with ask_user, the second says "done").
// Usage: DB=/tmp/m.db PORT=4112 node server.mjs   (prints "listening on http://127.0.0.1:PORT pid N")
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { MastraServer } from '@mastra/hono';
import { Agent } from '@mastra/core/agent';
import { Mastra } from '@mastra/core';
import { askUserTool } from '@mastra/core/tools';
import { LibSQLStore } from '@mastra/libsql';

// A language model (AI SDK v2 specification) that asks on a user turn and answers otherwise.
const model = {
  specificationVersion: 'v2', provider: 'scripted', modelId: 'scripted-1', supportedUrls: {},
  async doGenerate() { throw new Error('not used'); },
  async doStream(options) {
    const last = options.prompt[options.prompt.length - 1];
    const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
    const parts = [{ type: 'stream-start', warnings: [] }];
    if (last.role === 'user') {
      parts.push(
        { type: 'tool-call', toolCallId: 'c' + Math.random(), toolName: 'ask_user',
          input: JSON.stringify({ question: 'Which repo?', options: [{ label: 'main' }, { label: 'docs' }] }) },
        { type: 'finish', finishReason: 'tool-calls', usage });
    } else {
      parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: 'done' },
        { type: 'text-end', id: 't' }, { type: 'finish', finishReason: 'stop', usage });
    }
    return { stream: new ReadableStream({ start(c) { for (const p of parts) c.enqueue(p); c.close(); } }) };
  },
};

const storage = new LibSQLStore({ id: 'store', url: 'file:' + (process.env.DB ?? 'mastra.db') });
const agent = new Agent({ id: 'assistant', name: 'Assistant', instructions: 'Ask when unclear.',
  model, tools: { ask_user: askUserTool } });
const mastra = new Mastra({ agents: { assistant: agent }, logger: false, storage });
const app = new Hono();
const server = new MastraServer({ app, mastra });
await server.init();
const port = Number(process.env.PORT ?? 4112);
serve({ fetch: app.fetch, hostname: '127.0.0.1', port }, (info) => {
  console.log(`listening on http://127.0.0.1:${info.port} pid ${process.pid}`);
});
