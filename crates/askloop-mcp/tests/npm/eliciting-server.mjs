// A tiny MCP server (stdio) whose tools ask the person things (MCP elicitation), for
// askloop-mcp's tests. It elicits whatever the client advertises, as a server that ignores
// capabilities would, and appends every event to the JSON-lines file $ELICIT_LOG:
// {"event": "call", "tool"}, {"event": "answer", "tool", "result"}, {"event": "error", "tool",
// "code", "message"}, {"event": "cancelled", "tool"}, {"event": "capabilities", "elicitation"}.
import { appendFileSync } from "node:fs";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import {
  CallToolRequestSchema,
  ElicitResultSchema,
  ListToolsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const log = (event) => {
  if (process.env.ELICIT_LOG) appendFileSync(process.env.ELICIT_LOG, JSON.stringify(event) + "\n");
};

const server = new Server(
  { name: "askloop-eliciting", version: "1.0.0" },
  { capabilities: { tools: {} } },
);
server.oninitialized = () =>
  log({ event: "capabilities", elicitation: server.getClientCapabilities()?.elicitation ?? null });

const sideEffecting = { readOnlyHint: false, idempotentHint: false };
const tools = [
  {
    name: "book_table",
    description: "Books a table, asking the person for the time and the party size first",
    inputSchema: { type: "object", properties: { restaurant: { type: "string" } }, required: ["restaurant"] },
    annotations: sideEffecting,
  },
  {
    name: "two_questions",
    description: "Asks for a name, then for a colour",
    inputSchema: { type: "object", properties: {} },
    annotations: sideEffecting,
  },
  {
    name: "changing_question",
    description: "Asks a question whose wording changes with every call",
    inputSchema: { type: "object", properties: {} },
    annotations: sideEffecting,
  },
  {
    name: "sign_in",
    description: "Asks the person to sign in at a link",
    inputSchema: { type: "object", properties: {} },
    annotations: sideEffecting,
  },
];
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));

let calls = 0;
const form = (message, requestedSchema) => ({
  method: "elicitation/create",
  params: { mode: "form", message, requestedSchema },
});

server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const tool = request.params.name;
  calls += 1;
  log({ event: "call", tool });
  extra.signal.addEventListener("abort", () => log({ event: "cancelled", tool }));
  const ask = async (elicitation) => {
    const started = Date.now();
    try {
      const result = await extra.sendRequest(elicitation, ElicitResultSchema, { timeout: 10 * 60 * 1000 });
      log({ event: "answer", tool, result, afterMs: Date.now() - started });
      return result;
    } catch (error) {
      log({ event: "error", tool, code: error.code ?? null, message: String(error.message ?? error), afterMs: Date.now() - started });
      throw error;
    }
  };
  const done = (structuredContent) => ({
    content: [{ type: "text", text: JSON.stringify(structuredContent) }],
    structuredContent,
  });
  switch (tool) {
    case "book_table": {
      const result = await ask(
        form(`When, and for how many, at ${request.params.arguments?.restaurant}?`, {
          type: "object",
          properties: {
            time: { type: "string", title: "Time", enum: ["19:00", "20:30"] },
            people: { type: "integer", title: "People", minimum: 1, maximum: 12 },
          },
          required: ["time", "people"],
        }),
      );
      log({ event: "booked", tool, action: result.action });
      return done({ action: result.action, content: result.content ?? null });
    }
    case "two_questions": {
      const name = await ask(form("What is your name?", {
        type: "object", properties: { name: { type: "string" } }, required: ["name"],
      }));
      const colour = await ask(form("Which colour?", {
        type: "object", properties: { colour: { type: "string", enum: ["red", "blue"] } }, required: ["colour"],
      }));
      return done({ name: name.content ?? null, colour: colour.content ?? null, actions: [name.action, colour.action] });
    }
    case "changing_question": {
      const result = await ask(form(`Question number ${calls}: go on?`, {
        type: "object", properties: { go: { type: "boolean" } }, required: ["go"],
      }));
      return done({ action: result.action, content: result.content ?? null });
    }
    case "sign_in": {
      const result = await ask({
        method: "elicitation/create",
        params: { mode: "url", message: "Sign in to the example service.", url: "https://login.example/authorize?client=askloop", elicitationId: `sign-in-${calls}` },
      });
      return done({ action: result.action });
    }
    default:
      throw new Error(`no tool ${tool}`);
  }
});

await server.connect(new StdioServerTransport());
