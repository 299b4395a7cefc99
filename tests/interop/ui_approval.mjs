// Drives a turn that waits for the user's approval with the AI SDK's own chat client, as
// `useChat` does (AbstractChat is what `useChat` wraps, with its default HTTP transport):
// `sendMessage` streams the question's turn until its tool part is `approval-requested`,
// `addToolApprovalResponse` answers it, and `sendAutomaticallyWhen:
// lastAssistantMessageIsCompleteWithApprovalResponses` sends the answer as the next request and
// reads the resumed turn into the same assistant message. Prints
// {paused, requests, messages}: the assistant message at the pause, the JSON bodies sent, and
// the chat's messages at the end. Any error of the SDK (a chunk it rejects, a request that
// fails) ends with exit status 1 and the error on stderr.
//
// Usage: node ui_approval.mjs URL TOKEN QUESTION approve|deny   (run by
// functions/chat/tests/api/streamed_approvals.rs under the Node 22 of node_modules/node)
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const [url, token, question, decision] = process.argv.slice(2);
if (decision !== "approve" && decision !== "deny") {
  console.error("usage: node ui_approval.mjs URL TOKEN QUESTION approve|deny");
  process.exit(2);
}

// The chat's state kept in memory: what a UI framework's binding keeps reactive.
class MemoryState {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new MemoryState() });
  }
}

const requests = [];
let failure;
let finished;
const settled = () =>
  new Promise((resolve) => {
    finished = resolve;
  });

const chat = new Chat({
  transport: new DefaultChatTransport({
    api: url,
    // Parley streams when asked for the event stream; the transport's body is its own.
    headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
    fetch: async (input, init) => {
      requests.push(JSON.parse(init.body));
      return fetch(input, init);
    },
  }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (e) => {
    failure = e;
  },
  onFinish: () => finished?.(),
});

const fail = (why) => {
  console.error(why);
  process.exit(1);
};

await chat.sendMessage({ text: question });
if (failure) fail(failure);
const paused = structuredClone(chat.messages.at(-1));
const waiting = paused.parts.find((p) => p.state === "approval-requested");
if (!waiting) fail(`no part awaits approval: ${JSON.stringify(paused)}`);

const resumed = settled();
await chat.addToolApprovalResponse({
  id: waiting.approval.id,
  approved: decision === "approve",
  ...(decision === "deny" ? { reason: "I still need it" } : {}),
});
const timeout = setTimeout(() => fail("the resumed turn did not finish within 30 s"), 30_000);
await resumed;
clearTimeout(timeout);
if (failure) fail(failure);
if (chat.status !== "ready") fail(`the chat ended ${chat.status}`);

console.log(JSON.stringify({ paused, requests, messages: chat.messages }));
