// What this tab holds: the page's state in memory, one object every module shares (so a turn,
// a sign-in and the conversation list see the same token and open conversation), and the keys
// of what it keeps across reloads.

/** Token mode: the bearer token pasted into the sign-in form. */
export const TOKEN_KEY = "parley.token";

// With an OpenID provider: this tab's tokens ({access_token, id_token, refresh_token,
// issued_at, expires_at}), the sign-in under way ({state, verifier, hash}), the question a
// refused turn left in the message box, and that the person signed out. All in sessionStorage:
// this tab only, gone when it closes, never a cookie and never localStorage.
export const SESSION_KEY = "parley.session";
export const PENDING_KEY = "parley.sign-in";
export const DRAFT_KEY = "parley.draft";
export const SIGNED_OUT_KEY = "parley.signed-out";

// The picker's last choice (its label), kept across reloads for a new conversation.
export const CONTEXT_KEY = "parley.context";

/** The page's state in memory, shared by every module. */
export const state = {
  info: null,
  token: null, // the bearer token every API call carries
  session: null, // with an OpenID provider: this tab's tokens (SESSION_KEY)
  refreshing: null, // the refresh under way, which every caller waits for
  refreshTimer: null,
  conversation: null, // the open conversation's id, null for a new one
  cursor: null,
  abort: null,
  hold: null, // stops the wait a busy refusal put on Send (composer.js), while it runs
  readRetry: new Map(), // a refused read's timer, by what it reads
};
