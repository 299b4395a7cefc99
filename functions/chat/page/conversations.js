// The caller's conversations: the list (paged), opening one (its stored messages drawn again,
// waiting calls' cards included), starting, renaming and deleting one; and the open
// conversation's view (its title, the welcome box, scrolling).

import { cards, forgetCards } from "./approval-card.js";
import { readLater } from "./busy.js";
import { describeContext, restoreContext } from "./context.js";
import { $, el, setStatus } from "./dom.js";
import { api } from "./http.js";
import { problemText } from "./problems.js";
import { ReplyView } from "./reply.js";
import { state } from "./state.js";

export async function loadConversations(reset, attempt = 0) {
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

export function markCurrent() {
  for (const a of $("conversations").querySelectorAll("a")) {
    if (a.dataset.id === state.conversation) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

export function newConversation() {
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
export function showTitle(title) {
  $("conversation-title").textContent = title;
  $("conversation-title").hidden = false;
  $("rename-form").hidden = true;
  $("conversation-actions").hidden = !state.conversation;
}

/** On an empty conversation: what to do, and the deployment's example questions. */
export function welcome() {
  $("welcome").hidden = $("messages").childElementCount > 0;
}

export function startRename() {
  $("rename-title").value = $("conversation-title").textContent;
  $("conversation-title").hidden = true;
  $("conversation-actions").hidden = true;
  $("rename-form").hidden = false;
  $("rename-title").select();
  $("rename-title").focus();
}

export async function rename(event) {
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

export async function remove() {
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

export async function openConversation(id, attempt = 0) {
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

function renderStored(m) {
  if (m.role === "user") return userMessage(m.content, m.context);
  const view = new ReplyView();
  view.whole(m);
  return view.node;
}

export function userMessage(text, context) {
  return el("li", { class: "message user" },
    el("span", { class: "who" }, "You"),
    el("div", { class: "text" }, text),
    context ? el("p", { class: "context" }, describeContext(context)) : null);
}

export function scrollDown() {
  const messages = $("messages");
  messages.scrollTop = messages.scrollHeight;
}

export function closeSidebar() {
  $("sidebar").classList.remove("open");
  $("sidebar-toggle").setAttribute("aria-expanded", "false");
}
