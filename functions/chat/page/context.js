// The picker (PAGE_CONTEXT_OPTIONS): the context a question is sent with, the name of a stored
// question's context, and the last choice, kept for the next reload.

import { $, el } from "./dom.js";
import { CONTEXT_KEY, state } from "./state.js";

export function setUpPicker() {
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

export function chosenContext() {
  const options = state.info?.context_options;
  const index = $("context-picker").value;
  return options && index !== "" ? options.options[Number(index)].context : null;
}

/** A context as the picker named it, else as JSON. */
export function describeContext(context) {
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
export function restoreContext(messages) {
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
