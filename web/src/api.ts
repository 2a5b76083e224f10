// The API key (kept in sessionStorage only: gone when the tab closes) and JSON requests to
// askloop serve with it.

const KEY = "askloop.apiKey";

/** The API key of this tab, if one was given. */
export function apiKey(): string | null {
  return sessionStorage.getItem(KEY);
}

/** Keeps `key` for this tab (empty: forgets it). */
export function setApiKey(key: string): void {
  if (key === "") sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, key);
}

/** The Authorization header of the key, if any. */
export function authHeaders(): Record<string, string> {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

let unauthorized: (() => void) | null = null;

/**
 * Calls `listener` whenever the server answers 401 (no key, or a bad one): the page then shows
 * the API key box, which it hides while requests without a key succeed.
 */
export function onUnauthorized(listener: () => void): void {
  unauthorized = listener;
}

/** Tells the listener of [`onUnauthorized`] about a 401. */
export function sawUnauthorized(status: number): void {
  if (status === 401) unauthorized?.();
}

/** An error answer of the server: `{code, message, details?}` and the HTTP status. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
  }
}

/** Sends a request and reads its JSON answer; a non-2xx answer throws an ApiError. */
export async function requestJson<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { ...authHeaders(), Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    sawUnauthorized(response.status);
    const error = (json ?? {}) as { code?: string; message?: string; details?: unknown };
    throw new ApiError(
      response.status,
      error.code ?? "http_error",
      error.message ?? `HTTP ${response.status}`,
      error.details,
    );
  }
  return json as T;
}

/**
 * Calls `onEvent` for every SSE event of `path` until `signal` aborts, reconnecting after a
 * pause when the stream ends or fails (fetch, not EventSource: EventSource cannot send the
 * Authorization header). Calls `onOpen` each time a stream opens, the first time and after
 * each reconnection: what happened while no stream was open was sent to nobody, so the caller
 * reads again what it shows.
 */
export async function followEvents(
  path: string,
  onEvent: (data: string) => void,
  signal: AbortSignal,
  onOpen: () => void = () => {},
): Promise<void> {
  while (!signal.aborted) {
    try {
      const response = await fetch(path, { headers: { ...authHeaders(), Accept: "text/event-stream" }, signal });
      sawUnauthorized(response.status);
      if (response.ok && response.body) {
        onOpen();
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end: number;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = event
              .split("\n")
              .filter((line) => line.startsWith("data:"))
              .map((line) => line.slice(5).trimStart())
              .join("\n");
            if (data !== "") onEvent(data);
          }
        }
      }
    } catch {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}
