#!/usr/bin/env python3
"""The scripted model of tests/page/run: an OpenAI Responses API stand-in (standard library only).

Usage: llm_stub.py PORT LOG   (serves 127.0.0.1:PORT until killed)

`POST /v1/responses`, per turn (the items after the request's last user message):
- no `function_call_output` yet: one `function_call` of `list_lads {"upper_tier": "Kent",
  "limit": 3}`, so the page has a tool call whose output is rows;
- otherwise: REPLY, a Markdown answer with a table, emphasis, a link, and HTML and a
  `javascript:` link that the page must show as text, never run.
A request with `"stream": true` is answered as the Responses API streams: the text in small
deltas PACE_S apart (so a page can be seen filling in), then `response.completed` with the
whole response. Each request is appended as one JSON line to LOG.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"input_tokens": 1200, "output_tokens": 80, "total_tokens": 1280}
PACE_S = 0.03
PIECE = 6

REPLY = """Kent has **3 districts** in this list:

| Code | District |
|---|:---|
| E07000105 | Ashford |
| E07000106 | Canterbury |
| E07000107 | Dartford |

Ask about one of them, or see the [ONS codes](https://geoportal.statistics.gov.uk/).
Not markup: <img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> \
[a bad link](javascript:window.__pwned=3) and `<b>code</b>`."""


def turn_items(items: list) -> list:
    """The items of the current turn: those after the last user message."""
    last_user = max(
        (i for i, item in enumerate(items) if isinstance(item, dict) and item.get("role") == "user"),
        default=-1,
    )
    return items[last_user + 1 :]


def answer(body: dict) -> dict:
    items = body.get("input") or []
    done = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in turn_items(items))
    if not done:
        output = [
            {
                "type": "function_call",
                "id": "fc_page_1",
                "call_id": f"call_page_{len(items)}",
                "name": "list_lads",
                "arguments": json.dumps({"upper_tier": "Kent", "limit": 3}),
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": "msg_page_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": REPLY, "annotations": []}],
            }
        ]
    return {"id": "resp_page", "object": "response", "status": "completed", "output": output, "usage": USAGE}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.rstrip("/") != "/v1/responses":
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_json(400, {"error": {"message": "body is not JSON"}})
            return
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(body) + "\n")
        response = answer(body)
        if body.get("stream"):
            self.send_stream(response)
        else:
            self.send_json(200, response)

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, response: dict) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        events = [{"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}]
        for item in response["output"]:
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events += [
                    {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                     "content_index": 0, "delta": text[i : i + PIECE]}
                    for i in range(0, len(text), PIECE)
                ]
        events.append({"type": "response.completed", "response": response})
        for event in events:
            if event["type"] == "response.output_text.delta":
                time.sleep(PACE_S)
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write("llm-stub: " + (fmt % args) + "\n")


def main() -> None:
    Handler.log_path = sys.argv[2]
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()


if __name__ == "__main__":
    main()
