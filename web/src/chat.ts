// The chat view: an AI SDK chat (the `ai` package's AbstractChat and DefaultChatTransport)
// against askloop's UI message stream endpoint, rendered without a framework. Pending
// questions are the last assistant message's tool parts awaiting output or approval; they
// show together in one form, answered through addToolOutput / addToolApprovalResponse and
// one send. Stop cancels the running turn's run on the server (POST /api/runs/{runId}/cancel),
// not only the connection: a plain disconnect (a reload, a closed tab) leaves the run running,
// so the stream can be resumed. While a turn runs and has written nothing new yet, the chat
// shows that the agent works, with the time since the message or answer was sent; its text
// shows as it streams. The chat follows the inbox events (GET /api/inbox/events): a question of
// this chat raised or resolved elsewhere (another tab, the CLI) reloads the chat, so a
// question answered elsewhere is never left answerable here; while questions show, the chat
// also checks their run every few seconds (GET /api/runs/{runId}), in case an event was missed.
// A sub-agent's work (a `data-askloop-subagent` part per child run) shows collapsed under the
// parent's tool call, its text inside; its questions are the root's (tool parts under composite
// ids `PARENT_CALL~CHILD_CALL`), with a line saying which sub-agent asked.

import { AbstractChat, DefaultChatTransport, type ChatState, type ChatStatus, type UIMessage } from "ai";
import { authHeaders, followEvents, requestJson } from "./api";
import { renderQuestionForm, type Question, type Response } from "./form";

type Part = UIMessage["parts"][number];
type ToolPart = Part & { toolCallId: string; state: string; input?: unknown; output?: unknown; approval?: { id: string } };

/** A child run as the chat stream shows it (`data-askloop-subagent`, docs/wire-format.md). */
interface SubagentWork {
  runId: string;
  agentId: string;
  parentRunId?: string;
  /** The call that started it, as the root names it (`s1`, a grandchild's `s1~c5`). */
  toolCallId: string;
  path?: string[];
  text: string;
  status: string;
}

/** The sub-agents' work in a message, by the root's call (first id of `toolCallId`) under which it shows. */
function subagentWork(message: UIMessage): Map<string, SubagentWork[]> {
  const work = new Map<string, SubagentWork[]>();
  for (const part of message.parts) {
    if (part.type !== "data-askloop-subagent") continue;
    const data = (part as { data: SubagentWork }).data;
    const call = String(data.toolCallId ?? "").split("~")[0] ?? "";
    work.set(call, [...(work.get(call) ?? []), data]);
  }
  return work;
}

/** The status of a sub-agent's run in words. */
function subagentStatus(status: string): string {
  switch (status) {
    case "running":
      return "working…";
    case "suspended":
      return "waits for an answer";
    case "completed":
      return "done";
    case "cancelled":
      return "cancelled";
    default:
      return "failed";
  }
}

class State implements ChatState<UIMessage> {
  status: ChatStatus = "ready";
  error: Error | undefined = undefined;
  private list: UIMessage[];
  constructor(
    messages: UIMessage[],
    private readonly changed: () => void,
  ) {
    this.list = messages;
  }
  get messages(): UIMessage[] {
    return this.list;
  }
  set messages(messages: UIMessage[]) {
    this.list = [...messages];
    this.changed();
  }
  pushMessage = (message: UIMessage) => {
    this.list = [...this.list, message];
    this.changed();
  };
  popMessage = () => {
    this.list = this.list.slice(0, -1);
    this.changed();
  };
  replaceMessage = (index: number, message: UIMessage) => {
    this.list = [...this.list.slice(0, index), this.snapshot(message), ...this.list.slice(index + 1)];
    this.changed();
  };
  snapshot = <T>(thing: T): T => structuredClone(thing);
}

class Chat extends AbstractChat<UIMessage> {
  constructor(init: ConstructorParameters<typeof AbstractChat<UIMessage>>[0] & { state: State }) {
    super(init);
  }
  override setStatus(update: { status: ChatStatus; error?: Error }): void {
    super.setStatus(update);
    this.onStatus?.();
  }
  onStatus?: () => void;
}

function isToolPart(part: Part): part is ToolPart {
  return part.type.startsWith("tool-") || part.type === "dynamic-tool";
}

function toolName(part: ToolPart): string {
  return part.type === "dynamic-tool" ? String((part as { toolName?: string }).toolName) : part.type.slice(5);
}

/** The questions the last assistant message waits for, from its tool parts and question data. */
export function pendingQuestions(messages: UIMessage[]): Question[] {
  const last = messages[messages.length - 1];
  if (!last || last.role !== "assistant") return [];
  const described = new Map<string, Question>();
  for (const part of last.parts) {
    if (part.type === "data-askloop-question") {
      const data = (part as { data: Question }).data;
      described.set(data.toolCallId, data);
    }
  }
  const meta = last.metadata as { runId?: string; agentId?: string } | undefined;
  const runId = meta?.runId ?? "";
  // A sub-agent's question says who asked through the root's agent.
  for (const [id, question] of described) {
    if (question.subagent && !question.agentId && meta?.agentId) described.set(id, { ...question, agentId: meta.agentId });
  }
  const questions: Question[] = [];
  for (const part of last.parts) {
    if (!isToolPart(part)) continue;
    if (part.state === "approval-requested") {
      questions.push({ ...(described.get(part.toolCallId) ?? {}), runId, toolCallId: part.toolCallId, toolName: toolName(part), kind: "approval", args: part.input });
    } else if (part.state === "input-available" && described.has(part.toolCallId)) {
      questions.push(described.get(part.toolCallId) as Question);
    }
  }
  return questions;
}

/** How often the chat checks the run of the questions it shows (ms). */
const CHECK_MS = 4000;

/** How much text the agent wrote in the messages so far, in characters. */
function textLength(messages: UIMessage[]): number {
  let length = 0;
  for (const message of messages) {
    if (message.role !== "assistant") continue;
    for (const part of message.parts) if (part.type === "text") length += part.text.length;
  }
  return length;
}

/** Whether a message has anything to show (an assistant message just started has not). */
function hasContent(message: UIMessage): boolean {
  return message.parts.some((part) => (part.type === "text" && part.text !== "") || isToolPart(part));
}

/** A duration in words: `7 s`, `1 min 5 s`. */
export function elapsedText(ms: number): string {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  return seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** The chat view of one agent and chat id, drawn into `root`. */
export class ChatView {
  private chat: Chat;
  private drawScheduled = false;
  /** When the running turn was sent (or followed, after a reload), and the text there was then. */
  private turn: { startedAt: number; textAtStart: number } | null = null;
  private ticker: ReturnType<typeof setInterval> | null = null;
  private checker: ReturnType<typeof setInterval> | null = null;
  private events: AbortController | null = null;
  private reloading: Promise<void> | null = null;
  private formKey = "";
  private form: ReturnType<typeof renderQuestionForm> | null = null;
  private rejection: ((problems: Record<string, string> | null) => void) | null = null;
  private lastProblems: Record<string, string> | null = null;
  /** The sub-agent runs whose work a person opened (kept open across redraws). */
  private openSubagents = new Set<string>();

  constructor(
    readonly agentId: string,
    readonly chatId: string,
    private readonly log: HTMLElement,
    private readonly pending: HTMLElement,
    private readonly stopButton: HTMLButtonElement,
    private readonly status: (text: string) => void,
  ) {
    const state = new State([], () => this.scheduleDraw());
    this.chat = new Chat({
      id: chatId,
      state,
      transport: new DefaultChatTransport<UIMessage>({
        api: `/api/agents/${encodeURIComponent(agentId)}/chat`,
        headers: () => authHeaders(),
      }),
      onData: (part) => {
        if (part.type === "data-askloop-rejection") {
          this.lastProblems = (part.data as { problems: Record<string, string> }).problems;
        }
      },
      onError: (error) => this.status(`Error: ${error.message}`),
    });
    this.chat.onStatus = () => this.scheduleDraw();
  }

  /** Loads the chat's messages from the server (a reload shows the same questions). */
  async load(): Promise<void> {
    const body = await requestJson<{ messages: UIMessage[] }>(
      "GET",
      `/api/agents/${encodeURIComponent(this.agentId)}/chat/${encodeURIComponent(this.chatId)}/messages`,
    );
    this.chat.messages = body.messages;
  }

  /**
   * Follows the chat's running turn, if one runs (the AI SDK's stream resumption, as
   * `useChat({ resume: true })`): after `load`, so a reload during a turn shows it going on.
   */
  async resume(): Promise<void> {
    this.beginTurn();
    await this.chat.resumeStream();
  }

  /** Sends a new user message. */
  async send(text: string): Promise<void> {
    await this.reloading;
    this.status("");
    this.beginTurn();
    await this.chat.sendMessage({ text });
    await this.afterRequest();
  }

  /**
   * Follows the inbox events while the chat is shown: an event of this chat's thread (a question
   * raised or resolved, here or elsewhere) or a `resync` reloads the chat when no turn streams
   * here, and follows a turn another client started (a question answered elsewhere goes away).
   */
  watch(): void {
    if (this.events) return;
    this.events = new AbortController();
    // The working indicator's time, once a second while it shows.
    this.ticker = setInterval(() => {
      if (this.working()) this.scheduleDraw();
    }, 1000);
    this.checker = setInterval(() => void this.checkShownQuestions(), CHECK_MS);
    // Each time the stream opens, the chat is read again: an event sent while it was not open
    // (before it opened, or while it reconnected) reached nobody.
    void followEvents(
      "/api/inbox/events",
      (data) => this.onInboxEvent(data),
      this.events.signal,
      () => void this.reloadFromServer(),
    );
  }

  /** Stops following the inbox events (and the indicator's clock). */
  unwatch(): void {
    this.events?.abort();
    this.events = null;
    if (this.ticker !== null) clearInterval(this.ticker);
    if (this.checker !== null) clearInterval(this.checker);
    this.ticker = null;
    this.checker = null;
  }

  /** Reloads the chat when the run of the questions shown no longer waits for exactly them. */
  private async checkShownQuestions(): Promise<void> {
    const shown = this.busy ? [] : pendingQuestions(this.chat.messages);
    const runId = shown[0]?.runId;
    if (!runId || this.reloading) return;
    try {
      const run = await requestJson<{ status: string; pendingToolCalls?: { toolCallId: string }[] }>("GET", `/api/runs/${encodeURIComponent(runId)}`);
      const waiting = new Set((run.pendingToolCalls ?? []).map((call) => call.toolCallId));
      if (run.status !== "suspended" || shown.some((q) => !waiting.has(q.toolCallId))) await this.reloadFromServer();
    } catch {
      // The next check, or an event, tries again.
    }
  }

  private onInboxEvent(data: string): void {
    let event: { type?: string; threadId?: string; agentId?: string } = {};
    try {
      event = JSON.parse(data) as typeof event;
    } catch {
      return;
    }
    const ours = event.threadId === this.chatId && (event.agentId === undefined || event.agentId === this.agentId);
    if (event.type !== "resync" && !ours) return;
    void this.reloadFromServer();
  }

  /** Reads the chat again from the server (once at a time) and follows a turn that runs. */
  private async reloadFromServer(): Promise<void> {
    if (this.busy || this.reloading) return;
    this.reloading = (async () => {
      try {
        await this.load();
        await this.resume();
      } catch (error) {
        this.status(`Chat: ${(error as Error).message}`);
      }
    })();
    try {
      await this.reloading;
    } finally {
      this.reloading = null;
    }
  }

  /** A turn starts now: the working indicator counts from here until new text comes. */
  private beginTurn(): void {
    this.turn = { startedAt: Date.now(), textAtStart: textLength(this.chat.messages) };
  }

  /** Whether the agent works on a turn that has written nothing yet. */
  private working(): boolean {
    if (!this.busy || !this.turn) return false;
    return textLength(this.chat.messages) <= this.turn.textAtStart;
  }

  get busy(): boolean {
    return this.chat.status === "submitted" || this.chat.status === "streaming";
  }

  /**
   * Stops the running turn: stops reading its stream, then cancels its run on the server
   * (whichever instance drives it stops it), then shows the chat as stored. The run id comes
   * from the turn's `start` chunk (`messageMetadata.runId`); a stop before it arrived waits
   * for it (at most 10 s).
   */
  async stop(): Promise<void> {
    let runId = this.runningRunId();
    for (let waited = 0; !runId && this.busy && waited < 10_000; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      runId = this.runningRunId();
    }
    await this.chat.stop();
    if (!runId) {
      this.status("Stopped reading; no run was started.");
      return;
    }
    try {
      await requestJson("POST", `/api/runs/${encodeURIComponent(runId)}/cancel`);
      this.status("Stopped: the run was cancelled.");
    } catch (error) {
      this.status(`Stop: ${(error as Error).message}`);
    }
    await this.load();
  }

  /** The run of the turn being streamed: the last assistant message's, while busy. */
  private runningRunId(): string | undefined {
    if (!this.busy) return undefined;
    const last = this.chat.messages[this.chat.messages.length - 1];
    if (!last || last.role !== "assistant") return undefined;
    return (last.metadata as { runId?: string } | undefined)?.runId;
  }

  private async answer(responses: Response[]): Promise<Record<string, string> | null> {
    // A reload under way would put back the messages without these answers.
    await this.reloading;
    this.status("");
    this.lastProblems = null;
    this.beginTurn();
    for (const response of responses) {
      if (response.kind === "approval") {
        const question = pendingQuestions(this.chat.messages).find((q) => q.toolCallId === response.toolCallId);
        const part = this.lastToolPart(response.toolCallId);
        await this.chat.addToolApprovalResponse({ id: part?.approval?.id ?? question?.toolCallId ?? response.toolCallId, approved: response.approved, reason: response.reason });
        if (response.args !== undefined) this.withEditedArgs(response.toolCallId, response.args);
      } else {
        const part = this.lastToolPart(response.toolCallId);
        await this.chat.addToolOutput({ tool: part ? toolName(part) : "ask_user", toolCallId: response.toolCallId, output: response.answer } as never);
      }
    }
    await this.chat.sendMessage();
    return this.afterRequest();
  }

  /** After a request: a rejected answer puts the server's state back and names the problems. */
  private async afterRequest(): Promise<Record<string, string> | null> {
    const problems = this.lastProblems;
    if (this.chat.status === "error" || problems) {
      this.chat.clearError();
      await this.load();
      if (problems) {
        this.drawNow();
        this.form?.showProblems(problems);
        this.status("The answer was not accepted: see the messages beside the questions.");
        return problems;
      }
    }
    return null;
  }

  /**
   * Edit, then approve: the AI SDK's approval response has no field for edited input, so the
   * responded part's `approval` gets askloop's `args` (`{id, approved, reason?, args}`), which
   * the chat route reads.
   */
  private withEditedArgs(toolCallId: string, args: unknown): void {
    this.chat.messages = this.chat.messages.map((message) => ({
      ...message,
      parts: message.parts.map((part) =>
        isToolPart(part) && part.toolCallId === toolCallId && part.state === "approval-responded" && part.approval
          ? ({ ...part, approval: { ...part.approval, args } } as unknown as typeof part)
          : part,
      ),
    }));
  }

  private lastToolPart(toolCallId: string): ToolPart | undefined {
    const last = this.chat.messages[this.chat.messages.length - 1];
    return last?.parts.filter(isToolPart).find((part) => part.toolCallId === toolCallId);
  }

  private scheduleDraw(): void {
    if (this.drawScheduled) return;
    this.drawScheduled = true;
    requestAnimationFrame(() => {
      this.drawScheduled = false;
      this.drawNow();
    });
  }

  private drawNow(): void {
    const log = this.log;
    const items: HTMLElement[] = [];
    for (const message of this.chat.messages) {
      // A reply that has nothing yet is not an empty bubble: the working indicator stands for it.
      if (message.role === "assistant" && !hasContent(message)) continue;
      const box = document.createElement("div");
      box.className = `message ${message.role}`;
      box.dataset.messageId = message.id;
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = message.role === "user" ? "You" : "Agent";
      box.append(who);
      const work = subagentWork(message);
      const shown = new Set<string>();
      for (const part of message.parts) {
        if (part.type === "text") {
          const text = document.createElement("span");
          text.className = "text";
          text.textContent = part.text;
          box.append(text);
        } else if (isToolPart(part)) {
          const line = document.createElement("div");
          line.className = "tool";
          line.textContent = describeToolPart(part);
          const runId = (message.metadata as { runId?: string } | undefined)?.runId;
          if (runId && !this.busy && toolName(part) === "ask_user" && part.state === "output-available" && !part.toolCallId.includes("~")) {
            const change = document.createElement("button");
            change.type = "button";
            change.className = "change-answer";
            change.textContent = "Change answer";
            change.dataset.testid = "change-answer";
            const toolCallId = part.toolCallId;
            change.addEventListener("click", () => void this.changeAnswer(runId, toolCallId));
            line.append(" ", change);
          }
          box.append(line);
          if (!shown.has(part.toolCallId)) {
            shown.add(part.toolCallId);
            for (const child of work.get(part.toolCallId) ?? []) box.append(this.subagentBox(child));
          }
        }
      }
      // Work whose call is not shown (yet): at the end of the message.
      for (const [call, children] of work) {
        if (!shown.has(call)) for (const child of children) box.append(this.subagentBox(child));
      }
      items.push(box);
    }
    if (this.working() && this.turn) {
      const working = document.createElement("div");
      working.className = "working";
      working.dataset.testid = "working";
      working.textContent = `The agent is working… ${elapsedText(Date.now() - this.turn.startedAt)}`;
      items.push(working);
    }
    log.replaceChildren(...items);
    this.stopButton.hidden = !this.busy;
    this.drawPending();
  }

  /** A sub-agent's work, collapsed by default: who, how far, and its text when opened. */
  private subagentBox(work: SubagentWork): HTMLElement {
    const box = document.createElement("details");
    box.className = "subagent";
    box.dataset.testid = "subagent";
    box.dataset.runId = work.runId;
    box.open = this.openSubagents.has(work.runId);
    box.addEventListener("toggle", () => {
      if (box.open) this.openSubagents.add(work.runId);
      else this.openSubagents.delete(work.runId);
    });
    const summary = document.createElement("summary");
    const path = work.path && work.path.length > 0 ? work.path.join(" → ") : work.agentId;
    summary.textContent = `Sub-agent ${path}: ${subagentStatus(work.status)}`;
    const text = document.createElement("div");
    text.className = "subagent-text";
    text.textContent = work.text === "" ? "(no text yet)" : work.text;
    box.append(summary, text);
    return box;
  }

  /**
   * "Change answer": the question `toolCallId` of run `runId`, as it was asked (GET
   * /api/runs/{runId}'s `questions`), answered anew in a fork of the run (POST
   * /api/runs/{runId}/fork); the original is not changed, and the chat then shows the fork's
   * thread, a new one.
   */
  private async changeAnswer(runId: string, toolCallId: string): Promise<void> {
    const path = `/api/runs/${encodeURIComponent(runId)}`;
    let question: Question | undefined;
    try {
      const run = await requestJson<{ questions?: Question[] }>("GET", path);
      question = run.questions?.find((asked) => asked.toolCallId === toolCallId);
    } catch (error) {
      this.status(`Change answer: ${(error as Error).message}`);
      return;
    }
    if (!question) {
      this.status("This question cannot be answered anew.");
      return;
    }
    const form = renderQuestionForm([question], "Fork with this answer", async (responses) => {
      const response = responses[0];
      if (!response || response.kind !== "answer") return null;
      const reply = await fetch(`${path}/fork`, {
        method: "POST",
        headers: { ...authHeaders(), "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ toolCallId, resumeData: response.answer }),
      });
      const text = await reply.text();
      if (!reply.ok) {
        let message = text;
        try {
          message = (JSON.parse(text) as { message?: string }).message ?? text;
        } catch {
          // not JSON: the text as it is
        }
        return { [toolCallId]: message };
      }
      const forkId = /"runId":"([^"]+)"/.exec(text)?.[1];
      if (!forkId) return { [toolCallId]: "The fork did not start." };
      const fork = await requestJson<{ threadId: string }>("GET", `/api/runs/${encodeURIComponent(forkId)}`);
      this.pending.replaceChildren();
      location.hash = `#/chat/${encodeURIComponent(this.agentId)}/${encodeURIComponent(fork.threadId)}`;
      return null;
    });
    this.pending.replaceChildren(form.element);
    form.focus();
  }

  private drawPending(): void {
    const questions = this.busy ? [] : pendingQuestions(this.chat.messages);
    const key = questions.map((q) => `${q.kind}:${q.toolCallId}`).join(",");
    if (key === this.formKey) return;
    this.formKey = key;
    if (questions.length === 0) {
      this.form = null;
      this.pending.replaceChildren();
      return;
    }
    this.form = renderQuestionForm(questions, questions.length === 1 ? "Send answer" : "Send answers", (responses) => this.answer(responses));
    this.pending.replaceChildren(this.form.element);
    this.form.focus();
  }
}

function describeToolPart(part: ToolPart): string {
  const name = toolName(part);
  switch (part.state) {
    case "output-available":
      return `${name}: ${outputText(part.output)}`;
    case "output-denied":
      return `${name}: declined`;
    case "output-error":
      return `${name}: ${(part as { errorText?: string }).errorText ?? "failed"}`;
    case "approval-requested":
      return `${name}: waits for approval`;
    case "approval-responded":
      return `${name}: answered`;
    default:
      return `${name}: waits for an answer`;
  }
}

function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  const content = (output as { content?: unknown } | null)?.content;
  return typeof content === "string" ? content : JSON.stringify(output);
}
