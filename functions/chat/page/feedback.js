// Feedback on a reply: thumbs up or down with an optional comment
// (PUT api/conversations/{id}/messages/{seq}/feedback). A thumb saves at once; pressing the
// pressed one again clears it. A thumbs down opens the comment box (a thumbs up offers it);
// Send saves the comment with the rating. What was given comes back with the conversation, so
// a reload shows it. Failures are said in words under the buttons, and the buttons go back to
// what is saved.

import { el } from "./dom.js";
import { HttpError, api } from "./http.js";
import { problemText } from "./problems.js";

/** What the chat's feedback refusals mean to the person giving it. */
const FEEDBACK_PROBLEMS = {
  not_an_answer: "Feedback goes on the assistant's answers, not on your own messages.",
  message_not_found: "This answer is not stored any more. Reload the conversation.",
};

/** The words of a failed save: the chat's own for a comment it refused (they say the limit). */
function feedbackProblem(e) {
  if (!(e instanceof HttpError)) return `the connection broke off (${e.message}).`;
  if (e.code === "comment_too_long" || e.code === "invalid_comment") return e.message.replaceAll("`", "");
  return FEEDBACK_PROBLEMS[e.code] ?? problemText(e);
}

/**
 * The feedback controls of the assistant message `seq` of conversation `conversationId`,
 * showing `given` (the stored `{rating, comment}`, or null).
 */
export function feedbackControls(conversationId, seq, given) {
  let saved = given?.rating ? { rating: given.rating, comment: given.comment ?? "" } : null;
  // Words, not thumb emoji: those need a font the reader's system may not have, and the
  // words are what a screen reader says anyway.
  const thumb = (rating, label) => el("button", {
    type: "button", class: `thumb thumb-${rating}`, "aria-pressed": "false", "data-rating": rating,
  }, label);
  const up = thumb("up", "Good answer");
  const down = thumb("down", "Bad answer");
  const more = el("button", { type: "button", class: "feedback-more", hidden: true }, "Add a comment");
  const box = el("textarea", { class: "feedback-comment", rows: 3 });
  const boxLabel = el("label", {}, "");
  const id = `feedback-${conversationId}-${seq}`;
  box.id = id;
  boxLabel.htmlFor = id;
  const sendButton = el("button", { type: "submit" }, "Send");
  const form = el("form", { class: "feedback-form", hidden: true }, boxLabel, box, el("div", { class: "feedback-actions" }, sendButton));
  const said = el("p", { class: "feedback-said", role: "status" });
  const node = el("section", { class: "feedback", "aria-label": "Your feedback on this answer" },
    el("div", { class: "thumbs" }, el("span", { class: "feedback-ask" }, "Was this answer useful?"), up, down, more),
    form, said);

  const show = () => {
    up.setAttribute("aria-pressed", String(saved?.rating === "up"));
    down.setAttribute("aria-pressed", String(saved?.rating === "down"));
    more.hidden = !(saved?.rating === "up") || !form.hidden;
    boxLabel.textContent = saved?.rating === "down" ? "What was wrong? (optional)" : "What was good? (optional)";
  };
  const tell = (text, failed = false) => {
    said.textContent = text;
    said.classList.toggle("error", failed);
  };
  const open = (focus) => {
    form.hidden = false;
    show();
    if (focus) box.focus();
  };

  /** PUT the rating (null clears it) with the box's comment; true once saved. */
  const save = async (rating) => {
    for (const b of [up, down, sendButton]) b.disabled = true;
    tell("Saving…");
    try {
      const comment = rating ? box.value.trim() : "";
      const body = { rating };
      if (comment) body.comment = comment;
      const answer = await (await api(
        `api/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(seq)}/feedback`,
        { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) },
      )).json();
      const f = answer.feedback;
      saved = f ? { rating: f.rating, comment: f.comment ?? "" } : null;
      if (!saved) {
        box.value = "";
        form.hidden = true;
      }
      tell(!saved ? "Feedback removed." : saved.comment ? "Thanks: your rating and comment are saved." : "Thanks: your rating is saved.");
      return true;
    } catch (e) {
      tell(`Your feedback was not saved: ${feedbackProblem(e)}`, true);
      return false;
    } finally {
      for (const b of [up, down, sendButton]) b.disabled = false;
      show();
    }
  };

  const press = async (rating) => {
    // The pressed thumb again takes the rating back.
    if (saved?.rating === rating) {
      await save(null);
      return;
    }
    const ok = await save(rating);
    // Down asks what was wrong; up only offers it.
    if (ok && rating === "down") open(true);
  };
  up.addEventListener("click", () => press("up"));
  down.addEventListener("click", () => press("down"));
  more.addEventListener("click", () => open(true));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!saved) {
      tell("Choose Good answer or Bad answer first.", true);
      return;
    }
    await save(saved.rating);
  });
  // Ctrl+Enter (or Cmd+Enter) in the box sends, as in the message box.
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  if (saved?.comment) {
    box.value = saved.comment;
    form.hidden = false;
  }
  show();
  return node;
}
