// The page of an answer link (GET /answer/{token}): the one question (or approval) the server
// embedded in the page (a `<script type="application/json">`, data the CSP lets be), rendered
// with the app's own form (./form), sent to POST /answer/{token} — the same path, no API key:
// the token is the credential. A refused answer (400) shows its problem and the link still
// works; a link that no longer works (410) says so; an accepted one shows what was sent.

import { ApiError, requestJson } from "./api";
import { el, renderQuestionForm, type Question, type Response } from "./form";
import { responseText } from "./outcome";

/** The body of POST /answer/{token} for a response. */
function linkBody(response: Response): Record<string, unknown> {
  if (response.kind === "answer") return { resumeData: response.answer };
  return {
    approved: response.approved,
    ...(response.reason ? { reason: response.reason } : {}),
    ...(response.args !== undefined ? { args: response.args } : {}),
  };
}

/** Replaces the form with `text` (and a heading), focused for screen readers. */
function finish(root: HTMLElement, title: string, text: string, id: string): void {
  const box = el("div", "outcome");
  box.id = id;
  const heading = el("h3", undefined, title);
  heading.tabIndex = -1;
  box.append(heading, el("p", "result", text));
  root.replaceChildren(box);
  heading.focus();
}

function start(): void {
  const root = document.getElementById("answer");
  const data = document.getElementById("askloop-call");
  if (!root || !data) return;
  let question: Question;
  try {
    question = JSON.parse(data.textContent ?? "") as Question;
  } catch {
    finish(root, "This link no longer works", "The page could not read its question.", "gone");
    return;
  }
  if (question.kind === "approval") {
    const title = document.getElementById("answer-title");
    if (title) title.textContent = "A decision for you";
  }
  const form = renderQuestionForm([question], question.kind === "approval" ? "Send decision" : "Send answer", async ([response]) => {
    if (!response) return null;
    try {
      await requestJson("POST", window.location.pathname, linkBody(response));
    } catch (error) {
      if (error instanceof ApiError) {
        if (error.status === 410) {
          finish(root, "This link no longer works", "It was used, revoked or expired, or the question was answered or closed some other way.", "gone");
          return null;
        }
        const details = error.details as { problems?: string[] } | undefined;
        if (error.code === "invalid_args" && details?.problems?.length) {
          return { [question.toolCallId]: `The edited arguments do not fit the tool: ${details.problems.join("; ")}` };
        }
        return { [question.toolCallId]: error.message };
      }
      return { [question.toolCallId]: `The answer could not be sent: ${(error as Error).message}` };
    }
    finish(root, "Thank you", `Your answer was sent: ${responseText(response)}`, "sent");
    return null;
  });
  root.replaceChildren(form.element);
  form.focus();
}

start();
