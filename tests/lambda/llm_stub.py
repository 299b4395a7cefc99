#!/usr/bin/env python3
"""A two-step OpenAI Responses API stand-in for tests/lambda/run (standard library only).

Usage: llm_stub.py PORT_FILE   (binds 127.0.0.1:0, writes the port to PORT_FILE, serves forever)

`POST /v1/responses`:
- a request whose `input` has no `function_call_output` yet, and which offers the `lad_by_ref`
  tool, gets one `function_call` of `lad_by_ref {"ref": "Leeds"}`: the chat function then calls
  the mcp function (through the `cargo lambda watch` URL) and sends the output back;
- any other request gets the assistant message `hello from the stub`, followed by the first
  district code found in the tool output (`hello from the stub (E08000035)`), if there was one.

Every request is appended as one JSON line to PORT_FILE.requests, so the test can see what the
chat function sent. Anything else answers 404.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""

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
