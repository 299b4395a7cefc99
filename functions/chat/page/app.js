// Parley's chat page (served by functions/chat/src/page.rs; no framework, no build step). This is
// its entry module: it reads the page's settings, signs in and wires the controls. The rest are
// ES modules it imports, one concern each, each importing only those listed below it (page.rs
// lists them in this order, and a test there keeps the imports pointing down). The browser loads
// them as one script, assets/page.js, which page.rs concatenates at start-up (one request, each
// a Lambda invocation, not one per module): import only `{ names }` from the modules here,
// export only declarations, and give each top-level name to one module (page.rs refuses the
// rest):
//   sign-in.js        signing in and out: token mode's form, or an OpenID provider
//   composer.js       the message box: sending a question; Send held after a busy refusal
//   approvals.js      answering a call that waits for approval
//   turn.js           one POST api/chat, read as it streams (or as JSON) into a reply
//   conversations.js  the list; opening, starting, renaming, deleting; the open one's view
//   context.js        the picker (PAGE_CONTEXT_OPTIONS)
//   usage.js          the usage view: tokens and cost per user, model and day (GET api/usage)
//   reply.js          one reply: text, tool calls and outputs, charts, sources, usage, failure
//   approval-card.js  a call waiting for approval, as a card
//   chart.js          a show_chart call's chart: checked, drawn (assets/charts-lib.js), saved
//   table.js          a tool's rows as a table: sorted, paged, downloaded as CSV
//   feedback.js       thumbs up or down, with a comment, on a reply
//   http.js           API calls, and what a failed response stands for
//   session.js        the tokens the page calls with: kept, renewed, ended
//   problems.js       failures in words
//   busy.js           refused because busy: Retry-After, the wait, reads asked again
//   stream.js         the AI SDK UI message stream's parts from the SSE body
//   markdown.js       Markdown as page elements
//   state.js          the state the modules share, and what is kept across reloads
//   dom.js            $, el and the status line
//
// It talks only to this origin's API: GET api/page (settings), GET api/conversations,
// GET api/conversations/{id}/messages, PATCH and DELETE api/conversations/{id}, GET api/usage
// and POST api/chat, whose reply it reads as the AI SDK UI message stream (v1) when the server
// streams, else as the JSON response. The one exception: when api/page names a stream_url (a
// deployment's streaming Function URL, as this origin's API Gateway buffers), POST api/chat
// goes there. When api/page names an OpenID provider (sign_in), the page signs people in there
// (authorization code + PKCE, navigation to its login page) and posts to its token endpoint,
// the only other origin the Content-Security-Policy lets it reach. Everything a model or a tool
// wrote is put on the page as text nodes or built elements, never as HTML: there is no
// innerHTML in any of these modules, and the Content-Security-Policy allows no inline script
// besides. A request refused because the service is busy (429, 503, from the chat or any gateway
// in front of it) is said as "Parley is busy right now; try again in N s", with a refused
// question back in the message box (busy.js).

import { answerApproval } from "./approvals.js";
import { READ_RETRIES, busyReason, busyText, waitText } from "./busy.js";
import { send, setUpExamples } from "./composer.js";
import { setUpPicker } from "./context.js";
import { closeSidebar, loadConversations, newConversation, openConversation, remove, rename, showTitle, startRename }
  from "./conversations.js";
import { $, el } from "./dom.js";
import { HttpError, UUID, httpError } from "./http.js";
import { showSignIn } from "./session.js";
import { signIn, signOut, startSignIn, startWithProvider } from "./sign-in.js";
import { DRAFT_KEY, TOKEN_KEY, state } from "./state.js";
import { setUpUsage } from "./usage.js";

/** Signed in: the conversations, the one the address names open, and a question a refused turn
 * left behind back in the message box. */
async function showApp() {
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = state.info.auth !== "token";
  $("usage-open").hidden = false;
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
  $("sign-in-form").addEventListener("submit", async (event) => {
    if (await signIn(event)) await showApp();
  });
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
  // A card's Approve or Deny (and Enter in its reason field).
  $("messages").addEventListener("approval-answer", (event) => answerApproval(event.detail.card, event.detail.approved));
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
  setUpUsage();
  if (state.info.sign_in) {
    if (await startWithProvider()) await showApp();
  } else {
    state.token = sessionStorage.getItem(TOKEN_KEY);
    if (state.info.auth === "token" && !state.token) showSignIn();
    else await showApp();
  }
  document.body.dataset.ready = "true";
}

start();
