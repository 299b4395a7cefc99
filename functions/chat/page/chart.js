// A chart a show_chart call drew: the server's Vega-Lite spec (its data a tool's rows), checked
// again here, drawn as SVG by vega-embed from assets/charts-lib.js (a classic script added the
// first time a chart is drawn), in the page's light or dark colours, with its summary as a
// caption and the SVG's label, and PNG and SVG downloads. Nothing a spec says can make the
// page fetch: the guard refuses addresses, and the loader vega gets refuses every load.

import { el } from "./dom.js";

/** The marks a chart may have: what show_chart offers. */
export const MARKS = ["bar", "line", "area", "point", "arc"];

/** Largest spec drawn, as JSON characters: the server's CHART_MAX_SPEC_BYTES is 1 MiB by
 * default, and this bound is there for a server that was told more, or is not ours. */
export const MAX_SPEC_CHARS = 2 * 1024 * 1024;

/**
 * Why the page will not draw `spec`, or null. The server built and checked it; this is a second
 * wall: no `url` or `href` anywhere (a data source, an image, a link), data only as inline
 * `values`, marks only those of MARKS, no string that is an address but the `$schema`, and not
 * over MAX_SPEC_CHARS.
 */
export function specProblem(spec) {
  if (!spec || typeof spec !== "object" || Array.isArray(spec)) return "the chart is not a Vega-Lite spec";
  let size;
  try {
    size = JSON.stringify(spec).length;
  } catch {
    return "the chart is not JSON";
  }
  if (size > MAX_SPEC_CHARS) return `the chart is ${thousands(size)} characters; at most ${thousands(MAX_SPEC_CHARS)} are drawn`;
  const problems = [];
  // `rows`: inside `data.values`, where keys are the tool's column names, not spec keys.
  const walk = (value, key, top, rows) => {
    if (problems.length) return;
    if (typeof value === "string") {
      if (!(top && key === "$schema") && /^\s*(https?|data|javascript|blob|file):/i.test(value)) {
        problems.push(`it names an address (${value.slice(0, 60)})`);
      }
      return;
    }
    if (!value || typeof value !== "object") return;
    for (const [k, v] of Object.entries(value)) {
      if (rows || Array.isArray(value)) walk(v, null, false, rows);
      else if (k === "url" || k === "href") problems.push(`it has a \`${k}\``);
      else if (k === "data" && !inlineData(v)) problems.push("its data are not inline values");
      else if (k === "data") walk(v.values, null, false, true);
      else if (k === "datasets") problems.push("it has named datasets");
      else if (k === "mark" && !MARKS.includes(typeof v === "string" ? v : v?.type)) {
        problems.push(`its mark ${JSON.stringify(typeof v === "string" ? v : v?.type ?? null)} is not one of ${MARKS.join(", ")}`);
      } else walk(v, k, value === spec, false);
      if (problems.length) return;
    }
  };
  walk(spec, null, false, false);
  return problems[0] ?? null;
}

/** `{values: [...]}` (and how to parse them): rows the spec carries, nothing to load. */
function inlineData(data) {
  return data && typeof data === "object" && !Array.isArray(data) && Array.isArray(data.values)
    && Object.keys(data).every((k) => k === "values" || k === "format");
}

/** The chart in one sentence: the spec's `description`, else what its encoding says. */
export function summaryOf(spec) {
  if (typeof spec?.description === "string" && spec.description.trim()) return spec.description.trim();
  const mark = typeof spec?.mark === "string" ? spec.mark : spec?.mark?.type ?? "chart";
  const enc = spec?.encoding ?? {};
  const name = (channel) => enc[channel]?.title ?? enc[channel]?.field;
  const n = Array.isArray(spec?.data?.values) ? spec.data.values.length : null;
  const rows = n === null ? "" : ` (${thousands(n)} row${n === 1 ? "" : "s"})`;
  if (mark === "arc") return `A pie chart of ${name("theta") ?? "values"} by ${name("color") ?? "category"}${rows}.`;
  const series = name("color") ? `, one series per ${name("color")}` : "";
  return `A ${mark} chart of ${name("y") ?? "values"} by ${name("x") ?? "category"}${series}${rows}.`;
}

const thousands = (n) => n.toLocaleString("en");

/**
 * A chart as a figure: drawn once the library has loaded, or "chart not shown: why" in its
 * place. `chart` is the stream's data-chart `data` or a stored `charts` entry (`call_id`,
 * `spec`).
 */
export function chartNode(chart) {
  const spec = chart?.spec;
  const problem = specProblem(spec);
  if (problem) return refused(problem);
  const summary = summaryOf(spec);
  const view = el("div", { class: "chart-view" });
  const png = el("button", { type: "button", disabled: true }, "Download PNG");
  const svg = el("button", { type: "button", disabled: true }, "Download SVG");
  const figure = el("figure", { class: "chart", "data-call": chart.call_id ?? null, "aria-busy": "true" },
    view, el("figcaption", {}, summary), el("div", { class: "chart-actions" }, png, svg));
  const name = fileBase(spec.title);
  const drawing = { figure, view, spec, summary, result: null };
  png.addEventListener("click", () => saveImage(drawing, "png", name));
  svg.addEventListener("click", () => saveImage(drawing, "svg", name));
  drawings.add(drawing);
  draw(drawing).then(() => {
    png.disabled = false;
    svg.disabled = false;
  }, (e) => {
    drawings.delete(drawing);
    figure.replaceWith(refused(e.message || String(e)));
  });
  return figure;
}

function refused(why) {
  return el("p", { class: "chart-refused error" }, `chart not shown: ${why}`);
}

/** The charts on the page, redrawn when the colour scheme changes. */
const drawings = new Set();

const darkScheme = matchMedia("(prefers-color-scheme: dark)");
darkScheme.addEventListener("change", () => {
  for (const drawing of drawings) {
    if (drawing.figure.isConnected) draw(drawing).catch(() => {});
    else drawings.delete(drawing);
  }
});

/** Draws (or draws again) one chart into its figure. */
async function draw(drawing) {
  const { vegaEmbed, vega, vegaInterpreter } = await chartsLibrary();
  drawing.result?.finalize();
  const dark = darkScheme.matches;
  drawing.result = await vegaEmbed(drawing.view, drawing.spec, {
    renderer: "svg",
    actions: false,
    // No <style> element: the policy refuses inline style; app.css styles the tooltip.
    defaultStyle: false,
    tooltip: { disableDefaultStyle: true, theme: dark ? "dark" : "light" },
    // Expressions read by an interpreter, not compiled with Function: the policy allows no eval.
    ast: true,
    expr: vegaInterpreter.expressionInterpreter,
    loader: noLoads(vega),
    config: themeConfig(),
  });
  const svg = drawing.view.querySelector("svg");
  svg?.setAttribute("aria-label", drawing.summary);
  drawing.figure.dataset.scheme = dark ? "dark" : "light";
  drawing.figure.removeAttribute("aria-busy");
}

/** A vega loader that loads nothing: a spec the guard let through still fetches no address. */
function noLoads(vega) {
  const loader = vega.loader();
  const refuse = () => Promise.reject(new Error("charts on this page load no data"));
  loader.load = refuse;
  loader.sanitize = refuse;
  loader.http = refuse;
  loader.file = refuse;
  return loader;
}

/** The page's colours (app.css's variables, light or dark) as Vega-Lite config. */
function themeConfig() {
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim();
  const [bg, fg, muted, line] = ["--bg", "--fg", "--muted", "--line"].map(color);
  return {
    background: bg,
    axis: { labelColor: muted, titleColor: fg, domainColor: line, tickColor: line, gridColor: line },
    legend: { labelColor: muted, titleColor: fg },
    title: { color: fg, subtitleColor: muted },
    view: { stroke: line },
  };
}

let library = null;

/** charts-lib.js's globals, the script added (once) the first time a chart is drawn. */
function chartsLibrary() {
  library ??= new Promise((resolve, reject) => {
    const script = el("script", { src: "assets/charts-lib.js" });
    script.addEventListener("load", () => resolve(globalThis));
    script.addEventListener("error", () => {
      library = null; // the next chart tries again
      script.remove();
      reject(new Error("the chart library did not load"));
    });
    document.head.append(script);
  });
  return library;
}

/** `<title>` as a file name, of letters, digits, `-` and `_`; `chart` without one. */
function fileBase(title) {
  const text = typeof title === "string" ? title : typeof title?.text === "string" ? title.text : "";
  return text.replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60) || "chart";
}

/** The chart as a PNG or SVG file. */
async function saveImage(drawing, type, name) {
  const url = await drawing.result.view.toImageURL(type);
  const link = el("a", { href: url, download: `${name}.${type}`, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  if (url.startsWith("blob:")) setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
