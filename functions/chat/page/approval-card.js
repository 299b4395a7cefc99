// A tool call waiting for the user's approval, as a card. A call the server holds back (a
// destructive tool, or one marked `approval = "always"`) is a card in the reply that made it:
// what would run, with which arguments, until when it may be approved, and Approve / Deny. The
// card's outcome always comes from the server (the answer's turn, then
// GET api/conversations/{id}/messages), so a reload or a second tab shows the same. An answer
// leaves the card as an `approval-answer` event, which approvals.js sends.

import { countdown } from "./busy.js";
import { el } from "./dom.js";

/** The cards on the page by approval id; emptied whenever the messages are drawn again. */
export const cards = new Map();

/** A date and time as this browser writes them, to the minute. */
const when = (iso) => new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });

/** A value of a call's arguments as text: strings as they are, anything else as JSON. */
const argumentText = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

export class ApprovalCard {
  /** `approval`: a pending approval (`{id, tool, server, arguments, call_id, expires_at, why,
   * description?, title?}`), or the stored one of a message (the same with `decision`,
   * `reason`, `result`, ...). A card made from a stream's `tool-approval-request` has only the
   * call until the turn's `pendingApprovals` arrive: [`update`] fills in the rest. */
  constructor(approval) {
    this.id = approval.id;
    this.approval = approval;
    const titleId = `approval-title-${approval.id}`;
    const args = approval.arguments && typeof approval.arguments === "object" && !Array.isArray(approval.arguments)
      ? Object.entries(approval.arguments) : [["(arguments)", approval.arguments]];
    this.approve = el("button", { type: "button", class: "primary approve" }, "Approve");
    this.deny = el("button", { type: "button", class: "deny" }, "Deny");
    this.reason = el("input", { type: "text", class: "reason", id: `approval-reason-${approval.id}`,
      autocomplete: "off", placeholder: "e.g. keep it for now" });
    this.outcome = el("p", { class: "outcome", role: "status" });
    this.expires = el("p", { class: "expires" });
    this.about = el("p", { class: "about", hidden: true });
    this.change = el("p", { class: "change" });
    this.controls = el("div", { class: "approval-controls" },
      el("div", { class: "approval-buttons" }, this.approve, this.deny),
      el("label", { for: this.reason.id, class: "reason-label" }, "Reason, if you deny (optional)"), this.reason);
    this.node = el("section", {
      class: "approval", tabindex: -1, "aria-labelledby": titleId,
      "data-approval-id": approval.id, "data-tool": approval.tool, "data-decision": "pending",
    },
    el("h4", { id: titleId }, this.ask = el("span", { class: "ask" }, "Approve this action? "),
      el("span", { class: "tool-name" }, approval.tool),
      approval.server ? el("small", { class: "server" }, ` (${approval.server})`) : null),
    this.about, this.change,
    el("div", { class: "table-wrap" }, el("table", { class: "approval-args", "aria-label": "Arguments" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Argument"), el("th", { scope: "col" }, "Value"))),
      el("tbody", {}, ...args.map(([name, value]) => el("tr", {},
        el("th", { scope: "row" }, name), el("td", {}, el("span", { class: "value" }, argumentText(value)))))))),
    this.expires, this.controls, this.outcome);
    this.approve.addEventListener("click", () => this.answer(true));
    this.deny.addEventListener("click", () => this.answer(false));
    this.reason.addEventListener("keydown", (event) => {
      // Enter in the reason field denies: the field is only for a denial.
      if (event.key === "Enter") {
        event.preventDefault();
        this.answer(false);
      }
    });
    cards.set(approval.id, this);
    this.update(approval);
  }

  /** The user's answer, as an `approval-answer` event from the card (approvals.js sends it): the
   * card knows nothing of turns, so the module graph keeps pointing down. */
  answer(approved) {
    this.node.dispatchEvent(new CustomEvent("approval-answer", { bubbles: true, detail: { card: this, approved } }));
  }

  /** Still waiting for an answer here (not decided, not past its time). */
  get open() {
    return this.node.dataset.decision === "pending";
  }

  /** Buttons off while an answer is on its way (or a new message is declining the call). */
  busy(on, text = "") {
    this.stopHold?.();
    for (const control of [this.approve, this.deny, this.reason]) control.disabled = on;
    this.node.setAttribute("aria-busy", String(on));
    if (text) this.outcome.textContent = text;
  }

  /** An answer refused because the service is busy (`text` says so): the buttons come back when
   * the wait of `seconds` is over, the Approve button counting down, and `then` is said. */
  hold(text, seconds, then = "You can answer again now.") {
    this.busy(true, text);
    this.node.setAttribute("aria-busy", "false");
    const label = this.approve.textContent;
    const stop = countdown(seconds, (left) => {
      this.approve.textContent = `${label} (${left} s)`;
    }, () => {
      this.stopHold = null;
      this.approve.textContent = label;
      for (const control of [this.approve, this.deny, this.reason]) control.disabled = false;
      this.outcome.textContent = then;
    });
    this.stopHold = () => {
      stop();
      this.stopHold = null;
      this.approve.textContent = label;
    };
  }

  /** An approved call whose outcome did not arrive (`approval_outcome_unknown`): the same
   * answer, sent again, settles it without running it twice. Only Approve is offered. */
  offerAgain(text, seconds) {
    this.again = true;
    this.controls.hidden = false;
    for (const node of this.controls.querySelectorAll(".deny, .reason, .reason-label")) node.hidden = true;
    this.approve.textContent = "Send the approval again";
    this.hold(text, seconds, "Its outcome is still unknown: send the same answer again now. The call does not run twice.");
  }

  /** What the tool does (its title and description, as its server lists them) and what
   * approving it will change. */
  showAbout(a) {
    const title = typeof a.title === "string" && a.title.trim() ? a.title.trim() : "";
    const description = typeof a.description === "string" ? a.description.trim() : "";
    this.about.replaceChildren(...[
      title ? el("strong", { class: "title" }, title) : null,
      title && description ? ": " : null,
      description || null,
    ].filter((part) => part !== null));
    this.about.hidden = !title && !description;
    this.change.replaceChildren(...changeText(a));
  }

  /** Shows where the call stands: `approval` as the server last told it. */
  update(approval) {
    this.approval = { ...this.approval, ...approval };
    const a = this.approval;
    this.stopHold?.();
    this.again = false;
    this.approve.textContent = "Approve";
    for (const node of this.controls.querySelectorAll(".deny, .reason, .reason-label")) node.hidden = false;
    this.showAbout(a);
    clearTimeout(this.timer);
    let decision = a.decision ?? "pending";
    const expiresAt = Date.parse(a.expires_at);
    // Past its time, nothing can approve it any more: the server decides it expired when
    // answered, and a new message declines it. Shown as expired now rather than inviting a
    // click that cannot run the call.
    if (decision === "pending" && expiresAt <= Date.now()) decision = "expired";
    this.node.dataset.decision = decision;
    this.node.classList.toggle("decided", decision !== "pending");
    this.controls.hidden = decision !== "pending";
    this.ask.textContent = decision === "pending" ? "Approve this action? " : "You were asked to approve ";
    this.busy(false);
    if (decision === "pending") {
      this.expires.hidden = !Number.isFinite(expiresAt);
      this.expires.replaceChildren("Waiting for your answer until ",
        el("time", { datetime: a.expires_at }, Number.isFinite(expiresAt) ? when(a.expires_at) : ""),
        ". Nothing runs until you approve.");
      this.outcome.textContent = "";
      if (Number.isFinite(expiresAt)) {
        // setTimeout takes at most 2^31-1 ms; APPROVAL_TTL_MS is at most a day.
        this.timer = setTimeout(() => this.update({}), Math.min(expiresAt - Date.now() + 50, 2 ** 31 - 1));
      }
      return;
    }
    this.expires.hidden = true;
    const at = a.decided_at ? ` (${when(a.decided_at)})` : "";
    let text;
    if (decision === "approved") {
      if (a.result === undefined || a.result === null) text = `Approved${at}: running…`;
      else if (a.result_is_error) text = `Approved${at}, but it failed: ${argumentText(a.result)}`;
      else text = `Approved${at} and done.`;
    } else if (decision === "denied") {
      text = `Declined${at}: not run.${a.reason ? ` Reason: ${a.reason}` : ""}`;
    } else {
      text = "Expired: not run, as nobody answered in time.";
    }
    this.node.dataset.outcome = decision === "approved" && a.result != null && !a.result_is_error ? "done" : decision;
    this.outcome.textContent = text;
  }
}

/** What each `why` a waiting call comes with means, in the user's words. */
const WHY_TEXT = {
  destructive: "This deletes or overwrites data.",
  always: "This tool always asks first (it may send, spend or change something outside this chat).",
  writes: "This changes data.",
};

/**
 * What answering yes does, in words (the reason in bold), from why the server holds the call
 * back. A call without `why` (stored before the server said it, or a stream's request part not
 * yet followed by the turn's `pendingApprovals`) gets the sentence that names every reason.
 */
function changeText(approval) {
  const why = WHY_TEXT[approval.why];
  const lead = why ?? `${approval.tool} is marked as changing or deleting your data (destructive), or as always ` +
    "needing your approval.";
  return [el("strong", {}, lead), " It runs only if you approve it, with exactly the arguments below, and may not be undone."];
}

export function forgetCards() {
  for (const card of cards.values()) clearTimeout(card.timer);
  cards.clear();
}
