// Parley's chat page (served by functions/chat/src/page.rs; no framework, no build step).
//
// It talks only to this origin's API: GET api/page (settings), GET api/conversations,
// GET api/conversations/{id}/messages, PATCH and DELETE api/conversations/{id} and
// POST api/chat, whose reply it reads as the AI SDK UI message stream (v1) when the server
// streams, else as the JSON response. The one exception: when api/page names a stream_url (a
// deployment's streaming Function URL, as this origin's API Gateway buffers), POST api/chat
// goes there. When api/page names an OpenID provider (sign_in), the page signs people in there
// (authorization code + PKCE, navigation to its login page) and posts to its token endpoint,
// the only other origin the Content-Security-Policy lets it reach. Everything a model or a tool
// wrote is put on the page as
// text nodes or built elements, never as HTML: there is no innerHTML here, and the
// Content-Security-Policy allows no inline script besides. A request refused because the service
// is busy (429, 503, from the chat or any gateway in front of it) is said as "Parley is busy right
// now; try again in N s", with a refused question back in the message box ("refused because
// busy", below).

const TOKEN_KEY = "parley.token";
// With an OpenID provider: this tab's tokens ({access_token, id_token, refresh_token,
// issued_at, expires_at}), the sign-in under way ({state, verifier, hash}), the question a
// refused turn left in the message box, and that the person signed out. All in sessionStorage:
// this tab only, gone when it closes, never a cookie and never localStorage.
const SESSION_KEY = "parley.session";
const PENDING_KEY = "parley.sign-in";
const DRAFT_KEY = "parley.draft";
const SIGNED_OUT_KEY = "parley.signed-out";
// The picker's last choice (its label), kept across reloads for a new conversation.
const CONTEXT_KEY = "parley.context";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const $ = (id) => document.getElementById(id);

/** An element with attributes (`null`/`false` leaves one out) and children (strings are text). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

// --- Markdown ------------------------------------------------------------------------------
// A small CommonMark-ish subset: paragraphs, headings, fenced code, block quotes, lists (nested
// by indentation), GitHub tables, rules; inline code, strong, emphasis, strikethrough, links and
// bare URLs. It builds DOM nodes, so text can never become markup; links keep only http(s) and
// mailto addresses, and images become links (the page loads nothing from elsewhere).

/** `text` as Markdown, in a fragment. */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), fragment);
  return fragment;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:\s+|$)/;
const TABLE_DELIMITER = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;

function blocks(lines, out) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
      i++; // the closing fence, or past the end
      const code = el("code", m[2] ? { class: `language-${m[2].replace(/[^\w-]/g, "")}` } : {}, body.join("\n"));
      out.append(el("pre", {}, code));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      // Levels 1-6 become h3-h6: the page's own headings stay above the reply's.
      const h = el(`h${Math.min(m[1].length + 2, 6)}`);
      inline(m[2] || "", h);
      out.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.append(el("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && lines[i].trim() && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ""));
      const quote = el("blockquote");
      blocks(body, quote);
      out.append(quote);
      continue;
    }
    if (ITEM.test(line)) {
      i = list(lines, i, out);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_DELIMITER.test(lines[i + 1])) {
      const header = cells(line);
      const align = cells(lines[i + 1]).map((c) =>
        c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : null);
      if (align.length === header.length) {
        i = table(lines, i, header, align, out);
        continue;
      }
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !startsBlock(lines, i)) para.push(lines[i++].trim());
    if (!para.length) para.push(lines[i++].trim()); // a line no block rule took after all
    const p = el("p");
    inline(para.join("\n"), p);
    out.append(p);
  }
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    (line.includes("|") && i + 1 < lines.length && TABLE_DELIMITER.test(lines[i + 1]));
}

/** A list starting at `lines[i]`: its items are the lines at its first marker's indentation. */
function list(lines, i, out) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = ordered ? el("ol", parseInt(first[2], 10) !== 1 ? { start: parseInt(first[2], 10) } : {}) : el("ul");
  let item = null;
  let loose = false;
  const flush = () => {
    if (!item) return;
    const li = el("li");
    const body = el("div");
    blocks(item, body);
    // A tight item's one paragraph is shown without paragraph spacing.
    if (!loose && body.childNodes.length && body.firstChild.tagName === "P") {
      body.firstChild.replaceWith(...body.firstChild.childNodes);
    }
    li.append(...body.childNodes);
    node.append(li);
    item = null;
  };
  while (i < lines.length) {
    const line = lines[i];
    const m = ITEM.exec(line);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      flush();
      item = [line.slice(m[0].length)];
      i++;
      continue;
    }
    if (!line.trim()) {
      // A blank line ends the list unless the next line is still inside it.
      const next = lines[i + 1];
      if (next === undefined || (!/^\s/.test(next) && !(ITEM.test(next) && ITEM.exec(next)[1].length === indent))) break;
      loose = true;
      item.push("");
      i++;
      continue;
    }
    const leading = line.length - line.trimStart().length;
    if (leading > indent) {
      item.push(line.slice(Math.min(leading, indent + 2 + (ordered ? 1 : 0))));
      i++;
      continue;
    }
    if (m || startsBlock(lines, i)) break;
    item.push(line.trim()); // a lazy continuation of the item's paragraph
    i++;
  }
  flush();
  out.append(node);
  return i;
}

/** The cells of a table row: split at `|` outside code spans, `\|` kept as a pipe. */
function cells(row) {
  const out = [];
  let cell = "";
  let code = false;
  const s = row.trim().replace(/^\|/, "").replace(/(?<!\\)\|$/, "");
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === "\\" && s[i + 1] === "|") {
      cell += "|";
      i++;
    } else if (c === "`") {
      code = !code;
      cell += c;
    } else if (c === "|" && !code) {
      out.push(cell.trim());
      cell = "";
    } else {
      cell += c;
    }
  }
  out.push(cell.trim());
  return out;
}

function table(lines, i, header, align, out) {
  const row = (values, tag) => el("tr", {}, ...header.map((_, col) => {
    const cell = el(tag, align[col] ? { style: null, class: `align-${align[col]}` } : {});
    inline(values[col] ?? "", cell);
    return cell;
  }));
  const head = el("thead", {}, row(header, "th"));
  const body = el("tbody");
  i += 2;
  while (i < lines.length && lines[i].trim() && lines[i].includes("|")) body.append(row(cells(lines[i++]), "td"));
  out.append(el("div", { class: "table-wrap" }, el("table", {}, head, body)));
  return i;
}

const ESCAPABLE = "\\`*_{}[]()#+-.!|~<>";

/** Inline Markdown of `text` appended to `out`. */
function inline(text, out) {
  let plain = "";
  const flush = () => {
    if (plain) out.append(plain);
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const rest = text.slice(i);
    if (c === "\\" && ESCAPABLE.includes(text[i + 1] ?? "")) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      out.append(el("br"));
      i++;
      continue;
    }
    if (c === "`") {
      const run = /^`+/.exec(rest)[0];
      const end = text.indexOf(run, i + run.length);
      if (end > 0) {
        flush();
        let code = text.slice(i + run.length, end);
        if (/^ .* $/.test(code)) code = code.slice(1, -1);
        out.append(el("code", {}, code));
        i = end + run.length;
        continue;
      }
      plain += run;
      i += run.length;
      continue;
    }
    const emphasis = /^(\*\*|__|~~|\*|_)/.exec(rest);
    if (emphasis) {
      const mark = emphasis[1];
      const before = text[i - 1] ?? " ";
      const after = text[i + mark.length] ?? " ";
      const end = findClosing(text, mark, i + mark.length);
      // `_` inside a word (snake_case) is not emphasis; nor is a mark before a space.
      const opens = !/\s/.test(after) && !(mark[0] === "_" && /\w/.test(before));
      if (opens && end > i + mark.length) {
        flush();
        const tag = mark === "~~" ? "del" : mark.length === 2 ? "strong" : "em";
        const node = el(tag);
        inline(text.slice(i + mark.length, end), node);
        out.append(node);
        i = end + mark.length;
        continue;
      }
      plain += mark;
      i += mark.length;
      continue;
    }
    const image = c === "!" && text[i + 1] === "[";
    if (c === "[" || image) {
      const link = parseLink(text, image ? i + 1 : i);
      if (link) {
        flush();
        const href = safeUrl(link.url);
        const node = href ? el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }) : el("span");
        if (image) node.append(link.label || link.url);
        else inline(link.label, node);
        out.append(node);
        i = link.end;
        continue;
      }
    }
    if (c === "<") {
      const auto = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/.exec(rest);
      if (auto && safeUrl(auto[1])) {
        flush();
        out.append(el("a", { href: safeUrl(auto[1]), rel: "noopener noreferrer nofollow", target: "_blank" }, auto[1]));
        i += auto[0].length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && !/\w/.test(text[i - 1] ?? " ")) {
      const bare = /^https?:\/\/[^\s<>]*[^\s<>.,:;"')\]]/i.exec(rest);
      if (bare && safeUrl(bare[0])) {
        flush();
        out.append(el("a", { href: safeUrl(bare[0]), rel: "noopener noreferrer nofollow", target: "_blank" }, bare[0]));
        i += bare[0].length;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
}

/** Where `mark` closes emphasis opened before `from`: not after a space, not inside code. */
function findClosing(text, mark, from) {
  let i = from;
  while (i < text.length) {
    if (text[i] === "\\") {
      i += 2;
      continue;
    }
    if (text[i] === "`") {
      const run = /^`+/.exec(text.slice(i))[0];
      const end = text.indexOf(run, i + run.length);
      i = end > 0 ? end + run.length : i + run.length;
      continue;
    }
    if (text.startsWith(mark, i) && !/\s/.test(text[i - 1])) {
      const after = text[i + mark.length] ?? " ";
      if (!(mark[0] === "_" && /\w/.test(after))) return i;
    }
    i++;
  }
  return -1;
}

/** `[label](url "title")` at `i`: its label, URL and where it ends, or null. */
function parseLink(text, i) {
  let depth = 0;
  let j = i;
  for (; j < text.length; j++) {
    if (text[j] === "\\") j++;
    else if (text[j] === "[") depth++;
    else if (text[j] === "]" && --depth === 0) break;
  }
  if (j >= text.length || text[j + 1] !== "(") return null;
  const m = /^\(\s*(<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+"[^"]*")?\s*\)/.exec(text.slice(j + 1));
  if (!m) return null;
  return { label: text.slice(i + 1, j), url: m[1].replace(/^<|>$/g, ""), end: j + 1 + m[0].length };
}

/** The address if it is an http(s) or mailto one (relative ones resolve against the page). */
export function safeUrl(raw) {
  try {
    const url = new URL(raw, document.baseURI);
    return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

// --- the server-sent event stream ----------------------------------------------------------

/** The `data` of each event of an SSE body, as strings, in order. */
export async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let cr = ""; // a chunk's last "\r", which may be half of a "\r\n"
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const text = cr + value;
    cr = text.endsWith("\r") ? "\r" : "";
    buffer += text.slice(0, text.length - cr.length).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(l[5] === " " ? 6 : 5));
      if (data.length) yield data.join("\n");
    }
  }
}

/** The stream's parts (JSON objects) until `data: [DONE]`. */
export async function* uiMessageParts(body) {
  for await (const data of sseData(body)) {
    if (data === "[DONE]") return;
    yield JSON.parse(data);
  }
}

// --- one assistant reply, as it arrives or as stored ---------------------------------------

class ReplyView {
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
    view.output.replaceChildren(isError ? toolError(typeof output === "string" ? output : pretty(output)) : renderOutput(output));
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

  meta({ usage, steps, cutShort, interrupted }) {
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
  }

  /** A failure: what happened and what to do, the code kept small for support. */
  error(problem) {
    this.footer.append(problemNode(problem));
  }

  /** The JSON `TurnResponse`, or a stored assistant message (same fields, `content`). */
  whole(turn) {
    for (const t of turn.traces ?? []) {
      this.toolInput(t.call_id, t.name, t.args);
      this.toolOutput(t.call_id, t.output, t.is_error);
    }
    const text = turn.reply ?? turn.content ?? "";
    if (text) this.fullText(text);
    this.approvals(turn.approvals ?? turn.pending_approvals);
    this.sources(turn.sources);
    this.meta({ usage: turn.usage, steps: turn.steps, cutShort: turn.cut_short, interrupted: turn.interrupted });
    if (turn.error) this.error(fromSummary(turn.error));
  }
}

let replies = 0; // numbers each reply's source ids apart

const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en") : "?");

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
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

// --- tool calls waiting for the user's approval ----------------------------------------------
// A call the server holds back (a destructive tool, or one marked `approval = "always"`) is a
// card in the reply that made it: what would run, with which arguments, until when it may be
// approved, and Approve / Deny. The card's outcome always comes from the server (the answer's
// turn, then GET api/conversations/{id}/messages), so a reload or a second tab shows the same.

/** The cards on the page by approval id; emptied whenever the messages are drawn again. */
const cards = new Map();

/** A date and time as this browser writes them, to the minute. */
const when = (iso) => new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });

/** A value of a call's arguments as text: strings as they are, anything else as JSON. */
const argumentText = (value) => (typeof value === "string" ? value : JSON.stringify(value, null, 2));

class ApprovalCard {
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
    this.approve.addEventListener("click", () => answerApproval(this, true));
    this.deny.addEventListener("click", () => answerApproval(this, false));
    this.reason.addEventListener("keydown", (event) => {
      // Enter in the reason field denies: the field is only for a denial.
      if (event.key === "Enter") {
        event.preventDefault();
        answerApproval(this, false);
      }
    });
    cards.set(approval.id, this);
    this.update(approval);
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

// --- failures, in words --------------------------------------------------------------------
// Each code the API documents (docs/api.md, "chat errors") as what happened and what to do;
// the code itself stays beside it, small, for whoever is asked for help.

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
  internal: "Something went wrong inside the assistant. Try again; if it keeps happening, tell whoever runs it, with the code below.",
};

// --- refused because busy ------------------------------------------------------------------
// A request refused because the service is busy or could not run it: 429 or 503 from any front
// door (the chat's own JSON errors; a Function URL's throttle, whose body is AWS's or not JSON;
// API Gateway's busy response, template.yaml's PageApiBusyResponse; an HTTP API's bare
// `{"message": ...}`), a front door's own 5xx, 409 `conversation_busy`, or no answer at all.
// The page says so with the wait (`Retry-After`, in seconds or as an HTTP date), puts a refused
// question back in the message box and holds Send until the wait is over. It never sends a turn
// again by itself (a turn may write); reads (the conversation list, a conversation's messages)
// it asks for again once the wait is over, at most READ_RETRIES times.

/** The wait when a refusal names none, or names one this page cannot read (a Function URL on
 * another origin exposes only `x-request-id` to it): 10 s, as API Gateway's busy response asks. */
export const BUSY_WAIT_DEFAULT = 10;
/** The longest wait the page tells or holds Send for (5 minutes); a longer `Retry-After` is read
 * as this, and the next refusal says what is left. */
export const BUSY_WAIT_MAX = 300;
/** How many times a refused read is asked again by itself. */
const READ_RETRIES = 3;

/** `Retry-After` in whole seconds from now: delta-seconds or an HTTP date; null when absent or
 * not one of those. */
export function retryAfterSeconds(value, now = Date.now()) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text);
  // An HTTP date names its month (`Sun, 06 Nov 1994 08:49:37 GMT` and the two obsolete forms);
  // Date.parse alone would read "7.5" as a date too.
  if (!/[a-z]{3}/i.test(text)) return null;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, Math.ceil((at - now) / 1000)) : null;
}

/** The wait to tell and hold for: `Retry-After`'s seconds, else the default, within 1 s and the
 * maximum. */
export function busyWait(retryAfter) {
  const seconds = retryAfter ?? BUSY_WAIT_DEFAULT;
  return Math.min(BUSY_WAIT_MAX, Math.max(1, Math.ceil(seconds)));
}

/** Words of a front door's own body that mean it is refusing because of load. */
const BUSY_WORDS = /busy|unavailable|too many|throttl|rate exceeded|concurrency|slow down/i;

/**
 * Why a failed request is worth sending again after a wait: `"busy"` (429, 503, the chat's
 * `conversation_busy`, API Gateway's `busy`, a front door's 5xx saying it is busy),
 * `"unreachable"` (a front door's other 5xx: the function could not be run), else null. A 5xx
 * in the chat's own envelope (`internal`, `llm_*`) is the chat's word and stays as it is.
 * `envelope`: the body was the chat's `{"error": {"code", ...}}`; `said`: a front door's own
 * `message`/`Message`.
 */
export function refusalOf(status, code, envelope, said = "") {
  if (status === 429 || status === 503 || code === "conversation_busy" || code === "busy") return "busy";
  if (status >= 500 && !envelope) return BUSY_WORDS.test(said ?? "") ? "busy" : "unreachable";
  return null;
}

/** A wait in words: "7 s", or minutes from two on. */
export function waitText(seconds) {
  return seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
}

/** Why a request was refused, in the chat's own words for its codes where they say more than
 * "busy" (`{name}`: the assistant's name); `then`: what to add after the wait. */
const BUSY_REASONS = {
  conversation_busy: { why: "another reply is still being written in this conversation", then: ", when it has finished" },
  database_pool_exhausted: { why: "{name} is busy right now (every database connection is in use)" },
  too_many_reads: { why: "too many of your conversations are loading at once" },
  llm_rate_limited: { why: "the language model is busy right now" },
  llm_timeout: { why: "the language model took too long to answer", then: ", or ask for less at once" },
  database_unavailable: { why: "{name} cannot reach its database right now" },
  auth_unavailable: { why: "your sign-in cannot be checked right now" },
};

/** Why `problem` (a refusal) was refused: "Parley is busy right now", or the chat's words. */
export function busyReason({ code, refusal }, name = state.info?.assistant || "Parley") {
  const known = code && BUSY_REASONS[code];
  const why = known ? known.why.replace("{name}", name)
    : refusal === "unreachable" ? `${name} could not be reached right now` : `${name} is busy right now`;
  return why[0].toUpperCase() + why.slice(1);
}

/** What a refused request says: "Parley is busy right now; try again in 7 s", or the chat's
 * own words for its code, with the wait. */
export function busyText(problem, name = state.info?.assistant || "Parley") {
  const after = waitText(problem.wait ?? BUSY_WAIT_DEFAULT);
  if (problem.code === "approval_outcome_unknown") {
    return "The approved call was sent but its answer did not arrive in time, so it may have run; nothing more " +
      `was done. Send the same answer again in ${after}: the call does not run twice.`;
  }
  return `${busyReason(problem, name)}; try again in ${after}${BUSY_REASONS[problem.code]?.then ?? ""}.`;
}

/** Calls `tick(left)` each second from `seconds` down to 1, then `done()`; returns a stop. */
function countdown(seconds, tick, done) {
  const until = Date.now() + seconds * 1000;
  let last = null;
  const timer = setInterval(step, 200);
  function step() {
    const left = Math.ceil((until - Date.now()) / 1000);
    if (left <= 0) {
      clearInterval(timer);
      done();
    } else if (left !== last) {
      last = left;
      tick(left);
    }
  }
  step();
  return () => clearInterval(timer);
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
  if (problem.refusal) return busyText(problem);
  return (code && PROBLEMS[code]) || message || "Something went wrong.";
}

function problemNode(problem) {
  const { code } = problem;
  return el("p", { class: "error", role: "alert" }, problemText(problem),
    code ? el("small", { class: "code" }, ` (${code})`) : null);
}

/** The rows of a tool's output when it is a list of objects (alone or as `rows`). */
function rowsOf(output) {
  const rows = Array.isArray(output) ? output : Array.isArray(output?.rows) ? output.rows : null;
  return rows && rows.every((r) => r && typeof r === "object" && !Array.isArray(r)) ? rows : null;
}

function describeOutput(output) {
  const rows = rowsOf(output);
  if (!rows) return "done";
  const n = output?.row_count ?? rows.length;
  return `${n} row${n === 1 ? "" : "s"}${output?.truncated ? " (truncated)" : ""}`;
}

/** A tool's output: rows as a table (and the rest as JSON), anything else as JSON. */
function renderOutput(output) {
  const rows = rowsOf(output);
  if (!rows || !rows.length) return el("pre", { class: "json" }, pretty(output));
  const columns = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cell = (v) => (v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));
  const table = el("table", { class: "rows" },
    el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { scope: "col" }, c)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...columns.map((c) => el("td", {}, cell(r[c])))))));
  const fragment = document.createDocumentFragment();
  fragment.append(el("div", { class: "table-wrap" }, table));
  if (!Array.isArray(output)) {
    const rest = { ...output };
    delete rest.rows;
    if (Object.keys(rest).length) fragment.append(el("pre", { class: "json small" }, JSON.stringify(rest)));
  }
  return fragment;
}

// --- the page ------------------------------------------------------------------------------

const state = {
  info: null,
  token: null, // the bearer token every API call carries
  session: null, // with an OpenID provider: this tab's tokens (SESSION_KEY)
  refreshing: null, // the refresh under way, which every caller waits for
  refreshTimer: null,
  conversation: null, // the open conversation's id, null for a new one
  cursor: null,
  abort: null,
  hold: null, // stops the wait a busy refusal put on Send (holdSend), while it runs
  readRetry: new Map(), // a refused read's timer, by what it reads
};

class HttpError extends Error {
  constructor(status, code, message, conversationId = null, { refusal = null, retryAfter = null } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    // A turn that failed after its question was stored names its conversation.
    this.conversationId = conversationId;
    // Refused because busy (`refusalOf`): worth sending again after `wait` seconds.
    this.refusal = refusal;
    this.wait = refusal ? busyWait(retryAfter) : null;
  }
}

/** The failure a response that is not ok stands for: the chat's `{"error": {"code", "message"}}`
 * (with `conversation_id` beside it after a stored question), or a front door's own body (AWS's
 * `{"message"}`/`{"Message"}`, text, HTML); whether it is a refusal because busy, and its
 * `Retry-After`. */
async function httpError(response) {
  let code = "http_error";
  let message = `${response.status} ${response.statusText}`;
  let conversationId = null;
  let envelope = false;
  let said = "";
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    if (body?.error && typeof body.error === "object") {
      envelope = true;
      code = body.error.code ?? code;
      message = body.error.message ?? message;
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
  return new HttpError(response.status, code, message, conversationId,
    { refusal, retryAfter: retryAfterSeconds(response.headers.get("retry-after")) });
}

/** A call of this origin's API (relative, so a path prefix in front of the page works too). */
async function api(path, init = {}) {
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
    else if (response.status === 401 && state.info?.auth === "token") signOut(`The token was refused: ${error.message}`);
    throw error;
  }
  return response;
}

// --- signing in with an OpenID provider (authorization code + PKCE) ---------------------------

/** A session that can no longer be renewed: the person must sign in again. */
class SessionEnded extends Error {
  constructor(message = "Your session has ended.") {
    super(message);
    this.status = 401;
    this.code = "session_ended";
    this.conversationId = null;
  }
}

const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const randomText = (bytes) => b64url(crypto.getRandomValues(new Uint8Array(bytes)));

/** Where the provider sends the browser back: OIDC_REDIRECT_PATH on this origin. */
function redirectUri() {
  return new URL(state.info.sign_in.redirect_path, location.origin).href;
}

/** The provider's sign-in screen of this page: `heading`, what happened, and one button. */
function showProviderScreen({ heading = "Sign in", message = "", problem = "", button = "Sign in" } = {}) {
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

/** To the provider's login page, with a fresh state and PKCE verifier kept in this tab. */
async function startSignIn() {
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

/** A POST of `fields` to the token endpoint; its JSON, or an Error saying what it answered. */
async function tokenRequest(fields) {
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
function keepTokens(body, previous = null) {
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

function forgetTokens() {
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

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  if (!state.session?.expires_at) return;
  state.refreshTimer = setTimeout(() => freshToken().catch(() => {}), Math.max(0, renewAt(state.session) - Date.now()));
}

/** A new access token from the refresh token; one at a time, whoever asks. */
function refresh() {
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
async function freshToken() {
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
function sessionExpired() {
  forgetTokens();
  showProviderScreen({
    heading: "Session expired",
    message: "Your session has ended. Sign in again to go on; a question you were sending is kept in the message box.",
    button: "Sign in again",
  });
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

/** The page's start with an OpenID provider: its answer, this tab's tokens, or its sign-in screen. */
async function startWithProvider() {
  const provider = state.info.sign_in;
  if (provider.unavailable) {
    showProviderScreen({
      heading: "Sign-in unavailable",
      message: "This service cannot reach its sign-in provider. Try again in a few minutes; if it keeps happening, tell whoever runs it.",
      problem: provider.unavailable,
      button: "",
    });
    return;
  }
  const params = new URLSearchParams(location.search);
  if (params.has("state") && (params.has("code") || params.has("error"))) {
    const problem = await finishSignIn(params);
    if (problem) {
      showProviderScreen(problem);
      return;
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
    return;
  }
  scheduleRefresh();
  try {
    await freshToken();
  } catch {
    return; // the session-expired screen is up
  }
  await showApp();
}

function setStatus(text) {
  $("status").textContent = text;
  $("status").classList.remove("busy");
}

function showSignIn(message = "") {
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("sidebar-toggle").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message;
  $("token").focus();
}

function signOut(message = "") {
  if (state.info?.sign_in) {
    providerSignOut();
    return;
  }
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.abort?.abort();
  showSignIn(message);
}

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim().replace(/^Bearer\s+/i, "");
  if (!token) return;
  state.token = token;
  try {
    await api("api/conversations?limit=1");
  } catch (e) {
    state.token = null;
    $("sign-in-error").textContent = e.status === 401 ? `The token was refused: ${e.message}`
      : e.refusal ? problemText(e) : e.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  await showApp();
}

async function showApp() {
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = state.info.auth !== "token";
  $("sidebar-toggle").hidden = false;
  await loadConversations(true);
  const id = location.hash.slice(1);
  if (UUID.test(id)) await openConversation(id);
  else newConversation();
  // The question a refused turn left behind, back in the message box.
  const draft = sessionStorage.getItem(DRAFT_KEY);
  if (draft) {
    $("message").value = draft;
    sessionStorage.removeItem(DRAFT_KEY);
    $("message").focus();
  }
}

/**
 * A read refused because busy (`e`) asked again by `again()` once its wait is over, at most
 * READ_RETRIES times in a row for `key`; the status line says `what` failed and when it is
 * asked again. Returns whether it will be. A read is safe to repeat; a turn never is.
 */
function readLater(key, e, attempt, what, again) {
  clearTimeout(state.readRetry.get(key));
  state.readRetry.delete(key);
  if (!e.refusal || attempt >= READ_RETRIES) return false;
  setStatus(`${what}: ${busyReason(e)}. Trying again in ${waitText(e.wait)}.`);
  $("status").classList.add("busy");
  state.readRetry.set(key, setTimeout(() => {
    state.readRetry.delete(key);
    again();
  }, e.wait * 1000));
  return true;
}

async function loadConversations(reset, attempt = 0) {
  if (reset) state.cursor = null;
  let page;
  try {
    const cursor = state.cursor ? `&cursor=${encodeURIComponent(state.cursor)}` : "";
    page = await (await api(`api/conversations?limit=30${cursor}`)).json();
  } catch (e) {
    const what = "Could not load your conversations";
    if (!readLater("conversations", e, attempt, what, () => loadConversations(reset, attempt + 1))) {
      setStatus(`${what}: ${problemText(e)}`);
    }
    return;
  }
  clearTimeout(state.readRetry.get("conversations"));
  state.readRetry.delete("conversations");
  // The line that said this list would be asked again is done with.
  if ($("status").textContent.startsWith("Could not load your conversations")) setStatus("");
  const list = $("conversations");
  if (reset) list.replaceChildren();
  for (const c of page.conversations) {
    list.append(el("li", {}, el("a", {
      href: `#${c.id}`, "data-id": c.id, "aria-current": c.id === state.conversation ? "page" : null,
    }, el("span", { class: "title" }, c.title || "Untitled"),
    el("time", { datetime: c.updated_at }, new Date(c.updated_at).toLocaleString()))));
  }
  state.cursor = page.next_cursor;
  $("more-conversations").hidden = !state.cursor;
}

function markCurrent() {
  for (const a of $("conversations").querySelectorAll("a")) {
    if (a.dataset.id === state.conversation) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

function newConversation() {
  state.abort?.abort();
  state.conversation = null;
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  forgetCards();
  $("messages").replaceChildren();
  showTitle("New conversation");
  markCurrent();
  setStatus("");
  welcome();
  $("message").focus();
}

/** The open conversation's title, with Rename and Delete when it exists. */
function showTitle(title) {
  $("conversation-title").textContent = title;
  $("conversation-title").hidden = false;
  $("rename-form").hidden = true;
  $("conversation-actions").hidden = !state.conversation;
}

/** On an empty conversation: what to do, and the deployment's example questions. */
function welcome() {
  $("welcome").hidden = $("messages").childElementCount > 0;
}

function setUpExamples() {
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

function startRename() {
  $("rename-title").value = $("conversation-title").textContent;
  $("conversation-title").hidden = true;
  $("conversation-actions").hidden = true;
  $("rename-form").hidden = false;
  $("rename-title").select();
  $("rename-title").focus();
}

async function rename(event) {
  event.preventDefault();
  const id = state.conversation;
  const title = $("rename-title").value.trim();
  if (!id || !title) return;
  try {
    const renamed = await (await api(`api/conversations/${encodeURIComponent(id)}`, {
      method: "PATCH",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ title }),
    })).json();
    showTitle(renamed.title);
    const item = $("conversations").querySelector(`a[data-id="${id}"] .title`);
    if (item) item.textContent = renamed.title;
    setStatus("Renamed.");
    $("rename").focus();
  } catch (e) {
    setStatus(`Could not rename: ${problemText(e)}`);
  }
}

async function remove() {
  const id = state.conversation;
  if (!id) return;
  const title = $("conversation-title").textContent;
  if (!confirm(`Delete “${title}” and all its messages? This cannot be undone.`)) return;
  try {
    await api(`api/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
    newConversation();
    await loadConversations(true);
    setStatus(`Deleted “${title}”.`);
  } catch (e) {
    setStatus(`Could not delete: ${problemText(e)}`);
  }
}

async function openConversation(id, attempt = 0) {
  state.abort?.abort();
  const messages = $("messages");
  messages.setAttribute("aria-busy", "true");
  try {
    const body = await (await api(`api/conversations/${encodeURIComponent(id)}/messages`)).json();
    state.conversation = id;
    forgetCards();
    messages.replaceChildren(...body.messages.map(renderStored));
    const title = $("conversations").querySelector(`a[data-id="${id}"] .title`);
    showTitle(title ? title.textContent : "Conversation");
    restoreContext(body.messages);
    setStatus("");
  } catch (e) {
    if (e.status === 404) newConversation();
    const what = "Could not open the conversation";
    // Asked again only if it is still the one the address names, and no turn has begun.
    const again = () => {
      if (location.hash.slice(1) === id && !state.abort && state.conversation !== id) openConversation(id, attempt + 1);
    };
    if (!readLater("messages", e, attempt, what, again)) setStatus(`${what}: ${problemText(e)}`);
  } finally {
    welcome();
    messages.removeAttribute("aria-busy");
    markCurrent();
    closeSidebar();
    scrollDown();
  }
  // A call still waiting for an answer is what to do next here (after a reload too).
  const waiting = [...cards.values()].find((c) => c.open);
  if (waiting) {
    waiting.node.scrollIntoView({ block: "nearest" });
    waiting.node.focus();
  }
}

function forgetCards() {
  for (const card of cards.values()) clearTimeout(card.timer);
  cards.clear();
}
function renderStored(m) {
  if (m.role === "user") return userMessage(m.content, m.context);
  const view = new ReplyView();
  view.whole(m);
  return view.node;
}

function userMessage(text, context) {
  return el("li", { class: "message user" },
    el("span", { class: "who" }, "You"),
    el("div", { class: "text" }, text),
    context ? el("p", { class: "context" }, describeContext(context)) : null);
}

/** A context as the picker named it, else as JSON. */
function describeContext(context) {
  const options = state.info?.context_options;
  const json = canonical(context);
  const match = options?.options.find((o) => canonical(o.context) === json);
  return match ? `${options.label}: ${match.label}` : `Context: ${JSON.stringify(context)}`;
}

/** JSON with every object's keys sorted: Postgres (jsonb) gives them back in its own order. */
function canonical(value) {
  return JSON.stringify(value, (_, v) => (v && typeof v === "object" && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    : v));
}

/** The picker set to the context the conversation's last question was asked with. */
function restoreContext(messages) {
  const options = state.info?.context_options;
  const last = [...messages].reverse().find((m) => m.role === "user");
  if (!options || !last) return;
  if (!last.context) {
    setPicker("");
    return;
  }
  const json = canonical(last.context);
  const index = options.options.findIndex((o) => canonical(o.context) === json);
  if (index >= 0) setPicker(String(index));
}

function setPicker(value) {
  $("context-picker").value = value;
  rememberContext();
}

/** The choice, kept for the next reload (a new conversation starts with it). */
function rememberContext() {
  const options = state.info?.context_options;
  const index = $("context-picker").value;
  localStorage.setItem(CONTEXT_KEY, options && index !== "" ? options.options[Number(index)].label : "");
}

function chosenContext() {
  const options = state.info?.context_options;
  const index = $("context-picker").value;
  return options && index !== "" ? options.options[Number(index)].context : null;
}

async function send(event) {
  event?.preventDefault();
  const box = $("message");
  const message = box.value.trim();
  // While a busy refusal's wait runs, Send is off; Enter does nothing either.
  if (!message || state.abort || state.hold) return;
  const context = chosenContext();
  const body = { message };
  if (state.conversation) body.conversation_id = state.conversation;
  if (context) body.context = context;
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
    holdSend(e.wait, `${busyText(e)} Your question is back in the message box.`);
    box.focus();
  }
  if (waiting.length) await refreshCards(outcome.conversationId);
}

/** Send off for `seconds`, counting down on the button, after a busy refusal said `text` in the
 * status line; when the wait is over, the status line says the question can go again. */
function holdSend(seconds, text) {
  state.hold?.();
  const button = $("send");
  const status = $("status");
  setStatus(text);
  status.classList.add("busy");
  button.disabled = true;
  state.hold = countdown(seconds, (left) => {
    button.textContent = `Send in ${left} s`;
  }, () => {
    state.hold = null;
    button.disabled = false;
    button.textContent = "Send";
    if (!state.abort) setStatus("You can send your question again now.");
  });
}

/** Answers `card`'s call: the approvals request, whose resumed turn shows as a new reply. */
async function answerApproval(card, approved) {
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
async function refreshCards(conversation) {
  if (!conversation || conversation !== state.conversation || !cards.size) return;
  try {
    const body = await (await api(`api/conversations/${encodeURIComponent(conversation)}/messages`)).json();
    if (conversation !== state.conversation) return;
    for (const m of body.messages) for (const a of m.approvals ?? []) cards.get(a.id)?.update(a);
  } catch (e) {
    setStatus(`Could not show how the approval went: ${problemText(e)}`);
  }
}

/**
 * One turn: POST api/chat with `body`, read as it streams (or as JSON) into a new reply.
 * `settled(status)` says whether a finished turn is one to throw away (its reply is shown
 * otherwise), `failed(error)` whether a refused one is. Returns `{conversationId, problem,
 * settled, busy, refused}` (`refused`: refused because busy, nothing shown of it yet but a
 * stored failure); cards the turn paused at get the focus.
 */
async function runTurn(body, { settled = () => false, failed = () => false } = {}) {
  const messages = $("messages");
  const view = new ReplyView();
  view.node.setAttribute("aria-busy", "true");
  messages.append(view.node);
  scrollDown();
  const abort = new AbortController();
  state.abort = abort;
  busy(true);
  setStatus("Working…");
  const outcome = { conversationId: body.conversation_id ?? null, problem: null, settled: false, busy: false, refused: false };
  let status = null;
  try {
    // A deployment whose gateway buffers names where turns can stream (PAGE_STREAM_URL).
    const target = state.info?.stream_url ? new URL("api/chat", state.info.stream_url).href : "api/chat";
    const response = await api(target, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream, application/json;q=0.9" },
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    const type = response.headers.get("content-type") ?? "";
    if (type.startsWith("text/event-stream")) {
      status = await readStream(response.body, view);
    } else {
      // A server without the streaming route answers with the whole turn as JSON.
      const turn = await response.json();
      status = turn.status ?? null;
      adopt(turn.conversation_id);
      if (!settled(status)) view.whole(turn);
    }
    outcome.settled = settled(status);
    if (outcome.settled) view.node.remove();
    setStatus(status === "awaiting_approval" ? "Waiting for your approval." : "");
  } catch (e) {
    if (abort.signal.aborted) {
      view.error({ code: null, message: "Stopped." });
      setStatus("Stopped.");
      outcome.problem = { code: null, message: "Stopped." };
    } else if (e instanceof HttpError || e instanceof SessionEnded) {
      // The question may be stored already: a retry must join that conversation.
      adopt(e.conversationId);
      outcome.problem = e;
      if (failed(e)) {
        outcome.busy = e.code === "conversation_busy";
        view.node.remove();
      } else if (e.refusal) {
        // Refused because busy: the caller says so with the wait and offers it again. A
        // refusal that names its conversation (the model busy after the question was stored)
        // stays on record there, as a reload would show it.
        outcome.refused = true;
        if (e.conversationId && !body.approvals) view.error(e);
        else view.node.remove();
        setStatus("");
      } else {
        view.error(e);
        setStatus("The turn failed.");
      }
    } else {
      const message = `The connection broke off before the reply ended (${e.message}). Send your message again.`;
      view.error({ code: null, message });
      outcome.problem = { code: null, message };
      setStatus("The turn failed.");
    }
  } finally {
    view.node.removeAttribute("aria-busy");
    state.abort = null;
    busy(false);
    scrollDown();
    await loadConversations(true);
    markCurrent();
    const title = $("conversations").querySelector(`a[data-id="${state.conversation}"] .title`);
    if (title && $("rename-form").hidden) showTitle(title.textContent);
  }
  outcome.conversationId = state.conversation;
  // A call waiting for approval takes the focus: the next thing to do is to answer it.
  const waiting = [...view.node.querySelectorAll("section.approval")].find((n) => n.dataset.decision === "pending");
  if (waiting) {
    waiting.scrollIntoView({ block: "nearest" });
    waiting.focus();
  }
  return outcome;
}

/** A streamed reply, part by part (AI SDK UI message stream v1); returns the turn's status. */
async function readStream(body, view) {
  const sources = [];
  let ended = false;
  let status = null;
  for await (const part of uiMessageParts(body)) {
    switch (part.type) {
      case "start":
        adopt(part.messageMetadata?.conversationId);
        break;
      case "text-start":
        view.textStart(part.id);
        break;
      case "text-delta":
        view.textDelta(part.id, part.delta);
        scrollDown();
        break;
      case "tool-input-available":
        view.toolInput(part.toolCallId, part.toolName, part.input);
        setStatus(`Running ${part.toolName}…`);
        scrollDown();
        break;
      case "tool-output-available":
        view.toolOutput(part.toolCallId, part.output, false);
        break;
      case "tool-output-error":
        view.toolOutput(part.toolCallId, part.errorText, true);
        break;
      case "tool-approval-request": {
        // The AI SDK's part for a call that waits (AI SDK 5+); `finish` lists the same calls
        // with their expiry, so a server without this part shows the same cards.
        const call = view.tools.get(part.toolCallId);
        if (call && part.approvalId) {
          view.approvals([{ id: part.approvalId, tool: call.name, arguments: call.input, call_id: part.toolCallId }]);
        }
        break;
      }
      case "source-url":
        sources.push({ id: part.sourceId, title: part.title, uri: part.url });
        break;
      case "source-document":
        sources.push({ id: part.sourceId, title: part.title, uri: part.filename });
        break;
      case "finish": {
        const meta = part.messageMetadata ?? {};
        adopt(meta.conversationId);
        status = meta.status ?? null;
        view.approvals(meta.pendingApprovals);
        view.sources(meta.sources?.length ? meta.sources : sources);
        view.meta(meta);
        ended = true;
        break;
      }
      case "error":
        view.error(fromSummary(part.errorText));
        ended = true;
        break;
      default:
        break; // start-step, finish-step, text-end and parts this page does not show
    }
  }
  if (!ended) view.error({ code: null, message: "The reply broke off before it finished. Send your message again." });
  return status;
}

/** The conversation a turn belongs to becomes the open one (a new one gets its id here). */
function adopt(id) {
  if (!id || id === state.conversation) return;
  state.conversation = id;
  history.replaceState(null, "", `#${id}`);
  $("conversation-actions").hidden = false;
}

/** While a reply comes, Stop replaces Send; the message box keeps the focus. */
function busy(on) {
  const stopHadFocus = document.activeElement === $("stop");
  $("send").hidden = on;
  $("stop").hidden = !on;
  if (!on && stopHadFocus) $("message").focus();
}

function scrollDown() {
  const messages = $("messages");
  messages.scrollTop = messages.scrollHeight;
}

function closeSidebar() {
  $("sidebar").classList.remove("open");
  $("sidebar-toggle").setAttribute("aria-expanded", "false");
}

function setUpPicker() {
  const options = state.info.context_options;
  if (!options) return;
  $("picker-label").textContent = options.label;
  const select = $("context-picker");
  select.replaceChildren(el("option", { value: "" }, "None"),
    ...options.options.map((o, i) => el("option", { value: i }, o.label)));
  const kept = options.options.findIndex((o) => o.label === localStorage.getItem(CONTEXT_KEY));
  select.value = kept >= 0 ? String(kept) : "";
  select.addEventListener("change", rememberContext);
  $("picker").hidden = false;
}

/** GET api/page: the page's settings. Refused because busy, it says so and asks again after
 * the wait (READ_RETRIES times); null, said on the page, when it cannot be had. */
async function pageSettings() {
  const line = el("p", { id: "page-problem", class: "error", role: "alert" });
  for (let attempt = 0; ; attempt++) {
    let problem;
    try {
      const response = await fetch("api/page");
      if (response.ok) {
        line.remove();
        return await response.json();
      }
      problem = await httpError(response);
    } catch (e) {
      problem = new HttpError(0, null, e.message, null, { refusal: "unreachable" });
    }
    if (!line.isConnected) document.body.append(line);
    if (!problem.refusal || attempt >= READ_RETRIES) {
      line.textContent = problem.refusal
        ? `${busyText(problem)} Reload the page then.`
        : `This service did not answer: ${problem.message}`;
      return null;
    }
    line.textContent = `${busyReason(problem)}. Trying again in ${waitText(problem.wait)}.`;
    await new Promise((resolve) => setTimeout(resolve, problem.wait * 1000));
  }
}

async function start() {
  $("sign-in-form").addEventListener("submit", signIn);
  $("provider-start").addEventListener("click", startSignIn);
  $("sign-out").addEventListener("click", () => signOut());
  $("composer").addEventListener("submit", send);
  $("stop").addEventListener("click", () => state.abort?.abort());
  $("new-conversation").addEventListener("click", () => {
    newConversation();
    closeSidebar();
  });
  $("more-conversations").addEventListener("click", () => loadConversations(false));
  $("rename").addEventListener("click", startRename);
  $("rename-form").addEventListener("submit", rename);
  $("rename-cancel").addEventListener("click", () => {
    showTitle($("conversation-title").textContent);
    $("rename").focus();
  });
  $("rename-title").addEventListener("keydown", (event) => {
    if (event.key === "Escape") $("rename-cancel").click();
  });
  $("delete").addEventListener("click", remove);
  // A citation moves to its source without touching the address (which names the conversation).
  $("messages").addEventListener("click", (event) => {
    const cite = event.target.closest("a[data-cite]");
    if (!cite) return;
    event.preventDefault();
    const source = document.getElementById(cite.dataset.cite);
    source?.scrollIntoView({ block: "nearest" });
    source?.focus({ preventScroll: true });
  });
  $("conversations").addEventListener("click", (event) => {
    const link = event.target.closest("a[data-id]");
    if (!link) return;
    event.preventDefault();
    history.replaceState(null, "", `#${link.dataset.id}`);
    openConversation(link.dataset.id);
  });
  $("sidebar-toggle").addEventListener("click", () => {
    const open = $("sidebar").classList.toggle("open");
    $("sidebar-toggle").setAttribute("aria-expanded", String(open));
  });
  $("message").addEventListener("keydown", (event) => {
    // Enter sends; Shift+Enter (and Enter while an input method composes) is a new line.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  state.info = await pageSettings();
  if (!state.info) return;
  $("assistant").textContent = state.info.assistant;
  document.title = state.info.assistant;
  // No model behind the chat: say so, and how to set one up, before anyone types a question.
  if (state.info.model_problem) {
    $("composer").before(el("p", { id: "model-problem", class: "error", role: "alert" }, state.info.model_problem));
  }
  setUpPicker();
  setUpExamples();
  if (state.info.sign_in) {
    await startWithProvider();
  } else {
    state.token = sessionStorage.getItem(TOKEN_KEY);
    if (state.info.auth === "token" && !state.token) showSignIn();
    else await showApp();
  }
  document.body.dataset.ready = "true";
}

start();
