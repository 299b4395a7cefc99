// Reads one streamed chat turn with the AI SDK's own parser, as `useChat` does: POST the body
// to the URL with `Accept: text/event-stream`, parse the server-sent events against the SDK's
// UI message chunk schema, fold them into a UIMessage with `readUIMessageStream`, and print
// {status, protocol, chunks, message} as JSON. Any chunk the SDK rejects, or a sequence it
// cannot fold (a delta for a text part never started, an output for an unknown tool call),
// fails with exit status 1 and the SDK's error on stderr.
//
// Usage: node ui_stream.mjs URL TOKEN BODY_JSON   (run by functions/chat/tests/api/streaming.rs
// under the Node 22 of node_modules/node; `ai` is pinned in package.json)
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from "ai";

const [url, token, body] = process.argv.slice(2);
const response = await fetch(url, {
  method: "POST",
  headers: {
    "content-type": "application/json",
    accept: "text/event-stream",
    authorization: `Bearer ${token}`,
  },
  body,
});
if (!response.ok) {
  console.error(`HTTP ${response.status}: ${await response.text()}`);
  process.exit(1);
}

const chunks = [];
const parsed = parseJsonEventStream({
  stream: response.body,
  schema: uiMessageChunkSchema,
}).pipeThrough(
  new TransformStream({
    transform(part, controller) {
      if (!part.success) {
        throw part.error;
      }
      chunks.push(part.value);
      controller.enqueue(part.value);
    },
  }),
);

let message;
let failure;
for await (const m of readUIMessageStream({
  stream: parsed,
  terminateOnError: true,
  onError: (e) => {
    failure = e;
  },
})) {
  message = m;
}
if (failure) {
  console.error(failure);
  process.exit(1);
}
console.log(
  JSON.stringify({
    status: response.status,
    protocol: response.headers.get("x-vercel-ai-ui-message-stream"),
    chunks,
    message,
  }),
);
