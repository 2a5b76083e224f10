// The inbox view: every pending question the key may see, across runs, newest first, live
// (GET /api/inbox/events says something changed; the list is read again), each answerable in
// place (POST /api/runs/{runId}/responses). A card answered here stays, showing what the run
// did next (see ./outcome). A `resync` event (this page fell behind the server's events, which
// were not all delivered) rebuilds the whole list
// from the server; the list is also read again each time the event stream (re)opens.

import { ApiError, followEvents, requestJson } from "./api";
import { renderQuestionForm, type Question, type Response } from "./form";
import { renderOutcome } from "./outcome";

/** A run of `GET /api/runs` (askloop-server's RunSummaryBody). */
interface RunEntry {
  runId: string;
  agentId: string;
  threadId: string;
  resourceId?: string;
  createdAt: string;
  updatedAt: string;
  /** Its pending calls, each in the one pending call shape. */
  pendingToolCalls: Question[];
}

/** The questions of a `GET /api/runs?status=suspended` answer, newest run first. */
export function questionsOfRuns(body: { runs: RunEntry[] }): Question[] {
  const questions: Question[] = [];
  for (const run of body.runs) {
    for (const call of run.pendingToolCalls) {
      questions.push({ ...call, agentId: run.agentId, threadId: run.threadId, resourceId: run.resourceId, askedAt: run.updatedAt });
    }
  }
  const time = (q: Question) => (q.askedAt ? Date.parse(q.askedAt) : 0);
  questions.sort((a, b) => time(b) - time(a));
  return questions;
}

/** The wire body of one response for the batch answer route. */
function responseBody(response: Response): Record<string, unknown> {
  return response.kind === "approval"
    ? {
        toolCallId: response.toolCallId,
        approved: response.approved,
        ...(response.reason ? { reason: response.reason } : {}),
        ...(response.args !== undefined ? { args: response.args } : {}),
      }
    : { toolCallId: response.toolCallId, answer: response.answer };
}

/** The inbox, drawn into `list`; live while started. */
export class InboxView {
  private abort: AbortController | null = null;
  private shown = new Map<string, HTMLElement>();
  /** Cards answered in this tab, newest first: they stay, with the run's outcome. */
  private answered: HTMLElement[] = [];
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
    // Read again each time the stream opens: what happened while it reconnected reached nobody.
    void followEvents("/api/inbox/events", (data) => this.onEvent(data), this.abort.signal, () => void this.refresh());
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
          const body = await requestJson<{ runs: RunEntry[] }>("GET", "/api/runs?status=suspended&limit=100");
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
      if (item && this.answered.includes(item)) {
        // Being answered: shown once, as answered.
        next.set(key, item);
        continue;
      }
      if (!item) item = this.renderItem(runId, qs);
      next.set(key, item);
      items.push(item);
    }
    this.shown = next;
    this.list.replaceChildren(...this.answered, ...items);
    // A card answered here may still wait (an approval a quorum needs more approvers for).
    this.empty.hidden = questions.length > 0;
    this.count.textContent = questions.length > 0 ? `(${questions.length})` : "";
  }

  private renderItem(runId: string, questions: Question[]): HTMLElement {
    const item = document.createElement("li");
    item.dataset.runId = runId;
    const meta = document.createElement("p");
    meta.className = "meta";
    const first = questions[0];
    const asked = first?.askedAt ? Date.parse(first.askedAt) : NaN;
    meta.textContent = `Run ${runId}${first?.agentId ? ` of ${first.agentId}` : ""}${Number.isNaN(asked) ? "" : `, asked ${new Date(asked).toLocaleString()}`}`;
    const form = renderQuestionForm(questions, "Answer", async (responses) => {
      // The card stays while the run goes on, and after, with what it did.
      this.answered = [item, ...this.answered.filter((other) => other !== item)];
      try {
        await requestJson("POST", `/api/runs/${encodeURIComponent(runId)}/responses`, { responses: responses.map(responseBody) });
      } catch (error) {
        this.answered = this.answered.filter((other) => other !== item);
        if (error instanceof ApiError) {
          const details = error.details as { toolCallId?: string; problems?: string[] } | undefined;
          const target = details?.toolCallId ?? questions[0]?.toolCallId ?? "";
          // Edited arguments that do not fit the tool: every problem the server found.
          if (error.code === "invalid_args" && details?.problems?.length) {
            return { [target]: `The edited arguments do not fit the tool: ${details.problems.join("; ")}` };
          }
          return { [target]: error.message };
        }
        throw error;
      }
      this.status(`Answered run ${runId}.`);
      item.classList.add("answered");
      form.element.replaceWith(await renderOutcome(questions, responses, () => this.dismiss(item)));
      await this.refresh();
      return null;
    });
    item.append(meta, form.element);
    return item;
  }

  /** Takes an answered card away. */
  private dismiss(item: HTMLElement): void {
    this.answered = this.answered.filter((other) => other !== item);
    item.remove();
  }
}
