// One assistant reply, as it arrives or as stored: its text (Markdown), its tool calls with their
// arguments and outputs (rows as a table), the charts drawn from them, the cards of calls waiting
// for approval, its sources with their citations linked, its usage, what went wrong, and the
// thumbs to rate it (feedback.js).

import { ApprovalCard, cards } from "./approval-card.js";
import { chartNode } from "./chart.js";
import { el } from "./dom.js";
import { feedbackControls } from "./feedback.js";
import { renderMarkdown, safeUrl } from "./markdown.js";
import { fromSummary, problemNode } from "./problems.js";
import { state } from "./state.js";
import { rowsOf, rowsTable } from "./table.js";

export class ReplyView {
  constructor() {
    this.parts = el("div", { class: "parts" });
    this.footer = el("div", { class: "reply-footer" });
    this.node = el("li", { class: "message assistant" }, el("span", { class: "who" }, state.info?.assistant ?? "Assistant"), this.parts, this.footer);
    this.texts = new Map(); // text part id -> {text, node}
    this.tools = new Map(); // toolCallId -> view
    this.text = "";
  }

  textStart(id) {
    const node = el("div", { class: "markdown" });
    this.texts.set(id, { text: "", node });
    this.parts.append(node);
  }

  textDelta(id, delta) {
    if (!this.texts.has(id)) this.textStart(id);
    const part = this.texts.get(id);
    part.text += delta;
    this.text += delta;
    // Rendered again whole: a delta may close a table row or an emphasis it opened earlier.
    part.node.replaceChildren(renderMarkdown(part.text));
  }

  /** A reply known whole (JSON answer, stored message). */
  fullText(text) {
    this.textStart("reply");
    this.textDelta("reply", text);
  }

  toolInput(id, name, input) {
    const status = el("span", { class: "tool-status" }, "running…");
    const output = el("div", { class: "tool-output" });
    const details = el("details", { class: "tool", "data-tool": name },
      el("summary", {}, el("span", { class: "tool-name" }, name), " ", status),
      el("h4", {}, "Arguments"), el("pre", { class: "json" }, pretty(input)),
      el("h4", {}, "Output"), output);
    this.tools.set(id, { details, status, output, name, input });
    this.parts.append(details);
  }

  toolOutput(id, output, isError) {
    const view = this.tools.get(id);
    if (!view) return;
    view.details.classList.add(isError ? "failed" : "done");
    view.status.textContent = isError ? "failed" : describeOutput(output);
    view.output.replaceChildren(isError ? toolError(typeof output === "string" ? output : pretty(output)) : renderOutput(output, view.name));
  }

  /**
   * A chart a show_chart call (`id`) drew (`chart`: its `call_id`, the call whose rows it draws,
   * and its `spec`), under that call; "chart not shown: why" instead when the page refuses it.
   */
  chart(id, chart) {
    const node = chartNode(chart);
    node.dataset.chart = id;
    const tool = this.tools.get(id);
    if (tool?.details.isConnected) tool.details.after(node);
    else this.parts.append(node);
  }

  /**
   * Cards for calls waiting for the user's approval (the stream's `pendingApprovals`, the JSON
   * `pending_approvals`, or a stored message's `approvals`), each where its call is shown;
   * returns the new cards. A call already carded (a `tool-approval-request` part) is updated.
   */
  approvals(list) {
    const made = [];
    for (const approval of list ?? []) {
      const known = cards.get(approval.id);
      if (known && this.parts.contains(known.node)) {
        known.update(approval);
        continue;
      }
      const card = new ApprovalCard(approval);
      const tool = this.tools.get(approval.call_id);
      // The streamed call is the card now: it did not run, so "running…" would be wrong.
      if (tool && !tool.details.classList.contains("done") && !tool.details.classList.contains("failed")) {
        tool.details.replaceWith(card.node);
      } else {
        this.parts.append(card.node);
      }
      made.push(card);
    }
    return made;
  }

  /** `sources` as the API returns them, or the stream's `source-url`/`source-document` parts. */
  sources(sources) {
    if (!sources?.length) return;
    const list = el("ol", { class: "sources" });
    const prefix = `source-${++replies}-`;
    // A tool's score is on its own scale (a similarity, a fused rank): only its ratio to the
    // best one of this reply means something to a reader, so that is what is shown.
    const scores = sources.map((s) => s.score).filter((n) => typeof n === "number" && n > 0);
    const best = scores.length ? Math.max(...scores) : 0;
    for (const s of sources) {
      const verified = verifiedName(s);
      if (verified) {
        // A query the team trusts answered: a chip naming it, not a row to cite.
        list.append(el("li", { id: prefix + s.id, tabindex: -1, class: "verified" },
          el("span", { class: "verified-chip", title: "Answered from a query the team verified" }, `verified: ${verified}`)));
        continue;
      }
      const href = sourceLink(s.uri);
      const title = s.title || s.uri || s.id;
      list.append(el("li", { id: prefix + s.id, tabindex: -1 },
        el("span", { class: "source-id" }, `[${s.id}]`), " ",
        href ? el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, title) : el("span", { class: "source-title" }, title),
        s.uri && !href ? el("span", { class: "source-uri" }, ` (${s.uri})`) : null,
        best > 0 && typeof s.score === "number" ? relevance(s.score / best, scores.length) : null,
        s.snippet ? el("div", { class: "snippet" }, s.snippet) : null));
    }
    this.footer.append(el("section", { class: "sources-box", "aria-label": "Sources" }, el("h4", {}, "Sources"), list));
    this.linkCitations(prefix, new Set(sources.map((s) => s.id)));
  }

  /** Each `[S1]` of the reply's text (outside code and links) becomes a link to its source. */
  linkCitations(prefix, ids) {
    for (const md of this.parts.querySelectorAll(".markdown")) {
      const walker = document.createTreeWalker(md, NodeFilter.SHOW_TEXT);
      const texts = [];
      while (walker.nextNode()) {
        if (!walker.currentNode.parentElement.closest("code, pre, a")) texts.push(walker.currentNode);
      }
      for (const node of texts) {
        const pieces = node.data.split(/(\[S\d+\])/);
        if (pieces.length === 1) continue;
        node.replaceWith(...pieces.map((piece) => {
          const id = /^\[(S\d+)\]$/.exec(piece)?.[1];
          return id && ids.has(id) ? el("a", { href: `#${prefix}${id}`, class: "cite", "data-cite": prefix + id }, piece) : piece;
        }));
      }
    }
  }

  /**
   * The turn's usage and state; with the stored message's `seq` (and its conversation), the
   * thumbs to rate it, showing the `feedback` already given.
   */
  meta({ usage, steps, cutShort, interrupted, conversationId, seq, feedback }) {
    const bits = [];
    // A turn that failed before the model answered, or a server that reports no usage, stores
    // zeros: saying "0 tokens" would be wrong, so nothing is said.
    if (usage && (usage.input_tokens > 0 || usage.output_tokens > 0)) {
      bits.push(`${fmt(usage.input_tokens)} tokens in, ${fmt(usage.output_tokens)} out`);
    }
    if (steps) bits.push(`${steps} tool step${steps === 1 ? "" : "s"}`);
    if (cutShort) bits.push("cut short at the time limit");
    if (interrupted) bits.push("interrupted");
    if (bits.length) this.footer.append(el("p", { class: "usage" }, bits.join(" · ")));
    if (conversationId && Number.isInteger(seq) && !this.footer.querySelector(".feedback")) {
      this.footer.append(feedbackControls(conversationId, seq, feedback ?? null));
    }
  }

  /** A failure: what happened and what to do, the code kept small for support. */
  error(problem) {
    const feedback = this.footer.querySelector(".feedback");
    if (feedback) feedback.before(problemNode(problem));
    else this.footer.append(problemNode(problem));
  }

  /** The JSON `TurnResponse`, or a stored assistant message (same fields, `content`; its
   * conversation is the open one). */
  whole(turn) {
    for (const t of turn.traces ?? []) {
      this.toolInput(t.call_id, t.name, t.args);
      this.toolOutput(t.call_id, t.output, t.is_error);
    }
    for (const chart of turn.charts ?? []) this.chart(chart.id, chart);
    const text = turn.reply ?? turn.content ?? "";
    if (text) this.fullText(text);
    this.approvals(turn.approvals ?? turn.pending_approvals);
    this.sources(turn.sources);
    this.meta({ usage: turn.usage, steps: turn.steps, cutShort: turn.cut_short, interrupted: turn.interrupted,
      conversationId: turn.conversation_id ?? state.conversation, seq: turn.seq, feedback: turn.feedback });
    if (turn.error) this.error(fromSummary(turn.error));
  }
}

let replies = 0; // numbers each reply's source ids apart

const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en") : "?");

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/** The verified query a source is (the API's `verified`, or a streamed part's `verified:<name>` id), or null. */
function verifiedName(s) {
  if (typeof s.verified === "string" && s.verified) return s.verified;
  const id = typeof s.id === "string" ? s.id : "";
  return id.startsWith("verified:") && id.length > 9 ? id.slice(9) : null;
}

/** A source's address as a link target: http(s) only; anything else stays text. */
export function sourceLink(uri) {
  if (typeof uri !== "string" || !/^https?:\/\//i.test(uri.trim())) return null;
  const href = safeUrl(uri.trim());
  return href && /^https?:/.test(href) ? href : null;
}

/** How well a source matched, relative to the reply's best (`ratio` 0-1) as a bar. */
function relevance(ratio, count) {
  const percent = Math.round(Math.min(1, Math.max(0, ratio)) * 100);
  const words = count < 2 ? "the only scored match" : percent >= 100 ? "best match" : `${percent}% as relevant as the best match`;
  return el("span", { class: "relevance" }, " ",
    el("meter", { min: 0, max: 100, value: percent, "aria-label": `Relevance: ${words}`, title: `Relevance: ${words}` }),
    percent >= 100 && count > 1 ? el("span", { class: "best" }, " best match") : null);
}

/** Tool errors past this many characters or lines start folded, with a button to unfold. */
const FOLD_CHARS = 320;

const FOLD_LINES = 6;

/** A tool's error, wrapped at the box's edge; a long one folded behind "Show all". */
function toolError(text) {
  const pre = el("pre", { class: "error tool-error" }, text);
  if (text.length <= FOLD_CHARS && text.split("\n").length <= FOLD_LINES) return pre;
  pre.classList.add("folded");
  const toggle = el("button", { type: "button", class: "unfold", "aria-expanded": "false" }, "Show all");
  toggle.addEventListener("click", () => {
    const folded = pre.classList.toggle("folded");
    toggle.setAttribute("aria-expanded", String(!folded));
    toggle.textContent = folded ? "Show all" : "Show less";
  });
  return el("div", {}, pre, toggle);
}

function describeOutput(output) {
  const rows = rowsOf(output);
  if (!rows) return "done";
  const n = output?.row_count ?? rows.length;
  return `${n} row${n === 1 ? "" : "s"}${output?.truncated ? " (truncated)" : ""}`;
}

/** A tool's output: rows as a table (and the rest as JSON), anything else as JSON. */
function renderOutput(output, name) {
  const rows = rowsOf(output);
  if (!rows || !rows.length) return el("pre", { class: "json" }, pretty(output));
  const fragment = document.createDocumentFragment();
  fragment.append(rowsTable(rows, Array.isArray(output) ? null : output, name));
  if (!Array.isArray(output)) {
    // What the table's line does not say already (a note, fields of a server not ours).
    const rest = { ...output };
    for (const said of ["rows", "row_count", "truncated", "truncated_reason"]) delete rest[said];
    if (Object.keys(rest).length) fragment.append(el("pre", { class: "json small" }, JSON.stringify(rest)));
  }
  return fragment;
}
