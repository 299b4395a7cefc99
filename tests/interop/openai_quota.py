#!/usr/bin/env python3
"""Asks Parley's OpenAI-compatible endpoint a question with the official `openai` package
(its default retries on) as a user over their daily token budget, and prints what the client
raised and how many requests it sent, as one JSON object.

Usage: openai_quota.py BASE_URL TOKEN   (run by functions/chat/tests/api/quota.rs under
.parley/venv-interop, which pins `openai`)

The client retries a 429 by itself unless the response says `x-should-retry: false`: a
budget that resets in hours must be raised at once, in one request.
"""

from __future__ import annotations

import json
import sys

import httpx
import openai


def main() -> None:
    base, token = sys.argv[1:3]
    sent = []
    http = httpx.Client(event_hooks={"request": [lambda request: sent.append(str(request.url))]})
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=token, http_client=http, max_retries=2)
    out: dict = {}
    try:
        client.chat.completions.create(
            model="parley", messages=[{"role": "user", "content": "One more question"}]
        )
        out["raised"] = None
    except openai.APIStatusError as e:
        body = e.response.json()
        out.update(
            raised=type(e).__name__,
            status=e.status_code,
            code=e.code,
            type=e.type,
            message=e.message,
            retry_after=e.response.headers.get("retry-after"),
            should_retry=e.response.headers.get("x-should-retry"),
            body=body,
        )
    out["requests"] = len(sent)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
