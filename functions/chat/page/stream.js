// The AI SDK UI message stream (v1) as it arrives: a server-sent event body read into its parts,
// in order. What the page shows of each part is turn.js's (readStream).

/** The `data` of each event of an SSE body, as strings, in order. */
export async function* sseData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let cr = ""; // a chunk's last "\r", which may be half of a "\r\n"
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const text = cr + value;
    cr = text.endsWith("\r") ? "\r" : "";
    buffer += text.slice(0, text.length - cr.length).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(l[5] === " " ? 6 : 5));
      if (data.length) yield data.join("\n");
    }
  }
}

/** The stream's parts (JSON objects) until `data: [DONE]`. */
export async function* uiMessageParts(body) {
  for await (const data of sseData(body)) {
    if (data === "[DONE]") return;
    yield JSON.parse(data);
  }
}
