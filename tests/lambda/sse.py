#!/usr/bin/env python3
"""Streamed answers for tests/lambda/checks.py (standard library only): an HTTP POST whose body
is read chunk by chunk with arrival times, server-sent events cut into frames that keep the time
their last byte arrived, and a structural check of the AI SDK UI message stream v1 that
`POST /api/chat` sends with `Accept: text/event-stream` (the parts and their order; the AI SDK's
own parser is run on it elsewhere, by the chat's Node test).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass

Chunks = list[tuple[float, bytes]]  # (time.monotonic() on arrival, bytes)

# The parts the chat sends (design: the UI message stream v1).
PARTS = {"start", "start-step", "finish-step", "text-start", "text-delta", "text-end",
         "tool-input-available", "tool-output-available", "tool-output-error", "source-url",
         "source-document", "finish", "error"}


@dataclass
class Timed:
    """An HTTP answer whose body was read as it arrived."""

    status: int
    headers: dict[str, str]  # lower-case names
    chunks: Chunks
    sent_at: float  # just before the request was written

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.chunks)


def post_timed(url: str, headers: dict[str, str], body: str, timeout: float = 60) -> Timed:
    """POSTs `body` and reads the answer with `read1`, so each read returns what has arrived."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        sent_at = time.monotonic()
        conn.request("POST", u.path + (f"?{u.query}" if u.query else ""), body=body.encode(),
                     headers=headers)
        response = conn.getresponse()
        chunks: Chunks = []
        while data := response.read1(65536):
            chunks.append((time.monotonic(), data))
        return Timed(response.status, {k.lower(): v for k, v in response.getheaders()}, chunks, sent_at)
    finally:
        conn.close()


def frames(chunks: Chunks) -> list[tuple[float, str]]:
    """The events' `data` (several `data:` lines joined by newlines), each with the arrival time
    of the chunk that completed it. Comments and other fields are dropped."""
    out: list[tuple[float, str]] = []
    pending = ""
    for at, data in chunks:
        pending += data.decode("utf-8", "replace").replace("\r\n", "\n")
        while "\n\n" in pending:
            event, pending = pending.split("\n\n", 1)
            lines = [line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")]
            if lines:
                out.append((at, "\n".join(lines)))
    return out


def ui_stream_problems(data: list[str]) -> list[str]:
    """What is wrong with a UI message stream's frames; empty when it is well formed: `start`
    (with `messageMetadata.conversationId`) first, steps and texts opened before they are used and
    closed in order, each tool output after its input, then `finish` (or `error`) and
    `data: [DONE]` last."""
    problems: list[str] = []
    if not data or data[-1] != "[DONE]":
        problems.append(f"the last frame is {data[-1:]!r}, not [DONE]")
    parts = []
    for raw in data[:-1] if data and data[-1] == "[DONE]" else data:
        try:
            part = json.loads(raw)
            parts.append(part if isinstance(part, dict) else {"type": None})
        except ValueError:
            problems.append(f"a frame is not JSON: {raw[:120]!r}")
    if not parts:
        return problems + ["no parts"]
    kinds = [p.get("type") for p in parts]
    if kinds[0] != "start":
        problems.append(f"the first part is {kinds[0]!r}, not start")
    elif len(str((parts[0].get("messageMetadata") or {}).get("conversationId", ""))) != 36:
        problems.append(f"start has no conversationId in messageMetadata: {parts[0]}")
    if kinds[-1] not in ("finish", "error"):
        problems.append(f"the last part is {kinds[-1]!r}, not finish or error")
    in_step, texts, tools = False, set(), set()
    for part, kind in zip(parts, kinds):
        if kind not in PARTS and not str(kind).startswith("data-"):
            problems.append(f"unknown part type {kind!r}")
        elif kind == "start-step":
            if in_step:
                problems.append("start-step inside a step")
            in_step = True
        elif kind == "finish-step":
            if not in_step or texts:
                problems.append("finish-step outside a step or with a text still open")
            in_step = False
        elif kind == "text-start":
            texts.add(part.get("id"))
        elif kind == "text-delta":
            if part.get("id") not in texts or not isinstance(part.get("delta"), str):
                problems.append(f"text-delta without its text-start, or without a delta: {part}")
        elif kind == "text-end":
            texts.discard(part.get("id"))
        elif kind == "tool-input-available":
            tools.add(part.get("toolCallId"))
        elif kind in ("tool-output-available", "tool-output-error") and part.get("toolCallId") not in tools:
            problems.append(f"{kind} before its tool-input-available: {part}")
    if in_step:
        problems.append("a step is never finished")
    return problems


def parts_of(data: list[str]) -> list[dict]:
    """The frames' JSON parts ([DONE] and anything not JSON left out)."""
    out = []
    for raw in data:
        try:
            part = json.loads(raw)
        except ValueError:
            continue
        if isinstance(part, dict):
            out.append(part)
    return out
