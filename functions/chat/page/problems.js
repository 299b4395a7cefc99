// Failures in words: each code the API documents (docs/api.md, "chat errors") as what happened
// and what to do; the code itself stays beside it, small, for whoever is asked for help. A
// budget or rate used up (`quota_exceeded`) says when it resets, on the reader's clock.

import { busyText } from "./busy.js";
import { el } from "./dom.js";

const PROBLEMS = {
  llm_key_missing: "The assistant has no key for its language model. Whoever runs it must set LLM_API_KEY (or point LLM_BASE_URL at a local OpenAI-compatible server); to try it locally without a model, PARLEY_LLM=stub scripts/dev runs it with a scripted stand-in.",
  llm_key_rejected: "The language model refused the assistant's key. Whoever runs it must fix LLM_API_KEY.",
  llm_unavailable: "The language model did not answer. Your question is kept in this conversation: send it again in a moment.",
  llm_rate_limited: "The language model is busy right now. Wait a minute, then send your question again.",
  llm_timeout: "The language model took too long to answer. Send your question again, or ask for less at once.",
  llm_response_too_large: "The language model's answer was too large to accept. Ask for less at once.",
  conversation_busy: "Another reply is still being written in this conversation. Wait for it to finish, then try again.",
  turn_lease_lost: "This reply took too long and was not saved. Send your message again.",
  conversation_not_found: "This conversation no longer exists, or is not yours. Start a new one.",
  database_unavailable: "The assistant cannot reach its database. Try again in a minute.",
  database_pool_exhausted: "The assistant is very busy. Try again in a few seconds.",
  too_many_reads: "Too many of your conversations are loading at once. Try again in a moment.",
  auth_unavailable: "Your sign-in cannot be checked right now. Try again in a minute.",
  unauthorized: "Your sign-in was refused or has expired. Sign in again.",
  message_empty: "The message is empty. Type a question first.",
  message_too_long: "The message is too long. Shorten it and send it again.",
  payload_too_large: "The message is too large to send. Shorten it and send it again.",
  invalid_characters: "The message holds characters that cannot be stored. Remove them and send it again.",
  invalid_context: "The chosen context cannot be sent. Choose another, or None.",
  context_too_large: "The chosen context is too large to send. Choose another, or None.",
  unknown_tool: "A tool this page asked for is not offered any more. Reload the page and try again.",
  invalid_title: "That title cannot be used: give 1 to 200 characters on one line.",
  host_not_allowed: "This server does not answer to the address in your browser. Open the chat at the address you were given.",
  cross_site_request: "The request was refused as coming from another site. Reload the page and try again.",
  quota_exceeded: "You have used your budget of questions for now. Try again later.",
  internal: "Something went wrong inside the assistant. Try again; if it keeps happening, tell whoever runs it, with the code below.",
};

/** A wait until a reset, rounded up: "42 s", "12 min", "3 h 12 min". */
export function untilText(seconds) {
  if (seconds < 60) return `${Math.max(1, Math.ceil(seconds))} s`;
  const minutes = Math.ceil(seconds / 60);
  const hours = Math.floor(minutes / 60);
  if (!hours) return `${minutes} min`;
  return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
}

/** The user's budget or rate used up (`quota_exceeded`), and when it resets: the reset on the
 * reader's own clock (with "tomorrow" when it falls on their next day) and how long until then. */
export function quotaText(problem, now = Date.now()) {
  const quota = problem.quota ?? {};
  const at = quota.resetsAt ?? now + (problem.wait ?? 60) * 1000;
  const left = untilText(Math.max(1, Math.ceil((at - now) / 1000)));
  const reset = new Date(at);
  if (quota.limit === "turns_per_minute") {
    const clock = reset.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return `You have asked too many questions in a minute. You can ask again at ${clock}, in ${left}.`;
  }
  const clock = reset.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const day = reset.toDateString() === new Date(now).toDateString() ? "" : "tomorrow ";
  return `You have used your token budget for today. It resets ${day}at ${clock}, in ${left}.`;
}

/** `{code, message}` from a stored or streamed `"<code>: <message>"`. */
export function fromSummary(summary) {
  const m = /^([a-z][a-z0-9_]*): ([\s\S]*)$/.exec(String(summary));
  return m ? { code: m[1], message: m[2] } : { code: null, message: String(summary) };
}

/** What happened and what to do for `{code, message}`; the server's words when the code is new;
 * for a request refused because the service is busy, that and the wait. */
export function problemText(problem) {
  const { code, message } = problem;
  if (problem.refusal === "quota") return quotaText(problem);
  if (problem.refusal) return busyText(problem);
  return (code && PROBLEMS[code]) || message || "Something went wrong.";
}

export function problemNode(problem) {
  const { code } = problem;
  return el("p", { class: "error", role: "alert" }, problemText(problem),
    code ? el("small", { class: "code" }, ` (${code})`) : null);
}
