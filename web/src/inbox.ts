// The inbox view: every pending question the key may see, across runs, newest first, live
// (GET /api/inbox/events says something changed; the list is read again), each answerable in
// place (POST /api/runs/{runId}/responses). A `resync` event (this page fell behind the
// server's events, which were not all delivered) rebuilds the whole list from the server.

import { ApiError, followEvents, requestJson } from "./api";
import { renderQuestionForm, type Question, type Response } from "./form";

interface PendingCall {
  toolCallId: string;
  toolName: string;
  args?: unknown;
  suspendPayload?: Record<string, unknown> | null;
  resumeSchema?: unknown;
  kind?: string;
  expiresAtMs?: number | null;
  form?: Question["form"];
}

interface RunEntry {
  runId: string;
  agentId?: string;
  threadId?: string;
  createdAtMs?: number;
  updatedAtMs?: number;
  pending?: PendingCall[];
  pendingToolCalls?: PendingCall[];
  questions?: PendingCall[];
}

/** The questions of a `GET /api/runs?status=suspended` answer, newest run first. */
export function questionsOfRuns(body: unknown): Question[] {
  const b = body as { runs?: RunEntry[]; items?: RunEntry[]; data?: RunEntry[] } | RunEntry[];
  const runs: RunEntry[] = Array.isArray(b) ? b : b.runs ?? b.items ?? b.data ?? [];
  const questions: Question[] = [];
  for (const run of runs) {
    for (const call of run.pending ?? run.pendingToolCalls ?? run.questions ?? []) {
      questions.push({
        runId: run.runId,
        agentId: run.agentId,
        threadId: run.threadId,
        createdAtMs: run.createdAtMs ?? run.updatedAtMs,
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        kind: call.kind === "approval" ? "approval" : "answer",
        args: call.args,
        suspendPayload: call.suspendPayload ?? null,
        resumeSchema: typeof call.resumeSchema === "string" ? JSON.parse(call.resumeSchema) : call.resumeSchema,
        form: call.form ?? null,
        expiresAtMs: call.expiresAtMs ?? null,
      });
    }
  }
  questions.sort((a, b) => (b.createdAtMs ?? 0) - (a.createdAtMs ?? 0));
  return questions;
}

/** The wire body of one response for the batch answer route. */
function responseBody(response: Response): Record<string, unknown> {
  return response.kind === "approval"
    ? { toolCallId: response.toolCallId, approved: response.approved, ...(response.reason ? { reason: response.reason } : {}) }
    : { toolCallId: response.toolCallId, answer: response.answer };
}

/** The inbox, drawn into `list`; live while started. */
export class InboxView {
  private abort: AbortController | null = null;
  private shown = new Map<string, HTMLElement>();
  private refreshing: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly list: HTMLElement,
    private readonly empty: HTMLElement,
    private readonly count: HTMLElement,
    private readonly status: (text: string) => void,
  ) {}

  start(): void {
    this.stop();
    this.abort = new AbortController();
    void this.refresh();
    void followEvents("/api/inbox/events", (data) => this.onEvent(data), this.abort.signal);
  }

  /** One inbox event: `question-raised` / `question-resolved` mean the list changed, so it is
   * read again; `resync` means events were lost, so nothing shown is trusted: the list is
   * rebuilt from scratch (the questions pending now follow as `question-raised` events). */
  private onEvent(data: string): void {
    let type = "";
    try {
      type = (JSON.parse(data) as { type?: string }).type ?? "";
    } catch {
      // Not JSON: still a sign that something changed.
    }
    if (type === "resync") this.shown.clear();
    void this.refresh();
  }

  stop(): void {
    this.abort?.abort();
    this.abort = null;
  }

  /** Reads the list again; items still pending keep their element (and what was typed). */
  async refresh(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.again = false;
        try {
          const body = await requestJson<unknown>("GET", "/api/runs?status=suspended&limit=100");
          this.draw(questionsOfRuns(body));
        } catch (error) {
          this.status(`Inbox: ${(error as Error).message}`);
        }
      } while (this.again);
    })();
    try {
      await this.refreshing;
    } finally {
      this.refreshing = null;
    }
  }

  private draw(questions: Question[]): void {
    const byRun = new Map<string, Question[]>();
    for (const q of questions) byRun.set(q.runId, [...(byRun.get(q.runId) ?? []), q]);
    const items: HTMLElement[] = [];
    const next = new Map<string, HTMLElement>();
    for (const [runId, qs] of byRun) {
      const key = `${runId}|${qs.map((q) => q.toolCallId).join(",")}`;
      let item = this.shown.get(key);
      if (!item) item = this.renderItem(runId, qs);
      next.set(key, item);
      items.push(item);
    }
    this.shown = next;
    this.list.replaceChildren(...items);
    this.empty.hidden = items.length > 0;
    this.count.textContent = questions.length > 0 ? `(${questions.length})` : "";
  }

  private renderItem(runId: string, questions: Question[]): HTMLElement {
    const item = document.createElement("li");
    item.dataset.runId = runId;
    const meta = document.createElement("p");
    meta.className = "meta";
    const first = questions[0];
    meta.textContent = `Run ${runId}${first?.agentId ? ` of ${first.agentId}` : ""}${first?.createdAtMs ? `, asked ${new Date(first.createdAtMs).toLocaleString()}` : ""}`;
    const form = renderQuestionForm(questions, "Answer", async (responses) => {
      try {
        await requestJson("POST", `/api/runs/${encodeURIComponent(runId)}/responses`, { responses: responses.map(responseBody) });
        this.status(`Answered run ${runId}.`);
        await this.refresh();
        return null;
      } catch (error) {
        if (error instanceof ApiError) {
          const details = error.details as { toolCallId?: string } | undefined;
          const target = details?.toolCallId ?? questions[0]?.toolCallId ?? "";
          return { [target]: error.message };
        }
        throw error;
      }
    });
    item.append(meta, form.element);
    return item;
  }
}
