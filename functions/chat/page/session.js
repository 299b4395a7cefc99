// Who the page calls the API as: token mode's pasted token, or with an OpenID provider this tab's
// tokens (kept in sessionStorage, renewed before they expire, one refresh at a time), and the
// sign-in screens shown when there are none or they end. Signing in and out is sign-in.js's.

import { $ } from "./dom.js";
import { SESSION_KEY, TOKEN_KEY, state } from "./state.js";

/** A session that can no longer be renewed: the person must sign in again. */
export class SessionEnded extends Error {
  constructor(message = "Your session has ended.") {
    super(message);
    this.status = 401;
    this.code = "session_ended";
    this.conversationId = null;
  }
}

/** The provider's sign-in screen of this page: `heading`, what happened, and one button. */
export function showProviderScreen({ heading = "Sign in", message = "", problem = "", button = "Sign in" } = {}) {
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("sidebar-toggle").hidden = true;
  $("sign-in-form").hidden = true;
  $("sign-in").hidden = false;
  $("provider-sign-in").hidden = false;
  $("sign-in-title").textContent = heading;
  $("provider-message").textContent = message;
  $("provider-problem").textContent = problem;
  $("provider-start").textContent = button;
  $("provider-start").hidden = !button;
  if (button) $("provider-start").focus();
}

/** A POST of `fields` to the token endpoint; its JSON, or an Error saying what it answered. */
export async function tokenRequest(fields) {
  const response = await fetch(state.info.sign_in.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", Accept: "application/json" },
    body: new URLSearchParams({ client_id: state.info.sign_in.client_id, ...fields }),
  });
  let body = {};
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says enough
  }
  if (!response.ok || typeof body.access_token !== "string") {
    const error = new Error(body.error_description || body.error || `HTTP ${response.status}`);
    error.oauth = body.error ?? null;
    throw error;
  }
  return body;
}

/** The tokens of a token response (a refresh may leave out the ID and refresh tokens). */
export function keepTokens(body, previous = null) {
  const now = Date.now();
  state.session = {
    access_token: body.access_token,
    id_token: body.id_token ?? previous?.id_token ?? null,
    refresh_token: body.refresh_token ?? previous?.refresh_token ?? null,
    issued_at: now,
    expires_at: Number.isFinite(body.expires_in) ? now + body.expires_in * 1000 : null,
  };
  state.token = state.session.access_token;
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(state.session));
  scheduleRefresh();
}

export function forgetTokens() {
  clearTimeout(state.refreshTimer);
  state.session = null;
  state.token = null;
  sessionStorage.removeItem(SESSION_KEY);
}

/** When to renew: a quarter of the token's life before it ends, at most a minute before. */
function renewAt(session) {
  const life = session.expires_at - session.issued_at;
  return session.expires_at - Math.min(60_000, life / 4);
}

export function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  if (!state.session?.expires_at) return;
  state.refreshTimer = setTimeout(() => freshToken().catch(() => {}), Math.max(0, renewAt(state.session) - Date.now()));
}

/** A new access token from the refresh token; one at a time, whoever asks. */
export function refresh() {
  state.refreshing ??= (async () => {
    const session = state.session;
    if (!session?.refresh_token) throw new SessionEnded();
    try {
      keepTokens(await tokenRequest({ grant_type: "refresh_token", refresh_token: session.refresh_token }), session);
    } catch (e) {
      // The provider refused the refresh token (revoked, expired, signed out elsewhere).
      if (e.oauth) throw new SessionEnded();
      throw e;
    }
  })().finally(() => {
    state.refreshing = null;
  });
  return state.refreshing;
}

/** An access token that is not about to expire: renewed first when it is due. */
export async function freshToken() {
  const session = state.session;
  if (!session?.expires_at || Date.now() < renewAt(session)) return;
  try {
    await refresh();
  } catch (e) {
    // A token still good is used to its end, whether the provider is unreachable or refused
    // to renew it (then it is not asked again); after that, the session has ended.
    if (e instanceof SessionEnded && state.session === session) session.refresh_token = null;
    if (Date.now() < session.expires_at) return;
    sessionExpired();
    throw e instanceof SessionEnded ? e : new SessionEnded();
  }
}

/** The session ended (a refused token or refresh): the sign-in-again screen. A turn under way
 * is not stopped here: it failed already, and keeps its question for after the sign-in. */
export function sessionExpired() {
  forgetTokens();
  showProviderScreen({
    heading: "Session expired",
    message: "Your session has ended. Sign in again to go on; a question you were sending is kept in the message box.",
    button: "Sign in again",
  });
}

export function showSignIn(message = "") {
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("sidebar-toggle").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message;
  $("token").focus();
}

/** Token mode: the token goes (refused, or signed out) and the form asks for one again. */
export function forgetToken(message = "") {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.abort?.abort();
  showSignIn(message);
}
