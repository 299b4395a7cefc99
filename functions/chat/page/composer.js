// The message box: a question sent as a turn (declining the calls still waiting for approval), a
// question refused because busy put back with Send held for the wait (over the user's budget or
// rate: put back, with when it resets), and the example questions that fill the box.

import { cards } from "./approval-card.js";
import { refreshCards } from "./approvals.js";
import { busyText, countdown } from "./busy.js";
import { chosenContext } from "./context.js";
import { userMessage, welcome } from "./conversations.js";
import { $, el, setStatus } from "./dom.js";
import { quotaText } from "./problems.js";
import { SessionEnded } from "./session.js";
import { DRAFT_KEY, state } from "./state.js";
import { runTurn } from "./turn.js";

/** The composer's submit (Send, or Enter): the question as a turn. */
export async function send(event) {
  event?.preventDefault();
  const box = $("message");
  const message = box.value.trim();
  // While a busy refusal's wait runs, Send is off; Enter does nothing either.
  if (!message || state.abort || state.hold) return;
  const context = chosenContext();
  const body = { message };
  if (state.conversation) body.conversation_id = state.conversation;
  if (context) body.context = context;
  $("status").classList.remove("quota");
  const messages = $("messages");
  const asked = userMessage(message, context);
  messages.append(asked);
  welcome();
  box.value = "";
  sessionStorage.removeItem(DRAFT_KEY);
  // The server declines every call still waiting when a new message comes instead of an
  // answer: the cards stop taking answers now and show the stored outcome after the turn.
  const waiting = [...cards.values()].filter((c) => c.open);
  for (const card of waiting) card.busy(true, "Declining: you sent a new message instead…");
  const outcome = await runTurn(body, {
    failed: (e) => {
      if (e.status === 401 || e instanceof SessionEnded) {
        // Signed out mid-turn: the question waits in the box (and across the sign-in) for a retry.
        box.value = message;
        sessionStorage.setItem(DRAFT_KEY, message);
      }
    },
  });
  if (outcome.refused) {
    const e = outcome.problem;
    // Nothing was declined: the waiting cards take an answer again.
    for (const card of waiting) card.update({});
    // Not stored unless the refusal names its conversation: then a reload shows it too.
    if (!e.conversationId) asked.remove();
    welcome();
    // The question back in the box (before anything typed meanwhile), and kept across a reload
    // until the next send.
    box.value = box.value.trim() ? `${message}\n\n${box.value}` : message;
    sessionStorage.setItem(DRAFT_KEY, box.value);
    const back = "Your question is back in the message box.";
    if (e.refusal !== "quota") holdSend(e.wait, `${busyText(e)} ${back}`);
    // Over the question rate: Send waits out the minute. Over the day's budget: the hours are
    // said, not counted down on the button.
    else if (e.quota?.limit === "turns_per_minute") holdSend(e.wait, `${quotaText(e)} ${back}`, "quota");
    else quotaNotice(`${quotaText(e)} ${back}`);
    box.focus();
  }
  if (waiting.length) await refreshCards(outcome.conversationId);
}

/** Over the user's budget or rate: `text` in the status line, marked until the next turn. */
function quotaNotice(text) {
  setStatus(text);
  $("status").classList.add("busy", "quota");
}

/** Send off for `seconds`, counting down on the button, after a busy refusal (or, `kind`
 * "quota", one over the question rate) said `text` in the status line; when the wait is over,
 * the status line says the question can go again. */
function holdSend(seconds, text, kind = "busy") {
  state.hold?.();
  const button = $("send");
  const status = $("status");
  if (kind === "quota") quotaNotice(text);
  else setStatus(text);
  status.classList.add("busy");
  button.disabled = true;
  state.hold = countdown(seconds, (left) => {
    button.textContent = `Send in ${left} s`;
  }, () => {
    state.hold = null;
    button.disabled = false;
    button.textContent = "Send";
    status.classList.remove("quota");
    if (!state.abort) setStatus("You can send your question again now.");
  });
}

export function setUpExamples() {
  const examples = state.info.examples ?? [];
  $("examples").replaceChildren(...examples.map((question) => {
    const button = el("button", { type: "button", class: "example" }, question);
    button.addEventListener("click", () => {
      $("message").value = question;
      $("message").focus();
    });
    return el("li", {}, button);
  }));
  $("examples-box").hidden = !examples.length;
}
