// Answering a call that waits for approval: the answer is a turn (its resumed reply shown like
// any other), another tab's answer is shown as the server stored it, and cards are brought up to
// date from the server after a turn that may have decided them.

import { cards } from "./approval-card.js";
import { openConversation } from "./conversations.js";
import { setStatus } from "./dom.js";
import { api } from "./http.js";
import { problemText } from "./problems.js";
import { state } from "./state.js";
import { runTurn } from "./turn.js";

/** Answers `card`'s call: the approvals request, whose resumed turn shows as a new reply. */
export async function answerApproval(card, approved) {
  if (state.abort || !(card.open || card.again)) return;
  const again = card.again;
  const conversation = state.conversation;
  const reason = card.reason.value.trim();
  const answer = { id: card.id, approved };
  if (!approved && reason) answer.reason = reason;
  card.busy(true, approved ? "Approved: running…" : "Declining…");
  const outcome = await runTurn({ conversation_id: conversation, approvals: [answer] }, {
    settled: (status) => status === "already_decided",
    failed: (e) => e.code === "conversation_busy",
  });
  if (outcome.settled || outcome.busy) {
    // Another tab (or a retry) answered first: what it decided is the answer, and the
    // conversation is drawn again from the server, as a reload would show it.
    await showStoredOutcome(conversation, outcome.busy
      ? "This conversation is busy with an answer from another tab or window. Showing what was decided…"
      : "This call was already answered, in another tab or window. Showing what was decided.");
    return;
  }
  if (outcome.problem) {
    // Not decided (a refusal before the turn began): the card takes an answer again.
    const e = outcome.problem;
    await refreshCards(conversation);
    if (e.code === "approval_outcome_unknown" || (again && e.refusal)) {
      // Approved and sent, its outcome unknown: the same answer, sent again, settles it.
      card.offerAgain(problemText(e), e.wait);
    } else if (card.open && e.refusal) {
      const name = state.info?.assistant || "Parley";
      card.hold(`Not sent: ${problemText(e)}`, e.wait,
        `Not sent, as ${name} ${e.refusal === "busy" ? "was busy" : "could not be reached"}. You can answer again now.`);
    } else if (card.open) {
      card.busy(false, `Not sent: ${problemText(e)}`);
    } else if (e.refusal) {
      setStatus(problemText(e));
    }
    return;
  }
  await refreshCards(conversation);
}

/** The conversation drawn again from the server after another tab's answer, until its turn is
 * stored (a call approved elsewhere may still be running there). */
async function showStoredOutcome(conversation, message) {
  setStatus(message);
  for (let attempt = 0; attempt < 30; attempt++) {
    if (state.conversation !== conversation) return;
    await openConversation(conversation);
    setStatus(message);
    const running = [...cards.values()].some((c) => c.node.dataset.decision === "approved" && c.approval.result == null);
    if (!running) break;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/** The cards of `conversation` updated from GET api/conversations/{id}/messages. */
export async function refreshCards(conversation) {
  if (!conversation || conversation !== state.conversation || !cards.size) return;
  try {
    const body = await (await api(`api/conversations/${encodeURIComponent(conversation)}/messages`)).json();
    if (conversation !== state.conversation) return;
    for (const m of body.messages) for (const a of m.approvals ?? []) cards.get(a.id)?.update(a);
  } catch (e) {
    setStatus(`Could not show how the approval went: ${problemText(e)}`);
  }
}
