// Calls of the chat's API, with the caller's token (renewed first when due), and the failure a
// response that is not ok stands for: the chat's error envelope or a front door's own body, and
// whether it was refused because busy. A refused token ends the session here.

import { busyWait, refusalOf, retryAfterSeconds } from "./busy.js";
import { SessionEnded, forgetToken, freshToken, refresh, sessionExpired } from "./session.js";
import { state } from "./state.js";

/** A conversation's id. */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class HttpError extends Error {
  constructor(status, code, message, conversationId = null, { refusal = null, retryAfter = null } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    // A turn that failed after its question was stored names its conversation.
    this.conversationId = conversationId;
    // Refused because busy (`refusalOf`): worth sending again after `wait` seconds. Over the
    // user's budget or rate (`"quota"`) the wait is the limit's own, however long.
    this.refusal = refusal;
    this.wait = refusal === "quota" ? Math.max(1, Math.ceil(retryAfter ?? 1))
      : refusal ? busyWait(retryAfter) : null;
    // With `quota_exceeded`: which limit (`daily_tokens`, `turns_per_minute`) and when it
    // resets (ms since the epoch), from the body.
    this.quota = null;
  }
}

/** The failure a response that is not ok stands for: the chat's `{"error": {"code", "message"}}`
 * (with `conversation_id` beside it after a stored question, `limit` and `resets_at` over a
 * budget or rate), or a front door's own body (AWS's
 * `{"message"}`/`{"Message"}`, text, HTML); whether it is a refusal because busy, and its
 * `Retry-After`. */
export async function httpError(response) {
  let code = "http_error";
  let message = `${response.status} ${response.statusText}`;
  let conversationId = null;
  let envelope = false;
  let said = "";
  let quota = null;
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    if (body?.error && typeof body.error === "object") {
      envelope = true;
      code = body.error.code ?? code;
      message = body.error.message ?? message;
      if (code === "quota_exceeded") {
        const resetsAt = Date.parse(body.resets_at);
        quota = { limit: String(body.limit ?? ""), resetsAt: Number.isFinite(resetsAt) ? resetsAt : null };
      }
    } else if (body && typeof body === "object") {
      // A front door's own JSON: API Gateway's `{"message"}`, Lambda's `{"Message"}`.
      said = String(body.message ?? body.Message ?? "");
    }
    if (typeof body?.conversation_id === "string" && UUID.test(body.conversation_id)) conversationId = body.conversation_id;
  } catch {
    // not JSON (a front door's text or HTML): the status line, and what the text says
    said = text.slice(0, 300);
  }
  const refusal = refusalOf(response.status, code, envelope, said || response.statusText);
  // A front door's refusal has no code of the chat's: none is shown for it.
  if (refusal && !envelope) code = null;
  const error = new HttpError(response.status, code, message, conversationId,
    { refusal, retryAfter: retryAfterSeconds(response.headers.get("retry-after")) });
  error.quota = quota;
  return error;
}

/** A call of this origin's API (relative, so a path prefix in front of the page works too). */
export async function api(path, init = {}) {
  // Signed out of the provider (a session that ended): nothing to call with until signed in.
  if (state.info?.sign_in && !state.session) throw new SessionEnded();
  await freshToken();
  const headers = new Headers(init.headers);
  if (state.token) headers.set("Authorization", `Bearer ${state.token}`);
  let response;
  try {
    response = await fetch(path, { ...init, headers });
  } catch (e) {
    if (init.signal?.aborted) throw e;
    // No answer the page may read: the network, or a refusal without the CORS headers that
    // would let it see the status (a throttled Function URL on another origin may be one).
    throw new HttpError(0, null, `no answer (${e.message})`, null, { refusal: "unreachable" });
  }
  // A token refused early (revoked, or a clock ahead of this one): one refresh, one retry.
  if (response.status === 401 && state.session?.refresh_token && !init.retried) {
    try {
      await refresh();
      return await api(path, { ...init, retried: true });
    } catch (e) {
      if (!(e instanceof SessionEnded)) throw e;
    }
  }
  if (!response.ok) {
    const error = await httpError(response);
    if (response.status === 401 && state.info?.sign_in) sessionExpired();
    else if (response.status === 401 && state.info?.auth === "token") forgetToken(`The token was refused: ${error.message}`);
    throw error;
  }
  return response;
}
