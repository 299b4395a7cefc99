// The usage view: tokens, calls, errors and cost per user, model and day (GET api/usage).
// Members of the admin group (ADMIN_GROUP) see everyone's; others their own. The report is the
// server's (the same one `parley usage` prints): this module only asks for a period and a
// grouping and shows the rows as a sortable table with the totals under it. A cost the server
// cannot price (a model without a price in MODEL_PRICES) comes as null and is shown as
// "unknown", never as 0.

import { $, el } from "./dom.js";
import { api } from "./http.js";
import { rowsTable } from "./table.js";

/** Each report field, under the column name the table shows (and the CSV download writes). */
const USAGE_COLUMNS = [
  ["turns", "turns"],
  ["model_calls", "model calls"],
  ["input_tokens", "tokens in"],
  ["output_tokens", "tokens out"],
  ["tool_calls", "tool calls"],
  ["tool_errors", "tool errors"],
  ["errors", "failed turns"],
  ["cost", "cost (USD)"],
];

/** What the table's first column is called for each grouping. */
const USAGE_KEYS = { user: "user", model: "model", day: "day (UTC)" };

/** The report being shown's request, so a late answer to an earlier choice is dropped. */
let usageRequest = 0;

/** Wires the usage view's controls: the header's Usage button, the period and grouping, Back. */
export function setUpUsage() {
  $("usage-open").addEventListener("click", openUsage);
  $("usage-back").addEventListener("click", closeUsage);
  $("usage-period").addEventListener("change", () => loadUsage($("usage-by").value));
  $("usage-by").addEventListener("change", () => loadUsage($("usage-by").value));
  $("usage").addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeUsage();
  });
}

/** Shows the view in place of the chat and asks for the report: the server's default grouping
 * the first time (an admin's per user, anyone else's per day), the one chosen after that. */
async function openUsage() {
  $("app").hidden = true;
  $("sidebar-toggle").hidden = true;
  $("usage").hidden = false;
  $("usage-open").setAttribute("aria-pressed", "true");
  $("usage-title").focus();
  await loadUsage($("usage-by").dataset.chosen ? $("usage-by").value : null);
}

function closeUsage() {
  if ($("usage").hidden) return;
  $("usage").hidden = true;
  $("app").hidden = false;
  $("sidebar-toggle").hidden = false;
  $("usage-open").setAttribute("aria-pressed", "false");
  $("usage-open").focus();
}

/** GET api/usage for the chosen period, grouped `by` (null: the server's default). */
async function loadUsage(by) {
  const request = ++usageRequest;
  const query = new URLSearchParams({ since: $("usage-period").value });
  if (by) query.set("by", by);
  const status = $("usage-status");
  status.textContent = "Loading usage…";
  $("usage").setAttribute("aria-busy", "true");
  try {
    const report = await (await api(`api/usage?${query}`)).json();
    if (request !== usageRequest) return;
    showUsage(report);
    status.textContent = "";
  } catch (e) {
    if (request !== usageRequest) return;
    // A refused token: http.js has put up the sign-in screen, which this view must not cover.
    if (e.status === 401 || !$("sign-in").hidden) {
      $("usage").hidden = true;
      $("usage-open").hidden = true;
    }
    $("usage-report").replaceChildren();
    $("usage-note").replaceChildren();
    status.textContent = `Usage could not be loaded: ${e.message}`;
  } finally {
    if (request === usageRequest) $("usage").removeAttribute("aria-busy");
  }
}

/** The report as a table (sortable, downloadable) with its totals, and what it covers. */
function showUsage(report) {
  $("usage-by").value = report.by;
  $("usage-by").dataset.chosen = "true";
  $("usage-scope").textContent = report.admin
    ? "Everyone's usage: you are in the admin group."
    : "Your own usage.";
  const key = USAGE_KEYS[report.by] ?? report.by;
  const named = (row) => Object.fromEntries([[key, row.key], ...USAGE_COLUMNS.map(([field, name]) => [name, row[field]])]);
  const box = $("usage-report");
  if (report.rows.length === 0) {
    box.replaceChildren(el("p", { id: "usage-empty" }, "No turns in this period."));
  } else {
    const view = rowsTable(report.rows.map(named), { row_count: report.rows.length }, `usage-by-${report.by}`);
    const total = named({ ...report.totals, key: "Total" });
    view.querySelector("table").append(el("tfoot", {},
      el("tr", {}, ...Object.entries(total).map(([name, v], i) => i === 0
        ? el("th", { scope: "row" }, v)
        : el("td", { class: "num" }, v === null ? "unknown" : String(v))))));
    box.replaceChildren(view);
  }
  $("usage-note").replaceChildren(...priceNote(report));
}

/** Where the costs come from, and which models have none. */
function priceNote(report) {
  const notes = [];
  if (Object.keys(report.prices ?? {}).length === 0) {
    notes.push("No prices are set (MODEL_PRICES), so every cost is unknown.");
  } else {
    notes.push(`Costs in ${report.currency} from the prices per million tokens set in MODEL_PRICES.`);
  }
  const unpriced = report.totals.unpriced ?? [];
  if (unpriced.length > 0 && Object.keys(report.prices ?? {}).length > 0) {
    notes.push(` No price for ${unpriced.join(", ")}: a cost that includes its tokens is unknown.`);
  }
  return [el("span", { id: "usage-prices" }, notes.join(""))];
}
