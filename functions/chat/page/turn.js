// One turn: POST api/chat (or PAGE_STREAM_URL's), its reply read as it streams (the AI SDK UI
// message stream's parts onto a ReplyView) or as the JSON answer, Stop in place of Send while it
// runs, and the conversation it belongs to made the open one.

import { ReplyView } from "./reply.js";
import { loadConversations, markCurrent, scrollDown, showTitle } from "./conversations.js";
import { $, setStatus } from "./dom.js";
import { HttpError, api } from "./http.js";
import { fromSummary } from "./problems.js";
import { SessionEnded } from "./session.js";
import { state } from "./state.js";
import { uiMessageParts } from "./stream.js";

/**
 * One turn: POST api/chat with `body`, read as it streams (or as JSON) into a new reply.
 * `settled(status)` says whether a finished turn is one to throw away (its reply is shown
 * otherwise), `failed(error)` whether a refused one is. Returns `{conversationId, problem,
 * settled, busy, refused}` (`refused`: refused because busy, nothing shown of it yet but a
 * stored failure); cards the turn paused at get the focus.
 */
export async function runTurn(body, { settled = () => false, failed = () => false } = {}) {
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
      case "data-chart":
        // A show_chart call's chart, right after that call's output.
        view.chart(part.id, part.data);
        scrollDown();
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
