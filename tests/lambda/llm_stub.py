#!/usr/bin/env python3
"""A two-step OpenAI Responses API stand-in for tests/lambda/run (standard library only).

Usage: llm_stub.py PORT_FILE   (binds 127.0.0.1:0, writes the port to PORT_FILE, serves forever)

`POST /v1/responses`:
- a request whose `input` has no `function_call_output` yet, and which offers the `lad_by_ref`
  tool, gets one `function_call` of `lad_by_ref {"ref": "Leeds"}`: the chat function then calls
  the mcp function (through the `cargo lambda watch` URL) and sends the output back;
- any other request gets the assistant message `hello from the stub`, followed by the first
  district code found in the tool output (`hello from the stub (E08000035)`), if there was one.

A request with `"stream": true` gets the same answer as the Responses API streams it, as
server-sent events (`response.created`, the output items with their
`response.function_call_arguments.*` or `response.output_text.delta` events, then
`response.completed` carrying the whole response), one HTTP chunk per event. The text comes in
pieces of 4 characters, each sent `Handler.pace` seconds after the one before (default
`LLM_STUB_PACE_MS`, else 40 ms), so a test can see it arrive over time.

Every request is appended as one JSON line to PORT_FILE.requests, so the test can see what the
chat function sent. Anything else answers 404.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}


def reply(body: dict) -> dict:
    items = body.get("input") or []
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if not outputs and "lad_by_ref" in tools:
        return {
            "id": "resp_stub_1",
            "status": "completed",
            "output": [
                {
                    "type": "function_call",
                    "id": "fc_stub_1",
                    "call_id": "call_stub_1",
                    "name": "lad_by_ref",
                    "arguments": json.dumps({"ref": "Leeds"}),
                }
            ],
            "usage": USAGE,
        }
    text = "hello from the stub"
    codes = re.findall(r"\b[EW]0\d{7}\b", " ".join(str(o.get("output", "")) for o in outputs))
    if codes:
        text += f" ({codes[0]})"
    return {
        "id": "resp_stub_2",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }
        ],
        "usage": USAGE,
    }


def stream_events(response: dict) -> Iterator[tuple[str, dict]]:
    """`response` as the Responses API streams it: (event name, data) pairs. Each text delta
    comes after an empty pair, `("", {})`: the place `Handler.stream` pauses."""
    yield "response.created", {"response": dict(response, status="in_progress", output=[])}
    for index, item in enumerate(response["output"]):
        if item["type"] == "function_call":
            yield "response.output_item.added", {"output_index": index, "item": dict(item, arguments="")}
            where = {"item_id": item["id"], "output_index": index}
            yield "response.function_call_arguments.delta", dict(where, delta=item["arguments"])
            yield "response.function_call_arguments.done", dict(where, arguments=item["arguments"])
            yield "response.output_item.done", {"output_index": index, "item": item}
            continue
        text = item["content"][0]["text"]
        item = dict(item, id=f"msg_stub_{index}", status="completed")
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        yield "response.output_item.added", {
            "output_index": index, "item": dict(item, content=[], status="in_progress")}
        yield "response.content_part.added", dict(where, part={"type": "output_text", "text": ""})
        for start in range(0, len(text), 4):
            yield "", {}  # the pause
            yield "response.output_text.delta", dict(where, delta=text[start:start + 4])
        yield "response.output_text.done", dict(where, text=text)
        yield "response.content_part.done", dict(where, part={"type": "output_text", "text": text})
        yield "response.output_item.done", {"output_index": index, "item": item}
    yield "response.completed", {"response": response}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""
    # Seconds before each streamed text piece.
    pace = int(os.environ.get("LLM_STUB_PACE_MS") or 40) / 1000

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/responses":
            self.send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send(400, {"error": {"message": "body is not JSON"}})
            return
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(body) + "\n")
        if body.get("stream") is True:
            self.stream(reply(body))
        else:
            self.send(200, reply(body))

    def setup(self) -> None:
        super().setup()
        # Answers are one write with Nagle off: a reply split into a header segment and a body
        # segment would wait for the client's delayed ACK (about 40 ms on Linux) and the stub,
        # not the function, would dominate the measured times.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        ).encode()
        self.log_request(status)
        self.wfile.write(head + data)

    def stream(self, response: dict) -> None:
        """`response` as server-sent events, one chunk each (chunked transfer encoding)."""
        self.log_request(200)
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        sequence = 0
        for name, data in stream_events(response):
            if not name:
                time.sleep(self.pace)
                continue
            payload = json.dumps({"type": name, "sequence_number": sequence, **data})
            frame = f"event: {name}\ndata: {payload}\n\n"
            sequence += 1
            raw = frame.encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write("llm-stub: " + (fmt % args) + "\n")


def main() -> None:
    port_file = sys.argv[1]
    Handler.log_path = port_file + ".requests"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
