// Sends a question with the AI SDK's own chat client (AbstractChat with its default HTTP
// transport, what `useChat` wraps) as a user over their budget, and prints what the chat
// holds afterwards: {status, error: {name, statusCode, isRetryable, body}, messages}. A
// request refused before its turn began is a 429 with a JSON body, which the transport raises
// as an APICallError carrying the status and the body.
//
// Usage: node ui_quota.mjs URL TOKEN QUESTION   (run by functions/chat/tests/api/quota.rs
// under the Node 22 of node_modules/node)
import { AbstractChat, DefaultChatTransport } from "ai";

const [url, token, question] = process.argv.slice(2);

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

let failure;
const chat = new Chat({
  transport: new DefaultChatTransport({
    api: url,
    headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
  }),
  onError: (e) => {
    failure = e;
  },
});

await chat.sendMessage({ text: question });
const error = failure ?? chat.error;
let body = null;
try {
  body = JSON.parse(error?.responseBody ?? "null");
} catch {
  body = error?.responseBody ?? null;
}
console.log(
  JSON.stringify({
    status: chat.status,
    error: error && {
      name: error.name,
      statusCode: error.statusCode ?? null,
      isRetryable: error.isRetryable ?? null,
      body,
    },
    messages: chat.messages.map((m) => ({ role: m.role, parts: m.parts.map((p) => p.type) })),
  }),
);
