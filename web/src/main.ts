// The page: the API key form, the agent picker, and two views (#/chat/AGENT/CHAT, #/inbox).

import { ApiError, apiKey, onUnauthorized, requestJson, setApiKey } from "./api";
import { ChatView } from "./chat";
import { InboxView } from "./inbox";

function byId<T extends HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (!element) throw new Error(`the page has no #${id}`);
  return element as T;
}

function start(): void {
  const statusLine = byId<HTMLParagraphElement>("status");
  const status = (text: string) => {
    statusLine.textContent = text;
  };
  const keyInput = byId<HTMLInputElement>("api-key");
  const agentSelect = byId<HTMLSelectElement>("agent");
  const chatSection = byId<HTMLElement>("chat-view");
  const inboxSection = byId<HTMLElement>("inbox-view");
  const prompt = byId<HTMLTextAreaElement>("prompt");
  const inbox = new InboxView(byId("inbox-list"), byId("inbox-empty"), byId("inbox-count"), status);
  let chat: ChatView | null = null;

  const keyForm = byId<HTMLFormElement>("key-form");
  // The key box shows only when the server asks for a key (a 401) or a key was given.
  keyForm.hidden = !apiKey();
  onUnauthorized(() => {
    if (keyForm.hidden) {
      keyForm.hidden = false;
      status("This server needs an API key: enter it above.");
    }
  });
  keyInput.value = apiKey() ?? "";
  keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey(keyInput.value.trim());
    status(keyInput.value.trim() ? "Key kept for this tab." : "No key.");
    void loadAgents().then(route);
  });
  byId<HTMLButtonElement>("forget-key").addEventListener("click", () => {
    setApiKey("");
    keyInput.value = "";
    status("Key forgotten.");
  });

  async function loadAgents(): Promise<void> {
    try {
      const body = await requestJson<unknown>("GET", "/api/agents");
      const ids = Array.isArray(body) ? body.map((a) => String((a as { id?: string }).id ?? a)) : Object.keys(body as object);
      const current = agentSelect.value;
      agentSelect.replaceChildren(
        ...ids.map((id) => {
          const option = document.createElement("option");
          option.value = id;
          option.textContent = id;
          return option;
        }),
      );
      if (ids.includes(current)) agentSelect.value = current;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return;
      status(`Agents: ${(error as Error).message}`);
    }
  }

  function newChatId(): string {
    return crypto.randomUUID();
  }

  async function route(): Promise<void> {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    const inboxShown = parts[0] === "inbox";
    inboxSection.hidden = !inboxShown;
    chatSection.hidden = inboxShown;
    byId("nav-inbox").toggleAttribute("aria-current", inboxShown);
    byId("nav-chat").toggleAttribute("aria-current", !inboxShown);
    if (inboxShown) {
      byId("nav-inbox").setAttribute("aria-current", "page");
      chat?.unwatch();
      inbox.start();
      return;
    }
    byId("nav-chat").setAttribute("aria-current", "page");
    inbox.stop();
    const agentId = parts[1] || agentSelect.value;
    const chatId = parts[2];
    if (!agentId) return;
    if (!chatId) {
      location.replace(`#/chat/${encodeURIComponent(agentId)}/${newChatId()}`);
      return;
    }
    if (![...agentSelect.options].some((option) => option.value === agentId)) {
      const option = document.createElement("option");
      option.value = agentId;
      option.textContent = agentId;
      agentSelect.append(option);
    }
    if (agentSelect.value !== agentId) agentSelect.value = agentId;
    if (chat && chat.agentId === agentId && chat.chatId === chatId) {
      chat.watch();
      return;
    }
    chat?.unwatch();
    chat = new ChatView(agentId, chatId, byId("messages"), byId("pending"), byId("stop"), status);
    try {
      chat.watch();
      await chat.load();
      await chat.resume();
    } catch (error) {
      status(`Chat: ${(error as Error).message}`);
    }
  }

  agentSelect.addEventListener("change", () => {
    location.hash = `#/chat/${encodeURIComponent(agentSelect.value)}/${newChatId()}`;
  });
  byId<HTMLButtonElement>("new-chat").addEventListener("click", () => {
    location.hash = `#/chat/${encodeURIComponent(agentSelect.value)}/${newChatId()}`;
    prompt.focus();
  });
  byId<HTMLFormElement>("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (!text || !chat || chat.busy) return;
    prompt.value = "";
    void chat.send(text);
  });
  byId<HTMLButtonElement>("stop").addEventListener("click", () => {
    void chat?.stop();
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      byId<HTMLFormElement>("composer").requestSubmit();
    }
  });
  window.addEventListener("hashchange", () => void route());
  void loadAgents().then(route);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
