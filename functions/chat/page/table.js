// A tool's rows as a table: a header of its columns that sorts by a click (numbers as numbers,
// text in the reader's language order, empty cells last), 50 rows a page, numbers right-aligned,
// how many rows came and whether the server cut them, and those rows as a CSV file.

import { el } from "./dom.js";

/** Rows on one page of a table: past this, Previous and Next. */
export const PAGE_ROWS = 50;

/** The rows of a tool's output when it is a list of objects (alone or as `rows`). */
export function rowsOf(output) {
  const rows = Array.isArray(output) ? output : Array.isArray(output?.rows) ? output.rows : null;
  return rows && rows.every((r) => r && typeof r === "object" && !Array.isArray(r)) ? rows : null;
}

/** The columns of `rows`: every key, in the order first seen (a row may lack some). */
export function columnsOf(rows) {
  return [...new Set(rows.flatMap((r) => Object.keys(r)))];
}

/**
 * `rows` (the server's, in its order) as a table with its controls. `output` is the whole
 * result (`row_count`, `truncated`, `truncated_reason`), `name` the tool's, for the file name.
 */
export function rowsTable(rows, output, name) {
  const columns = columnsOf(rows);
  const numeric = new Set(columns.filter((c) => rows.some((r) => typeof r[c] === "number")
    && rows.every((r) => r[c] === null || r[c] === undefined || typeof r[c] === "number")));
  let order = rows; // the rows as shown: the server's order until a header is clicked
  let sort = { column: null, descending: false };
  let page = 0;
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));

  const headers = columns.map((c) => {
    // The arrow is hidden from screen readers, which hear aria-sort instead (and a button
    // named "name ▲" would be renamed by every sort).
    const button = el("button", { type: "button", class: "sort" }, c, el("span", { class: "arrow", "aria-hidden": "true" }));
    button.addEventListener("click", () => sortBy(c));
    return el("th", { scope: "col", class: numeric.has(c) ? "num" : null }, button);
  });
  const body = el("tbody");
  const table = el("table", { class: "rows" }, el("thead", {}, el("tr", {}, ...headers)), body);
  const where = el("span", { class: "rows-where", "aria-live": "polite" });
  const previous = el("button", { type: "button" }, "Previous");
  const next = el("button", { type: "button" }, "Next");
  previous.addEventListener("click", () => show(page - 1));
  next.addEventListener("click", () => show(page + 1));
  const pager = pages > 1 ? el("nav", { class: "pager", "aria-label": "Table pages" }, previous, " ", where, " ", next) : null;
  const download = el("button", { type: "button", class: "download" }, "Download CSV");
  download.addEventListener("click", () => save(toCsv(columns, rows), fileName(name)));

  function show(n) {
    page = Math.min(Math.max(n, 0), pages - 1);
    const first = page * PAGE_ROWS;
    const shown = order.slice(first, first + PAGE_ROWS);
    body.replaceChildren(...shown.map((r) => el("tr", {}, ...columns.map((c) => {
      const v = r[c];
      return el("td", { class: typeof v === "number" ? "num" : null }, cellText(v));
    }))));
    where.textContent = `Rows ${digits(first + 1)}–${digits(first + shown.length)} of ${digits(rows.length)}`;
    previous.disabled = page === 0;
    next.disabled = page === pages - 1;
  }

  function sortBy(column) {
    sort = { column, descending: sort.column === column ? !sort.descending : false };
    order = sorted(rows, column, sort.descending);
    headers.forEach((th, i) => {
      const arrow = th.querySelector(".arrow");
      if (columns[i] === column) {
        th.setAttribute("aria-sort", sort.descending ? "descending" : "ascending");
        arrow.textContent = sort.descending ? " ▼" : " ▲";
      } else {
        th.removeAttribute("aria-sort");
        arrow.textContent = "";
      }
    });
    show(0);
  }

  show(0);
  return el("div", { class: "rows-view" },
    el("div", { class: "table-wrap" }, table),
    el("div", { class: "rows-bar" }, el("span", { class: "rows-note" }, countText(rows, output)), pager, download));
}

const digits = (n) => n.toLocaleString("en");

/** How many rows came, and that the server cut them, in words. */
function countText(rows, output) {
  const n = typeof output?.row_count === "number" ? output.row_count : rows.length;
  const count = `${digits(n)} row${n === 1 ? "" : "s"}.`;
  if (!output?.truncated) return count;
  if (output.truncated_reason === "max_bytes") return `${count} Cut at the result's size limit: there are more rows than shown.`;
  return `${count} Cut at the tool's row limit (${digits(n)}): there are more rows than shown.`;
}

/** A cell as the table shows it: nothing for null, JSON for objects and lists. */
function cellText(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** A copy of `rows` ordered by `column`: numbers by value, the rest by its text in the reader's
 * language (digits within it by value), empty cells last whichever the direction. */
export function sorted(rows, column, descending) {
  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
  const empty = (v) => v === null || v === undefined || v === "";
  return [...rows].sort((a, b) => {
    const x = a[column];
    const y = b[column];
    if (empty(x) || empty(y)) return empty(x) - empty(y);
    const c = typeof x === "number" && typeof y === "number" ? x - y : collator.compare(cellText(x), cellText(y));
    return descending ? -c : c;
  });
}

/**
 * `rows` as CSV (RFC 4180): the header, then each row in the given order, CRLF after every
 * record, a field with a comma, quote, CR or LF quoted and its quotes doubled. JSON numbers are
 * written as they came; text a spreadsheet would run as a formula (starting with = + - @, tab
 * or CR) gets a leading `'`, so opening the file runs nothing.
 */
export function toCsv(columns, rows) {
  const lines = [columns.map(csvField), ...rows.map((r) => columns.map((c) => csvField(r[c])))];
  return lines.map((fields) => fields.join(",") + "\r\n").join("");
}

function csvField(v) {
  if (v === null || v === undefined) return "";
  let text = typeof v === "object" ? JSON.stringify(v) : String(v);
  if (typeof v === "string" && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** `<tool>.csv`, of letters, digits, `-` and `_` only. */
function fileName(name) {
  const base = String(name ?? "").replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "");
  return `${base || "rows"}.csv`;
}

/** Offers `csv` as a download, UTF-8 with a byte order mark (without one, Excel reads it in the
 * system's code page and garbles every accent). */
function save(csv, name) {
  const url = URL.createObjectURL(new Blob(["\uFEFF", csv], { type: "text/csv;charset=utf-8" }));
  const link = el("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // The download has its own copy once started; the URL only keeps the rows in memory.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
