import { AgentRunnerError, errorFromResponse, unreachableError } from "./errors.js";

/** What every request needs: where the server is, how to reach it, who asks. */
export interface Transport {
  /** The server's URL, without a trailing `/`. */
  baseUrl: string;
  token: string | undefined;
  fetch: typeof fetch;
}

/** A request's parts beyond its method and path. */
export interface RequestParts {
  /** Query parameters; `undefined` ones are left out. */
  query?: Record<string, string | number | boolean | undefined>;
  /** A JSON body. */
  body?: unknown;
  /** A body of bytes, sent as they are with their `Content-Type` (instead of `body`). */
  bytes?: { data: Uint8Array | ArrayBuffer | Blob; contentType: string };
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}

/**
 * Sends a request and answers its 2xx response. A non-2xx answer throws an
 * {@link AgentRunnerError} read from its body; a `fetch` that fails before
 * an answer throws one with code `unreachable`; an abort rejects with the
 * signal's reason.
 */
export async function send(
  transport: Transport,
  method: string,
  path: string,
  parts: RequestParts = {},
): Promise<Response> {
  const headers = new Headers(parts.headers);
  if (transport.token !== undefined) headers.set("authorization", `Bearer ${transport.token}`);
  const init: RequestInit = { method, headers };
  if (parts.body !== undefined) {
    headers.set("content-type", "application/json");
    init.body = JSON.stringify(parts.body);
  } else if (parts.bytes !== undefined) {
    headers.set("content-type", parts.bytes.contentType);
    // Any Uint8Array: `BodyInit` names only those over an `ArrayBuffer`.
    init.body = parts.bytes.data as BodyInit;
  }
  if (parts.signal !== undefined) init.signal = parts.signal;
  let response: Response;
  try {
    response = await transport.fetch(url(transport.baseUrl, path, parts.query), init);
  } catch (error) {
    if (parts.signal?.aborted) throw parts.signal.reason;
    throw unreachableError(transport.baseUrl, error);
  }
  if (!response.ok) throw await errorFromResponse(response);
  return response;
}

/** Sends a request and answers its JSON body. */
export async function sendJson<T>(
  transport: Transport,
  method: string,
  path: string,
  parts: RequestParts = {},
): Promise<T> {
  const response = await send(transport, method, path, parts);
  const text = await whole(response, (body) => body.text(), method, path, parts.signal);
  try {
    return JSON.parse(text) as T;
  } catch (error) {
    throw new AgentRunnerError({
      code: "invalid_response",
      message: `${method} ${path} answered ${response.status} with a body that is not JSON`,
      status: response.status,
      cause: error,
    });
  }
}

/** Sends a request and answers its body as text (UTF-8). */
export async function sendText(
  transport: Transport,
  method: string,
  path: string,
  parts: RequestParts = {},
): Promise<string> {
  const response = await send(transport, method, path, parts);
  return whole(response, (body) => body.text(), method, path, parts.signal);
}

/** Sends a request and answers its body's bytes. */
export async function sendBytes(
  transport: Transport,
  method: string,
  path: string,
  parts: RequestParts = {},
): Promise<Uint8Array> {
  const response = await send(transport, method, path, parts);
  const buffer = await whole(response, (body) => body.arrayBuffer(), method, path, parts.signal);
  return new Uint8Array(buffer);
}

/**
 * The whole body of `response`, as `read` reads it. A connection that breaks
 * meanwhile throws an {@link AgentRunnerError} with code `connection_lost`;
 * an abort rejects with the signal's reason.
 */
async function whole<T>(
  response: Response,
  read: (response: Response) => Promise<T>,
  method: string,
  path: string,
  signal: AbortSignal | undefined,
): Promise<T> {
  try {
    return await read(response);
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    throw new AgentRunnerError({
      code: "connection_lost",
      message: `the connection broke while ${method} ${path} was answered`,
      status: response.status,
      cause: error,
    });
  }
}

function url(baseUrl: string, path: string, query: RequestParts["query"]): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined) search.set(name, String(value));
  }
  const text = search.toString();
  return `${baseUrl}${path}${text ? `?${text}` : ""}`;
}
