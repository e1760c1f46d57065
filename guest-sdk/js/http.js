// Outbound HTTP over `wasi:http` for JavaScript handlers (componentize-js
// 0.23), with the same semantics as the Rust and Python SDKs:
//
//   import { http, HttpError } from "./http.js";
//   const page = http.get("https://example.com/");   // synchronous
//   page.status, page.header("content-type"), page.text(), page.json()
//
// - The host checks every request against the handler's allow-list
//   (`capabilities.http`) before any connection is made; a refused request
//   throws `HttpError` with `kind === "denied"` (and leaves a line in the
//   job's log). The guest cannot see or widen the list.
// - Redirects (301, 302, 303, 307, 308) are followed here, up to
//   `maxRedirects` (default 5). Each hop is a new request, checked by the
//   host again: a redirect off the list ends in `kind === "denied"`.
// - Response bodies are capped by the host (`limits.max_http_body`); a longer
//   one throws `kind === "body-too-large"`.
// - The job's deadline applies: a request still waiting when it passes is
//   cut off with the job.
//
// This module imports `wasi:http` itself (StarlingMonkey's `fetch` reports
// every failure as a bare `NetworkError`, so a refusal could not be told
// apart). Build a handler that uses it against the `handler-http` world,
// with StarlingMonkey's own HTTP off:
// `componentize-js handler.js --wit wit -n handler-http -d http fetch-event -o handler.wasm`.

import { handle as sendRequest } from "wasi:http/outgoing-handler@0.2.12";
import {
  Fields,
  OutgoingBody,
  OutgoingRequest,
  httpErrorCode,
} from "wasi:http/types@0.2.12";

/**
 * Why a request failed. `kind` is one of `invalid-url`, `denied`,
 * `too-many-redirects`, `body-too-large`, `timeout`, `failed`; `url` is the
 * URL of the request that failed.
 */
export class HttpError extends Error {
  constructor(kind, message, url) {
    super(message);
    this.name = "HttpError";
    this.kind = kind;
    this.url = url;
  }
}

/** A received response; `body` is a Uint8Array, `url` the final URL. */
export class HttpResponse {
  constructor(status, headers, body, url) {
    this.status = status;
    /** `[name, value]` pairs, names lowercase, values decoded as Latin-1. */
    this.headers = headers;
    this.body = body;
    this.url = url;
  }
  /** True for a 2xx status. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }
  /** The first value of header `name` (case-insensitive). */
  header(name) {
    const n = name.toLowerCase();
    const found = this.headers.find(([k]) => k === n);
    return found ? found[1] : undefined;
  }
  /** The body decoded as UTF-8. */
  text() {
    return new TextDecoder().decode(this.body);
  }
  /** The body parsed as JSON. */
  json() {
    return JSON.parse(this.text());
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const TIMEOUTS = new Set([
  "connection-timeout",
  "connection-read-timeout",
  "connection-write-timeout",
  "HTTP-response-timeout",
  "DNS-timeout",
]);
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]);
const encoder = new TextEncoder();

/** The `wasi:http` error code a thrown host error carries, if any. */
const payloadOf = (e) =>
  e && Object.prototype.hasOwnProperty.call(e, "payload") ? e.payload : undefined;

function fromCode(code, url) {
  const tag = code && code.tag;
  if (tag === "HTTP-request-denied") {
    return new HttpError(
      "denied",
      `request to ${url} refused by the host: its origin is not in the handler's capabilities.http allow-list`,
      url,
    );
  }
  if (tag === "HTTP-response-body-size") {
    return new HttpError(
      "body-too-large",
      "the response body is larger than the host allows (limits.max_http_body)",
      url,
    );
  }
  if (TIMEOUTS.has(tag)) {
    return new HttpError("timeout", `the request to ${url} timed out`, url);
  }
  return new HttpError("failed", `HTTP request to ${url} failed: ${tag ?? String(code)}`, url);
}

function parseUrl(text, base) {
  let url;
  try {
    url = base === undefined ? new URL(text) : new URL(text, base);
  } catch (e) {
    throw new HttpError("invalid-url", `invalid URL \`${text}\`: ${e.message}`, text);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new HttpError("invalid-url", `invalid URL \`${text}\`: the scheme is not http or https`, text);
  }
  if (url.username || url.password || !url.host) {
    throw new HttpError("invalid-url", `invalid URL \`${text}\`: no host (or user info)`, text);
  }
  return url;
}

const latin1 = (bytes) => Array.from(bytes, (b) => String.fromCharCode(b)).join("");

const dispose = (resource) => resource && resource[Symbol.dispose]();

function writeBody(outgoing, body, url) {
  const stream = outgoing.write();
  try {
    for (let i = 0; i < body.length; i += 4096) {
      stream.blockingWriteAndFlush(body.subarray(i, i + 4096));
    }
  } catch (e) {
    throw new HttpError("failed", `writing the request body to ${url} failed`, url);
  } finally {
    dispose(stream);
  }
}

function readBody(incoming, url) {
  const stream = incoming.stream();
  const chunks = [];
  let total = 0;
  try {
    for (;;) {
      let chunk;
      try {
        chunk = stream.blockingRead(65536n);
      } catch (e) {
        const p = payloadOf(e);
        if (p && p.tag === "closed") break;
        if (p && p.tag === "last-operation-failed") {
          const code = httpErrorCode(p.val);
          if (code !== undefined) throw fromCode(code, url);
          const text = p.val.toDebugString();
          if (/body size/i.test(text)) throw fromCode({ tag: "HTTP-response-body-size" }, url);
          throw new HttpError("failed", `reading the response from ${url} failed: ${text}`, url);
        }
        throw e;
      }
      chunks.push(chunk);
      total += chunk.length;
    }
  } finally {
    dispose(stream);
  }
  const body = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    body.set(c, at);
    at += c.length;
  }
  return body;
}

function sendOnce(method, url, headers, body) {
  const fields = new Fields();
  for (const [name, value] of headers) {
    try {
      fields.append(name, encoder.encode(String(value)));
    } catch (e) {
      throw new HttpError("failed", `header \`${name}\` refused: ${payloadOf(e)?.tag ?? e}`, url.href);
    }
  }
  const request = new OutgoingRequest(fields);
  try {
    request.setMethod(METHODS.has(method) ? { tag: method.toLowerCase() } : { tag: "other", val: method });
    request.setScheme({ tag: url.protocol === "https:" ? "HTTPS" : "HTTP" });
    request.setAuthority(url.host);
    request.setPathWithQuery(`${url.pathname || "/"}${url.search}`);
  } catch (e) {
    throw new HttpError("invalid-url", `invalid URL \`${url.href}\``, url.href);
  }
  const outgoing = request.body();
  let pending;
  try {
    pending = sendRequest(request, undefined);
  } catch (e) {
    dispose(outgoing);
    throw fromCode(payloadOf(e), url.href);
  }
  try {
    if (body && body.length > 0) writeBody(outgoing, body, url.href);
    OutgoingBody.finish(outgoing, undefined);
  } catch (e) {
    dispose(pending);
    if (e instanceof HttpError) throw e;
    throw fromCode(payloadOf(e), url.href);
  }
  let got;
  try {
    const ready = pending.subscribe();
    ready.block();
    dispose(ready);
    got = pending.get();
  } finally {
    dispose(pending);
  }
  if (got === undefined || got.tag === "err") {
    throw new HttpError("failed", `the response from ${url.href} was not available`, url.href);
  }
  const inner = got.val;
  if (inner.tag === "err") throw fromCode(inner.val, url.href);
  const response = inner.val;
  try {
    const status = response.status();
    const fieldsIn = response.headers();
    const pairs = fieldsIn.entries().map(([n, v]) => [n.toLowerCase(), latin1(v)]);
    dispose(fieldsIn);
    const incoming = response.consume();
    let bytes;
    try {
      bytes = readBody(incoming, url.href);
    } finally {
      dispose(incoming);
    }
    return new HttpResponse(status, pairs, bytes, url.href);
  } finally {
    dispose(response);
  }
}

/** Outbound HTTP; every method is synchronous and throws `HttpError`. */
export const http = {
  /** `GET url`, following redirects. */
  get(url, opts = {}) {
    return http.request("GET", url, opts);
  },
  /** `POST url` with `body` (string or Uint8Array), or `opts.json` (encoded). */
  post(url, body, opts = {}) {
    return http.request("POST", url, { ...opts, body });
  },
  /**
   * Sends `method url` and returns the final response, following up to
   * `opts.maxRedirects` redirects (default 5; 0 returns the redirect itself).
   * @param {{headers?: Record<string,string>, body?: string|Uint8Array, json?: any, maxRedirects?: number}} [opts]
   * @returns {HttpResponse}
   */
  request(method, url, opts = {}) {
    method = method.toUpperCase();
    const headers = Object.entries(opts.headers ?? {});
    let body = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      if (!headers.some(([k]) => k.toLowerCase() === "content-type")) {
        headers.push(["content-type", "application/json"]);
      }
    }
    if (typeof body === "string") body = encoder.encode(body);
    const maxRedirects = opts.maxRedirects ?? 5;
    let current = parseUrl(url);
    for (let hops = 0; ; hops++) {
      const response = sendOnce(method, current, headers, body);
      const location = REDIRECTS.has(response.status) ? response.header("location") : undefined;
      if (location === undefined || maxRedirects === 0) {
        return response;
      }
      if (hops >= maxRedirects) {
        throw new HttpError("too-many-redirects", `too many redirects (last to ${location})`, location);
      }
      current = parseUrl(location, current);
      if (response.status === 303 || (response.status <= 302 && method === "POST")) {
        method = "GET";
        body = undefined;
      }
    }
  },
};
