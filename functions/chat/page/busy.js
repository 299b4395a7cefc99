// Refused because busy. A request refused because the service is busy or could not run it: 429
// or 503 from any front door (the chat's own JSON errors; a Function URL's throttle, whose body
// is AWS's or not JSON; API Gateway's busy response, template.yaml's PageApiBusyResponse; an HTTP
// API's bare `{"message": ...}`), a front door's own 5xx, 409 `conversation_busy`, or no answer
// at all. The page says so with the wait (`Retry-After`, in seconds or as an HTTP date), puts a
// refused question back in the message box and holds Send until the wait is over (composer.js).
// It never sends a turn again by itself (a turn may write); reads (the conversation list, a
// conversation's messages) it asks for again once the wait is over, at most READ_RETRIES times.

import { $, setStatus } from "./dom.js";
import { state } from "./state.js";

/** The wait when a refusal names none, or names one this page cannot read (a Function URL on
 * another origin exposes only `x-request-id` to it): 10 s, as API Gateway's busy response asks. */
export const BUSY_WAIT_DEFAULT = 10;

/** The longest wait the page tells or holds Send for (5 minutes); a longer `Retry-After` is read
 * as this, and the next refusal says what is left. */
export const BUSY_WAIT_MAX = 300;

/** How many times a refused read is asked again by itself. */
export const READ_RETRIES = 3;

/** `Retry-After` in whole seconds from now: delta-seconds or an HTTP date; null when absent or
 * not one of those. */
export function retryAfterSeconds(value, now = Date.now()) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text);
  // An HTTP date names its month (`Sun, 06 Nov 1994 08:49:37 GMT` and the two obsolete forms);
  // Date.parse alone would read "7.5" as a date too.
  if (!/[a-z]{3}/i.test(text)) return null;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, Math.ceil((at - now) / 1000)) : null;
}

/** The wait to tell and hold for: `Retry-After`'s seconds, else the default, within 1 s and the
 * maximum. */
export function busyWait(retryAfter) {
  const seconds = retryAfter ?? BUSY_WAIT_DEFAULT;
  return Math.min(BUSY_WAIT_MAX, Math.max(1, Math.ceil(seconds)));
}

/** Words of a front door's own body that mean it is refusing because of load. */
const BUSY_WORDS = /busy|unavailable|too many|throttl|rate exceeded|concurrency|slow down/i;

/**
 * Why a failed request is worth sending again after a wait: `"quota"` (429 `quota_exceeded`:
 * the user's daily token budget or question rate is used up, until its `resets_at`), `"busy"` (429, 503, the chat's
 * `conversation_busy`, API Gateway's `busy`, a front door's 5xx saying it is busy),
 * `"unreachable"` (a front door's other 5xx: the function could not be run), else null. A 5xx
 * in the chat's own envelope (`internal`, `llm_*`) is the chat's word and stays as it is.
 * `envelope`: the body was the chat's `{"error": {"code", ...}}`; `said`: a front door's own
 * `message`/`Message`.
 */
export function refusalOf(status, code, envelope, said = "") {
  // The user's own budget or rate, not the service's load: said with when it resets (problems.js).
  if (code === "quota_exceeded") return "quota";
  if (status === 429 || status === 503 || code === "conversation_busy" || code === "busy") return "busy";
  if (status >= 500 && !envelope) return BUSY_WORDS.test(said ?? "") ? "busy" : "unreachable";
  return null;
}

/** A wait in words: "7 s", or minutes from two on. */
export function waitText(seconds) {
  return seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
}

/** Why a request was refused, in the chat's own words for its codes where they say more than
 * "busy" (`{name}`: the assistant's name); `then`: what to add after the wait. */
const BUSY_REASONS = {
  conversation_busy: { why: "another reply is still being written in this conversation", then: ", when it has finished" },
  database_pool_exhausted: { why: "{name} is busy right now (every database connection is in use)" },
  too_many_reads: { why: "too many of your conversations are loading at once" },
  llm_rate_limited: { why: "the language model is busy right now" },
  llm_timeout: { why: "the language model took too long to answer", then: ", or ask for less at once" },
  database_unavailable: { why: "{name} cannot reach its database right now" },
  auth_unavailable: { why: "your sign-in cannot be checked right now" },
};

/** Why `problem` (a refusal) was refused: "Parley is busy right now", or the chat's words. */
export function busyReason({ code, refusal }, name = state.info?.assistant || "Parley") {
  const known = code && BUSY_REASONS[code];
  const why = known ? known.why.replace("{name}", name)
    : refusal === "unreachable" ? `${name} could not be reached right now` : `${name} is busy right now`;
  return why[0].toUpperCase() + why.slice(1);
}

/** What a refused request says: "Parley is busy right now; try again in 7 s", or the chat's
 * own words for its code, with the wait. */
export function busyText(problem, name = state.info?.assistant || "Parley") {
  const after = waitText(problem.wait ?? BUSY_WAIT_DEFAULT);
  if (problem.code === "approval_outcome_unknown") {
    return "The approved call was sent but its answer did not arrive in time, so it may have run; nothing more " +
      `was done. Send the same answer again in ${after}: the call does not run twice.`;
  }
  return `${busyReason(problem, name)}; try again in ${after}${BUSY_REASONS[problem.code]?.then ?? ""}.`;
}

/** Calls `tick(left)` each second from `seconds` down to 1, then `done()`; returns a stop. */
export function countdown(seconds, tick, done) {
  const until = Date.now() + seconds * 1000;
  let last = null;
  const timer = setInterval(step, 200);
  function step() {
    const left = Math.ceil((until - Date.now()) / 1000);
    if (left <= 0) {
      clearInterval(timer);
      done();
    } else if (left !== last) {
      last = left;
      tick(left);
    }
  }
  step();
  return () => clearInterval(timer);
}

/**
 * A read refused because busy (`e`) asked again by `again()` once its wait is over, at most
 * READ_RETRIES times in a row for `key`; the status line says `what` failed and when it is
 * asked again. Returns whether it will be. A read is safe to repeat; a turn never is.
 */
export function readLater(key, e, attempt, what, again) {
  clearTimeout(state.readRetry.get(key));
  state.readRetry.delete(key);
  if (!e.refusal || attempt >= READ_RETRIES) return false;
  setStatus(`${what}: ${busyReason(e)}. Trying again in ${waitText(e.wait)}.`);
  $("status").classList.add("busy");
  state.readRetry.set(key, setTimeout(() => {
    state.readRetry.delete(key);
    again();
  }, e.wait * 1000));
  return true;
}
