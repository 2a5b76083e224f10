// What a run did after a person answered it in the inbox: what they answered, how the run
// ended (its final text, its failure, or that it asks again), and a link to its chat. Read from
// GET /api/runs/{runId} once the answer's stream ended. Everything the model wrote is set with
// textContent, never parsed as HTML.

import { apiKey, requestJson } from "./api";
import { el, questionText, type Question, type Response } from "./form";

/** A run of `GET /api/runs/{runId}` (askloop-server's RunDetail), the parts read here. */
interface RunDetail {
  runId: string;
  agentId: string;
  threadId: string;
  resourceId?: string;
  status: string;
  messages: { role: string; parts?: { type: string; text?: string }[] }[];
  failure?: { code: string; message: string };
  pendingToolCalls?: { toolCallId: string; quorum?: number; approvals?: { by?: string; at: string; args?: unknown }[] }[];
  /** Who decided what, when, from where (askloop-server's DecisionBody). */
  decisions?: { toolCallId: string; toolName: string; action: string; by?: string; roles?: string[]; route?: string; at: string }[];
}

/** How long the outcome waits for a run that still runs (the answer's stream was cut). */
const WAIT_MS = 30_000;

/** A response in words: the answer's labels or text, or the decision. */
export function responseText(response: Response): string {
  if (response.kind === "approval") {
    if (!response.approved) return `Declined${response.reason ? `: ${response.reason}` : ""}`;
    return response.args === undefined ? "Approved" : `Approved with edited arguments: ${JSON.stringify(response.args)}`;
  }
  const words = (value: unknown): string => {
    if (typeof value === "string") return value;
    if (Array.isArray(value)) return value.map(words).join(", ");
    const other = (value as { other?: unknown } | null)?.other;
    return typeof other === "string" ? other : JSON.stringify(value);
  };
  return words(response.answer);
}

/** The text of the run's last assistant message. */
function finalText(run: RunDetail): string {
  const last = [...run.messages].reverse().find((message) => message.role === "assistant");
  return (last?.parts ?? [])
    .filter((part) => part.type === "text" && typeof part.text === "string")
    .map((part) => part.text)
    .join("")
    .trim();
}

/** The run's outcome in words. */
function outcomeText(run: RunDetail): string {
  switch (run.status) {
    case "completed": {
      const text = finalText(run);
      return text ? `The run completed: ${text}` : "The run completed.";
    }
    case "failed":
      return `The run failed: ${run.failure?.message ?? "no reason given"}`;
    case "suspended":
      return "The run asks again: its new question is in the inbox.";
    case "cancelled":
      return "The run was cancelled.";
    default:
      return "The run goes on; its chat shows it.";
  }
}

/** For an approval a quorum still waits beyond: "Approval N of Q recorded; …"; else null. */
function votesText(run: RunDetail, responses: Response[]): string | null {
  for (const response of responses) {
    const waiting = run.pendingToolCalls?.find((call) => call.toolCallId === response.toolCallId);
    if (response.kind === "approval" && waiting?.quorum) {
      return `Approval ${waiting.approvals?.length ?? 0} of ${waiting.quorum} recorded; the call waits for more approvers.`;
    }
  }
  return null;
}

/** The decisions on `toolCallIds` as lines: "approve by bob (roles ops; via …) at …". */
function decisionLines(run: RunDetail, toolCallIds: string[]): HTMLElement | null {
  const decisions = (run.decisions ?? []).filter((decision) => toolCallIds.includes(decision.toolCallId));
  if (decisions.length === 0) return null;
  const list = el("ul", "decisions");
  list.setAttribute("aria-label", "Who decided");
  for (const decision of decisions) {
    const details = [decision.roles?.length ? `roles ${decision.roles.join(", ")}` : "", decision.route ? `via ${decision.route}` : ""].filter(Boolean).join("; ");
    const when = new Date(Date.parse(decision.at)).toLocaleString();
    list.append(el("li", undefined, `${decision.action} by ${decision.by ?? "(not said)"}${details ? ` (${details})` : ""} at ${when}`));
  }
  return list;
}

/** The run, once it no longer runs (at most WAIT_MS). */
async function settledRun(runId: string): Promise<RunDetail> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const run = await requestJson<RunDetail>("GET", `/api/runs/${encodeURIComponent(runId)}`);
    if (run.status !== "running" || Date.now() > deadline) return run;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/**
 * The outcome of answering `questions` (of one run) with `responses`: what was answered, what
 * the run did, a link to its chat, and a Dismiss button calling `dismiss`.
 */
export async function renderOutcome(questions: Question[], responses: Response[], dismiss: () => void): Promise<HTMLElement> {
  const box = el("div", "outcome");
  const answers = el("ul", "answers");
  for (const response of responses) {
    const question = questions.find((q) => q.toolCallId === response.toolCallId);
    const line = el("li");
    line.append(el("span", "q", question ? questionText(question) : response.toolCallId), document.createTextNode(` You answered: ${responseText(response)}`));
    answers.append(line);
  }
  box.append(answers);
  const result = el("p", "result");
  result.setAttribute("role", "status");
  box.append(result);
  const runId = questions[0]?.runId ?? "";
  try {
    const run = await settledRun(runId);
    result.textContent = votesText(run, responses) ?? outcomeText(run);
    result.dataset.status = run.status;
    const decided = decisionLines(
      run,
      responses.map((response) => response.toolCallId),
    );
    if (decided) box.append(decided);
    // A chat is a thread of the caller's resource: the run's, when a key names it or it has none.
    if (apiKey() || !run.resourceId) {
      const link = el("a", undefined, "Open its chat");
      link.href = `#/chat/${encodeURIComponent(run.agentId)}/${encodeURIComponent(run.threadId)}`;
      box.append(link, document.createTextNode(" "));
    }
  } catch (error) {
    result.textContent = `Answered; the run could not be read: ${(error as Error).message}`;
  }
  const close = el("button", undefined, "Dismiss");
  close.type = "button";
  close.addEventListener("click", dismiss);
  box.append(close);
  return box;
}
