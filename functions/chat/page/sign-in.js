// Signing in and out: token mode's form (the token is tried on the API before it is kept), or an
// OpenID provider's authorization code + PKCE (navigation to its login page, the code exchanged
// at its token endpoint, its own sign-out). Once signed in, app.js shows the conversations.

import { $ } from "./dom.js";
import { api } from "./http.js";
import { problemText } from "./problems.js";
import { forgetToken, forgetTokens, freshToken, keepTokens, scheduleRefresh, showProviderScreen, tokenRequest }
  from "./session.js";
import { DRAFT_KEY, PENDING_KEY, SESSION_KEY, SIGNED_OUT_KEY, TOKEN_KEY, state } from "./state.js";

const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

const randomText = (bytes) => b64url(crypto.getRandomValues(new Uint8Array(bytes)));

/** Where the provider sends the browser back: OIDC_REDIRECT_PATH on this origin. */
function redirectUri() {
  return new URL(state.info.sign_in.redirect_path, location.origin).href;
}

/** To the provider's login page, with a fresh state and PKCE verifier kept in this tab. */
export async function startSignIn() {
  const { sign_in: provider } = state.info;
  const verifier = randomText(48);
  const pending = { state: randomText(24), verifier, hash: location.hash };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const url = new URL(provider.authorization_endpoint);
  for (const [name, value] of Object.entries({
    response_type: "code",
    client_id: provider.client_id,
    redirect_uri: redirectUri(),
    scope: provider.scopes,
    state: pending.state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  })) url.searchParams.set(name, value);
  location.assign(url.href);
}

/** Sign-out: the tokens go, then the provider ends its own session and sends the browser back. */
function providerSignOut() {
  const { sign_in: provider } = state.info;
  const idToken = state.session?.id_token;
  forgetTokens();
  sessionStorage.removeItem(DRAFT_KEY);
  state.abort?.abort();
  sessionStorage.setItem(SIGNED_OUT_KEY, "1");
  if (!provider.end_session_endpoint) {
    // The tokens are gone: this only shows the sign-in screen, saying so.
    startWithProvider();
    return;
  }
  const url = new URL(provider.end_session_endpoint);
  url.searchParams.set("client_id", provider.client_id);
  if (provider.end_session_style === "logout_uri") {
    // Amazon Cognito's /logout: client_id and logout_uri, no ID token.
    url.searchParams.set("logout_uri", redirectUri());
  } else {
    if (idToken) url.searchParams.set("id_token_hint", idToken);
    url.searchParams.set("post_logout_redirect_uri", redirectUri());
  }
  location.assign(url.href);
}

/**
 * The provider's answer in the address (`code` or `error`, with `state`): the code exchanged for
 * tokens, the address cleaned. Returns what to tell the person when it failed, else null.
 */
async function finishSignIn(params) {
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? "null");
  sessionStorage.removeItem(PENDING_KEY);
  // The code must not stay in the address (history, bookmarks, a reload sending it twice).
  history.replaceState(null, "", location.pathname + (pending?.hash ?? ""));
  const again = { heading: "Sign in", button: "Sign in again" };
  if (!pending || params.get("state") !== pending.state) {
    return { ...again, problem: "This sign-in answer is not for this tab's request (its state differs). Sign in again." };
  }
  const issuer = params.get("iss");
  if (issuer && issuer !== state.info.sign_in.issuer) {
    return { ...again, problem: `The answer came from ${issuer}, not this service's sign-in provider. Sign in again.` };
  }
  if (params.has("error")) {
    const error = params.get("error");
    const said = params.get("error_description");
    const refused = error === "access_denied" || error === "login_required" || error === "consent_required";
    return {
      heading: refused ? "Sign-in refused" : "Sign-in failed",
      message: refused ? "The sign-in provider did not sign you in, so this page cannot show your conversations." : "",
      problem: `${said || error} (${error})`,
      button: "Try again",
    };
  }
  try {
    keepTokens(await tokenRequest({
      grant_type: "authorization_code",
      code: params.get("code"),
      redirect_uri: redirectUri(),
      code_verifier: pending.verifier,
    }));
  } catch (e) {
    return { ...again, heading: "Sign-in failed", problem: `The sign-in provider did not give this page its tokens: ${e.message}` };
  }
  return null;
}

/** The page's start with an OpenID provider: its answer, this tab's tokens, or its sign-in
 * screen. True when signed in: the conversations are then the caller's to show. */
export async function startWithProvider() {
  const provider = state.info.sign_in;
  if (provider.unavailable) {
    showProviderScreen({
      heading: "Sign-in unavailable",
      message: "This service cannot reach its sign-in provider. Try again in a few minutes; if it keeps happening, tell whoever runs it.",
      problem: provider.unavailable,
      button: "",
    });
    return false;
  }
  const params = new URLSearchParams(location.search);
  if (params.has("state") && (params.has("code") || params.has("error"))) {
    const problem = await finishSignIn(params);
    if (problem) {
      showProviderScreen(problem);
      return false;
    }
  } else {
    try {
      state.session = JSON.parse(sessionStorage.getItem(SESSION_KEY) ?? "null");
    } catch {
      state.session = null;
    }
    state.token = state.session?.access_token ?? null;
  }
  if (!state.session) {
    const out = sessionStorage.getItem(SIGNED_OUT_KEY);
    sessionStorage.removeItem(SIGNED_OUT_KEY);
    showProviderScreen({ message: out ? "You are signed out." : `Sign in with your ${state.info.assistant} account to ask questions.` });
    return false;
  }
  scheduleRefresh();
  try {
    await freshToken();
  } catch {
    return false; // the session-expired screen is up
  }
  return true;
}

/** The Sign out button: the provider's sign-out, or token mode's form again. */
export function signOut(message = "") {
  if (state.info?.sign_in) {
    providerSignOut();
    return;
  }
  forgetToken(message);
}

/** Token mode's form: the token, tried on the API, kept for this tab. True when it was taken:
 * the conversations are then the caller's to show. */
export async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim().replace(/^Bearer\s+/i, "");
  if (!token) return false;
  state.token = token;
  try {
    await api("api/conversations?limit=1");
  } catch (e) {
    state.token = null;
    $("sign-in-error").textContent = e.status === 401 ? `The token was refused: ${e.message}`
      : e.refusal ? problemText(e) : e.message;
    return false;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  return true;
}
