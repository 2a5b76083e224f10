// Question forms: one pending tool call (an ask_user question, any other suspending tool, or
// an approval) as labelled controls, read back into the answer the server validates.
// Everything the model or a tool wrote is set with textContent, never parsed as HTML.

/** A choice of a select, as the server describes it (askloop_core::form::Choice). */
export interface Choice {
  value: unknown;
  label: string;
  description?: string | null;
}

/** One input a resume schema asks for (askloop_core::form::Field, as JSON). */
export interface FormField {
  kind: "select" | "multi-select" | "confirm" | "text" | "number" | "object" | "json";
  title?: string | null;
  description?: string | null;
  hint?: string | null;
  choices?: Choice[];
  nonBlank?: boolean;
  minLength?: number | null;
  maxLength?: number | null;
  integer?: boolean;
  minimum?: number | null;
  maximum?: number | null;
  properties?: { name: string; required: boolean; field: FormField }[];
}

/**
 * A pending tool call, in the one shape the server sends everywhere (askloop_core::wire::PendingCall,
 * docs/wire-format.md): the `data` of a `data-askloop-question` part, a `pendingToolCalls[]` entry
 * of the runs API, an inbox event. The inbox adds the run's agent, thread and time.
 */
export interface Question {
  runId: string;
  toolCallId: string;
  toolName: string;
  kind: "answer" | "approval";
  args?: unknown;
  /** What the tool asked (ask_user: question, options[{label, description}], allowOther, ...). */
  payload?: Record<string, unknown> | null;
  resumeSchema?: unknown;
  /** The resume schema read as a form field; absent when any JSON is accepted. */
  form?: FormField;
  /** The deadline, RFC 3339; absent without one. */
  expiresAt?: string;
  /** An approval that needs several approvers: how many (absent for one). */
  quorum?: number;
  /**
   * The approvals recorded so far, for a quorum: `{by, at, args?}` (`at` RFC 3339; `args`: the
   * arguments that approver approved, when they edited the model's — later approvers must
   * approve the same ones).
   */
  approvals?: { by?: string; at: string; args?: unknown }[];
  /**
   * A sub-agent's call, shown by its root run: the sub-agents from the root's child down to the
   * one that asked (`path`), that run and the call's id there (`toolCallId` above is then
   * `PARENT_CALL~CHILD_CALL`). Absent for the run's own calls.
   */
  subagent?: { path: string[]; runId: string; toolCallId: string };
  /** The run's agent (for a sub-agent's call: the root's). */
  agentId?: string;
  threadId?: string;
  resourceId?: string;
  /** When the run asked (RFC 3339). */
  askedAt?: string;
}

/** What a person gave for a question: an answer, or an approval decision. */
export type Response =
  | { toolCallId: string; kind: "answer"; answer: unknown }
  | { toolCallId: string; kind: "approval"; approved: boolean; reason?: string; args?: unknown };

/** A rendered question: its element, a reader, and where its problems are shown. */
export interface RenderedQuestion {
  question: Question;
  element: HTMLElement;
  /** The response, or a problem in words. */
  read(): { ok: true; response: Response } | { ok: false; problem: string };
  showProblem(problem: string | null): void;
  focus(): void;
}

let sequence = 0;
function uid(prefix: string): string {
  sequence += 1;
  return `${prefix}-${sequence}`;
}

/** A new element with a class and text (set as textContent, never parsed as HTML). */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined) element.textContent = text;
  return element;
}

/** The deadline of a question in milliseconds, if it has one. */
export function deadlineOf(question: Question): number | null {
  const ms = question.expiresAt ? Date.parse(question.expiresAt) : NaN;
  return Number.isNaN(ms) ? null : ms;
}

/** The field a question's answer is typed into: its form, else any JSON. */
function fieldOf(question: Question): FormField {
  return question.form ?? { kind: "json" };
}

/** The words of a question: ask_user's `question`, else the schema's title or the tool's name. */
export function questionText(question: Question): string {
  const payload = question.payload ?? {};
  if (question.kind === "approval") return `Approve the call of ${question.toolName}?`;
  if (typeof payload.question === "string") return payload.question;
  if (typeof payload.message === "string") return payload.message;
  const field = fieldOf(question);
  return field.title ?? field.description ?? `${question.toolName} asks for an answer`;
}

/**
 * Who asked a sub-agent's question, in words: "asked by researcher (via supervisor)" — the
 * asking sub-agent, then the agents it reports through up to the root's (when known). Null for
 * the run's own questions.
 */
export function originText(question: Question): string | null {
  const path = question.subagent?.path ?? [];
  const asker = path[path.length - 1];
  if (!asker) return null;
  const via = [...path.slice(0, -1).reverse(), ...(question.agentId ? [question.agentId] : [])];
  return via.length > 0 ? `asked by ${asker} (via ${via.join(", ")})` : `asked by ${asker}`;
}

/** Renders one question (its legend, who asked it, deadline, controls and problem line). */
export function renderQuestion(question: Question): RenderedQuestion {
  const id = uid("q");
  const box = el("fieldset", "question");
  box.dataset.toolCallId = question.toolCallId;
  const legend = el("legend", "q", questionText(question));
  legend.id = `${id}-legend`;
  box.append(legend);
  const origin = originText(question);
  if (origin !== null) {
    const line = el("p", "origin", origin);
    line.dataset.testid = "question-origin";
    box.append(line);
  }
  const deadline = deadlineOf(question);
  if (deadline !== null) {
    const line = el("p", "deadline", "Answer by ");
    const time = el("time", undefined, new Date(deadline).toLocaleString());
    time.dateTime = new Date(deadline).toISOString();
    line.append(time);
    box.append(line);
  }
  const problem = el("p", "problem");
  problem.id = `${id}-problem`;
  problem.setAttribute("role", "alert");
  problem.hidden = true;

  let control: Control;
  if (question.kind === "approval") {
    control = approvalControl(id, question);
  } else {
    const field = fieldOf(question);
    const allowOther = question.payload?.allowOther === true;
    control = fieldControl(id, withOptionDescriptions(field, question.payload), allowOther, question.toolName === "ask_user" ? null : field.title ?? field.description ?? null);
  }
  box.append(control.element, problem);
  for (const input of control.inputs()) input.setAttribute("aria-describedby", [input.getAttribute("aria-describedby"), problem.id].filter(Boolean).join(" "));

  return {
    question,
    element: box,
    read() {
      const read = control.read();
      if (!read.ok) return read;
      if (question.kind === "approval") {
        const value = read.value as { approved: boolean; reason?: string; args?: unknown };
        return { ok: true, response: { toolCallId: question.toolCallId, kind: "approval", ...value } };
      }
      return { ok: true, response: { toolCallId: question.toolCallId, kind: "answer", answer: read.value } };
    },
    showProblem(text) {
      problem.textContent = text ?? "";
      problem.hidden = text === null;
      for (const input of control.inputs()) {
        if (text === null) input.removeAttribute("aria-invalid");
        else input.setAttribute("aria-invalid", "true");
      }
    },
    focus() {
      control.inputs()[0]?.focus();
    },
  };
}

/** ask_user's option descriptions (in its payload's `options`) on the field's choices. */
function withOptionDescriptions(field: FormField, payload: Record<string, unknown> | null | undefined): FormField {
  const options = Array.isArray(payload?.options) ? (payload.options as { label?: unknown; description?: unknown }[]) : [];
  if (!field.choices || options.length === 0) return field;
  const byLabel = new Map(options.map((option) => [option.label, option.description]));
  return {
    ...field,
    choices: field.choices.map((choice) => {
      const description = byLabel.get(choice.value);
      return choice.description || typeof description !== "string" ? choice : { ...choice, description };
    }),
  };
}

interface Control {
  element: HTMLElement;
  inputs(): (HTMLInputElement | HTMLTextAreaElement)[];
  read(): { ok: true; value: unknown } | { ok: false; problem: string };
}

function labelled(id: string, text: string, input: HTMLInputElement | HTMLTextAreaElement): HTMLElement {
  const wrap = el("div", "field");
  const label = el("label", undefined, text);
  input.id = id;
  label.htmlFor = id;
  wrap.append(label, input);
  return wrap;
}

/**
 * An approval: the tool and its arguments, Approve or Decline (with an optional reason), and
 * "Edit arguments": a JSON textarea prefilled with the arguments, sent with the approval as
 * `args` (the server checks them against the tool's input schema and names every problem).
 */
function approvalControl(id: string, question: Question): Control {
  const wrap = el("div");
  wrap.append(el("p", "meta", `Tool: ${question.toolName}`));
  if (question.quorum) {
    // A quorum: who approved so far (the server refuses a second approval of the same person).
    const approvals = question.approvals ?? [];
    const who = approvals.map((vote) => `${vote.by ?? "someone"} (${new Date(Date.parse(vote.at)).toLocaleString()})`);
    const votes = el("p", "meta votes", `Needs ${question.quorum} approvers; approved so far: ${approvals.length}${who.length ? ` — ${who.join(", ")}` : ""}`);
    wrap.append(votes);
    // A vote that edited the arguments: what it approved (the next approvers must approve the
    // same arguments, with "Edit arguments").
    for (const vote of approvals) {
      if (vote.args === undefined || vote.args === null) continue;
      const line = el("p", "meta vote-args", `${vote.by ?? "someone"} approved with `);
      line.append(el("code", undefined, JSON.stringify(vote.args)));
      wrap.append(line);
    }
  }
  const original = JSON.stringify(question.args ?? {}, null, 2);
  const args = el("pre", "args", original);
  args.setAttribute("aria-label", `Arguments of ${question.toolName}`);
  wrap.append(args);
  const edit = el("button", "edit-args", "Edit arguments");
  edit.type = "button";
  const editor = el("textarea", "args-editor");
  editor.value = original;
  editor.rows = Math.min(12, Math.max(3, original.split("\n").length));
  editor.spellcheck = false;
  const editorField = labelled(`${id}-args`, "Arguments (JSON), approved as edited", editor);
  editorField.hidden = true;
  wrap.append(edit, editorField);
  const group = el("div");
  group.setAttribute("role", "radiogroup");
  group.setAttribute("aria-label", "Decision");
  const approve = radio(`${id}-approve`, `${id}-decision`, "Approve", "approve");
  const decline = radio(`${id}-decline`, `${id}-decision`, "Decline", "decline");
  group.append(approve.label, decline.label);
  edit.addEventListener("click", () => {
    editorField.hidden = false;
    args.hidden = true;
    edit.hidden = true;
    approve.input.checked = true;
    editor.focus();
  });
  const reason = el("input");
  reason.type = "text";
  wrap.append(group, labelled(`${id}-reason`, "Reason (optional)", reason));
  return {
    element: wrap,
    inputs: () => (editorField.hidden ? [approve.input, decline.input] : [approve.input, decline.input, editor]),
    read() {
      if (approve.input.checked) {
        if (editorField.hidden || editor.value.trim() === original.trim()) return { ok: true, value: { approved: true } };
        let edited: unknown;
        try {
          edited = JSON.parse(editor.value);
        } catch (error) {
          return { ok: false, problem: `The arguments are not JSON: ${(error as Error).message}` };
        }
        if (edited === null || typeof edited !== "object" || Array.isArray(edited)) return { ok: false, problem: "The arguments must be a JSON object." };
        return { ok: true, value: { approved: true, args: edited } };
      }
      if (decline.input.checked) {
        const text = reason.value.trim();
        return { ok: true, value: text ? { approved: false, reason: text } : { approved: false } };
      }
      return { ok: false, problem: "Choose Approve or Decline." };
    },
  };
}

function radio(id: string, name: string, text: string, value: string, type: "radio" | "checkbox" = "radio", description?: string | null) {
  const label = el("label", "choice");
  const input = el("input");
  input.type = type;
  input.name = name;
  input.value = value;
  input.id = id;
  label.htmlFor = id;
  label.append(input, document.createTextNode(` ${text}`));
  if (description) {
    const desc = el("span", "desc", description);
    desc.id = `${id}-desc`;
    input.setAttribute("aria-describedby", desc.id);
    label.append(desc);
  }
  return { label, input };
}

function fieldControl(id: string, field: FormField, allowOther: boolean, caption: string | null): Control {
  switch (field.kind) {
    case "select":
    case "multi-select":
      return choiceControl(id, field, allowOther);
    case "confirm": {
      const wrap = el("div");
      wrap.setAttribute("role", "radiogroup");
      wrap.setAttribute("aria-label", caption ?? "Yes or no");
      const yes = radio(`${id}-yes`, id, "Yes", "yes");
      const no = radio(`${id}-no`, id, "No", "no");
      wrap.append(yes.label, no.label);
      return {
        element: wrap,
        inputs: () => [yes.input, no.input],
        read: () => (yes.input.checked ? { ok: true, value: true } : no.input.checked ? { ok: true, value: false } : { ok: false, problem: "Choose Yes or No." }),
      };
    }
    case "number": {
      const input = el("input");
      input.type = "number";
      if (field.integer) input.step = "1";
      if (field.minimum != null) input.min = String(field.minimum);
      if (field.maximum != null) input.max = String(field.maximum);
      return {
        element: labelled(`${id}-input`, caption ?? field.hint ?? "Number", input),
        inputs: () => [input],
        read: () => {
          const value = Number(input.value);
          return input.value.trim() === "" || Number.isNaN(value) ? { ok: false, problem: "Enter a number." } : { ok: true, value };
        },
      };
    }
    case "object": {
      const wrap = el("div");
      const parts = (field.properties ?? []).map((property) => {
        const sub = fieldControl(`${id}-${property.name}`, property.field, false, `${property.field.title ?? property.name}${property.required ? "" : " (optional)"}`);
        wrap.append(sub.element);
        return { property, sub };
      });
      return {
        element: wrap,
        inputs: () => parts.flatMap((part) => part.sub.inputs()),
        read() {
          const value: Record<string, unknown> = {};
          for (const { property, sub } of parts) {
            const read = sub.read();
            if (read.ok) value[property.name] = read.value;
            else if (property.required) return { ok: false, problem: `${property.name}: ${read.problem}` };
          }
          return { ok: true, value };
        },
      };
    }
    case "json": {
      const input = el("textarea");
      input.rows = 3;
      return {
        element: labelled(`${id}-input`, caption ?? "Answer (JSON)", input),
        inputs: () => [input],
        read: () => {
          try {
            return { ok: true, value: JSON.parse(input.value) };
          } catch {
            return { ok: false, problem: "Enter valid JSON." };
          }
        },
      };
    }
    case "text":
    default: {
      const input = el("textarea");
      input.rows = 2;
      if (field.maxLength != null) input.maxLength = field.maxLength;
      return {
        element: labelled(`${id}-input`, caption ?? "Your answer", input),
        inputs: () => [input],
        read: () => ({ ok: true, value: input.value }),
      };
    }
  }
}

/** The choice that stands for the person's own words (ask_user's `allowOther`). */
export const OTHER_CHOICE = "Other: type my own answer";
/** The label of the box the person's own words are typed into. */
export const OTHER_TEXT = "Your own answer";

function choiceControl(id: string, field: FormField, allowOther: boolean): Control {
  const multi = field.kind === "multi-select";
  const type = multi ? "checkbox" : "radio";
  const wrap = el("div");
  wrap.setAttribute("role", multi ? "group" : "radiogroup");
  wrap.setAttribute("aria-label", multi ? "Choose one or more" : "Choose one");
  const choices = (field.choices ?? []).map((choice, index) => {
    const item = radio(`${id}-c${index}`, id, choice.label, String(index), type, choice.description);
    wrap.append(item.label);
    return { choice, input: item.input };
  });
  let other: { input: HTMLInputElement; text: HTMLInputElement } | null = null;
  if (allowOther) {
    // The person's own words, beside the choices: typing picks it, emptying the box unpicks it.
    const item = radio(`${id}-other`, id, OTHER_CHOICE, "other", type);
    const text = el("input");
    text.type = "text";
    const textWrap = labelled(`${id}-other-text`, OTHER_TEXT, text);
    textWrap.classList.add("other-text");
    text.addEventListener("input", () => {
      item.input.checked = text.value.trim() !== "";
    });
    wrap.append(item.label, textWrap);
    other = { input: item.input, text };
  }
  return {
    element: wrap,
    inputs: () => [...choices.map((c) => c.input), ...(other ? [other.input, other.text] : [])],
    read() {
      const picked: unknown[] = choices.filter((c) => c.input.checked).map((c) => c.choice.value);
      // Own words typed as white space only unpick "Other" (see the input listener) but are
      // still an attempt at them: ask for the words, not for a choice.
      const blankOwnWords = other !== null && other.text.value !== "" && other.text.value.trim() === "";
      if (other?.input.checked || (blankOwnWords && picked.length === 0)) {
        const text = other?.text.value ?? "";
        if (text.trim() === "") return { ok: false, problem: "Type your own answer (it is empty), or pick a choice." };
        picked.push({ other: text });
      }
      if (picked.length === 0) return { ok: false, problem: multi ? "Choose at least one." : "Choose one." };
      return { ok: true, value: multi ? picked : picked[0] };
    },
  };
}

/**
 * A form of several questions answered in one submit. `submit` gets every response; it
 * resolves to problems by tool call id (shown beside their questions) or null when accepted.
 */
export function renderQuestionForm(
  questions: Question[],
  submitLabel: string,
  submit: (responses: Response[]) => Promise<Record<string, string> | null>,
): { element: HTMLFormElement; focus(): void; showProblems(problems: Record<string, string>): void } {
  const form = el("form", "questions");
  form.noValidate = true;
  const heading = el("h3", undefined, questions.length === 1 ? "The agent asks" : `The agent asks ${questions.length} questions`);
  heading.id = uid("qh");
  form.setAttribute("aria-labelledby", heading.id);
  form.append(heading);
  const rendered = questions.map((question) => {
    const r = renderQuestion(question);
    form.append(r.element);
    return r;
  });
  const button = el("button", undefined, submitLabel);
  button.type = "submit";
  form.append(button);
  const showProblems = (problems: Record<string, string>) => {
    let first: RenderedQuestion | null = null;
    for (const r of rendered) {
      const problem = problems[r.question.toolCallId] ?? null;
      r.showProblem(problem);
      if (problem && !first) first = r;
    }
    (first as RenderedQuestion | null)?.focus();
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const responses: Response[] = [];
    const problems: Record<string, string> = {};
    for (const r of rendered) {
      const read = r.read();
      if (read.ok) responses.push(read.response);
      else problems[r.question.toolCallId] = read.problem;
    }
    showProblems(problems);
    if (Object.keys(problems).length > 0) return;
    button.disabled = true;
    try {
      const rejected = await submit(responses);
      if (rejected) showProblems(rejected);
    } finally {
      button.disabled = false;
    }
  });
  return { element: form, focus: () => rendered[0]?.focus(), showProblems };
}
