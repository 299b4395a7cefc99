// A reply's Markdown as page elements. A small CommonMark-ish subset: paragraphs, headings, fenced
// code, block quotes, lists (nested by indentation), GitHub tables, rules; inline code, strong,
// emphasis, strikethrough, links and bare URLs. It builds DOM nodes, so text can never become
// markup; links keep only http(s) and mailto addresses, and images become links (the page loads
// nothing from elsewhere).

import { el } from "./dom.js";

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
