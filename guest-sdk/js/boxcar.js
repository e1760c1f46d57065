// boxcar guest SDK for JavaScript handlers (componentize-js 0.23).
//
// A handler module exports `handle`, the `boxcar:handler/handler` world's
// export, made with `handler(fn)`:
//
//   import { handler, info, Retry, Terminal } from "./boxcar.js";
//   export const handle = handler((job) => {
//     info(`job ${job.id}, attempt ${job.attempt}`);
//     return { echoed: job.payload };       // stored as the JSON result
//   });
//
// - `job.payload` is the parsed JSON object; the returned value is
//   JSON-stringified (`undefined`/`null` store no result).
// - `throw new Retry(msg, { retryAfterMs, consumesAttempt })` retries later;
//   `throw new Terminal(msg, { code, details })` fails now.
// - Any other exception is a crash: retryable, consuming an attempt, with the
//   exception's name and message.
// - Host errors (enqueue or progress refused) are thrown as `HostError`.
// - Outbound HTTP: `http.js` beside this file (its own module, because it
//   imports `wasi:http`: build such a handler with `-n handler-http`).
//
// Build with componentize-js, disabling the WASI features the host does not
// grant by default: `componentize-js handler.js --wit wit -n handler
// -d http fetch-event -o handler.wasm`.

import {
  log as hostLog,
  progress as hostProgress,
  cancelled as hostCancelled,
  enqueue as hostEnqueue,
  children as hostChildren,
} from "boxcar:handler/host@0.1.0";

/** Try again later. */
export class Retry extends Error {
  /**
   * @param {string} message stored as the job's last error
   * @param {{retryAfterMs?: number|bigint, consumesAttempt?: boolean}} [opts]
   */
  constructor(message, opts = {}) {
    super(message);
    this.name = "Retry";
    this.retryAfterMs = opts.retryAfterMs ?? undefined;
    this.consumesAttempt = opts.consumesAttempt ?? true;
  }
}

/** Fail now, without retrying. */
export class Terminal extends Error {
  /**
   * @param {string} message stored as the job's last error
   * @param {{code?: string, details?: any}} [opts] `details` is JSON-stringified
   */
  constructor(message, opts = {}) {
    super(message);
    this.name = "Terminal";
    this.code = opts.code ?? undefined;
    this.details = opts.details;
  }
}

/** The host refused a call (`not-allowed`, `limit-reached`, `invalid`, `unavailable`). */
export class HostError extends Error {
  constructor(kind, message) {
    super(`${kind}: ${message}`);
    this.name = "HostError";
    this.kind = kind;
  }
}

function level(l, message) {
  hostLog(l, String(message));
}
export const trace = (message) => level("trace", message);
export const debug = (message) => level("debug", message);
export const info = (message) => level("info", message);
export const warn = (message) => level("warn", message);
export const error = (message) => level("error", message);

function hostCall(f) {
  try {
    return f();
  } catch (e) {
    const p = e && Object.prototype.hasOwnProperty.call(e, "payload") ? e.payload : e;
    if (p && typeof p === "object" && typeof p.tag === "string") {
      throw new HostError(p.tag, String(p.val));
    }
    throw e;
  }
}

/** Report progress: any JSON-serialisable value. */
export function progress(value) {
  hostCall(() => hostProgress(JSON.stringify(value)));
}

/** True once the host wants this run to stop. */
export function cancelled() {
  return hostCancelled();
}

// `option<u64>` crosses as a BigInt; accepts numbers (truncated), bigints, numeric strings.
const u64 = (v) => {
  if (v === undefined || v === null) return undefined;
  if (typeof v === "bigint") return v;
  const n = Math.trunc(Number(v));
  return Number.isFinite(n) && n >= 0 ? BigInt(n) : undefined;
};

/**
 * Enqueue a follow-up job of a type the manifest allows; returns its id.
 * @param {string} jobType
 * @param {object} payload a JSON object
 * @param {{scope?: {type: string, id: string}, dedupeKey?: string, delayMs?: number,
 *          priority?: number, maxAttempts?: number}} [opts]
 */
export function enqueue(jobType, payload, opts = {}) {
  const options = {
    scope: opts.scope ? { scopeType: opts.scope.type, scopeId: opts.scope.id } : undefined,
    dedupeKey: opts.dedupeKey ?? undefined,
    delayMs: u64(opts.delayMs),
    priority: opts.priority ?? undefined,
    maxAttempts: opts.maxAttempts ?? undefined,
  };
  return hostCall(() => hostEnqueue(jobType, JSON.stringify(payload ?? {}), options));
}

/** The children of this job (flows); `result` is parsed JSON. */
export function children() {
  return hostCall(() => hostChildren()).map((c) => ({
    id: c.id,
    jobType: c.jobType,
    status: c.status,
    result: c.result === undefined || c.result === null ? undefined : JSON.parse(c.result),
    error: c.error ?? undefined,
  }));
}

/** The job as a handler sees it. */
export class Job {
  constructor(raw) {
    this.id = raw.id;
    this.jobType = raw.jobType;
    this.payload = JSON.parse(raw.payload);
    this.attempt = raw.attempt;
    this.maxAttempts = raw.maxAttempts;
    this.scope = raw.scope ? { type: raw.scope.scopeType, id: raw.scope.scopeId } : undefined;
    this.scheduleId = raw.scheduleId ?? undefined;
    this.parentId = raw.parentId ?? undefined;
    /** Milliseconds since the Unix epoch, as a Number. */
    this.deadlineMs = Number(raw.deadlineMs);
  }
  /** True on the job's last attempt. */
  get lastAttempt() {
    return this.attempt >= this.maxAttempts;
  }
}

function jobError(e) {
  if (e instanceof Retry) {
    return {
      tag: "retryable",
      val: { message: e.message, retryAfterMs: u64(e.retryAfterMs), consumesAttempt: e.consumesAttempt },
    };
  }
  if (e instanceof Terminal) {
    return {
      tag: "terminal",
      val: {
        message: e.message,
        code: e.code,
        details: e.details === undefined ? undefined : JSON.stringify(e.details),
      },
    };
  }
  // A crash: retryable, consuming an attempt.
  const name = (e && e.name) || typeof e;
  const message = e && e.message !== undefined ? e.message : String(e);
  let text = `${name}: ${message}`;
  if (e && e.stack) {
    error(`uncaught ${text}\n${e.stack}`);
  }
  return { tag: "retryable", val: { message: text, retryAfterMs: undefined, consumesAttempt: true } };
}

function rethrowAsJobError(e) {
  const payload = jobError(e);
  const err = new Error(payload.val.message);
  err.payload = payload;
  throw err;
}

const encodeResult = (value) =>
  value === undefined || value === null ? undefined : JSON.stringify(value);

/**
 * The world's `handle` export, wrapping `fn(job) -> JSON-serialisable | undefined`.
 * `fn` may be `async`: componentize-js runs the event loop until the
 * returned Promise settles, and a rejection is a thrown error.
 */
export function handler(fn) {
  return function handle(raw) {
    let value;
    try {
      value = fn(new Job(raw));
    } catch (e) {
      rethrowAsJobError(e);
    }
    if (value && typeof value.then === "function") {
      return value.then(encodeResult, rethrowAsJobError);
    }
    return encodeResult(value);
  };
}

