#!/usr/bin/env python3
"""Talks to Parley's OpenAI-compatible endpoint with the official `openai` package, as any
OpenAI client would, and prints what it saw as one JSON object.

Usage: openai_client.py BASE_URL TOKEN [charts]   (BASE_URL is the chat function's, without /v1;
run by functions/chat/tests/api/openai.rs and charts.rs under .parley/venv-interop, which pins
`openai`)

1. `client.models.list()`;
2. a completion, not streamed;
3. a second question in the same conversation (the `x-parley-conversation-id` header the
   first answer carried), streamed with `stream_options={"include_usage": True}`;
4. a completion for a model that does not exist (the client's NotFoundError).

With `charts`, instead: one question not streamed, then one streamed, each in a conversation of
its own, and the content the client read of each (`plain`, `streamed`): an answer with a chart
carries its rows as a Markdown table.
"""

from __future__ import annotations

import json
import sys

import openai

HEADER = "x-parley-conversation-id"


def charts(client: openai.OpenAI) -> dict:
    question = [{"role": "user", "content": "Chart the feedback by sentiment"}]
    plain = client.chat.completions.create(model="parley", messages=question)
    stream = client.chat.completions.create(model="parley", messages=question, stream=True)
    pieces = [
        choice.delta.content
        for chunk in stream
        for choice in chunk.choices
        if choice.delta.content
    ]
    return {"plain": plain.choices[0].message.content, "streamed": "".join(pieces)}


def main() -> None:
    base, token = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0)
    if sys.argv[3:] == ["charts"]:
        print(json.dumps(charts(client)))
        return
    out: dict = {}

    out["models"] = [m.id for m in client.models.list()]

    raw = client.chat.completions.with_raw_response.create(
        model="parley",
        messages=[{"role": "user", "content": "Tell me about Leeds"}],
    )
    first = raw.parse()
    conversation = raw.headers.get(HEADER)
    out["first"] = {
        "content": first.choices[0].message.content,
        "finish_reason": first.choices[0].finish_reason,
        "total_tokens": first.usage.total_tokens if first.usage else None,
        "conversation": conversation,
    }

    stream = client.chat.completions.create(
        model="parley",
        messages=[{"role": "user", "content": "And where is it?"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={HEADER: conversation},
    )
    pieces, finish, usage, chunks = [], None, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    out["second"] = {
        "content": "".join(pieces),
        "pieces": len(pieces),
        "chunks": chunks,
        "finish_reason": finish,
        "total_tokens": usage,
    }

    try:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
        )
        out["wrong_model"] = "answered"
    except openai.NotFoundError as e:
        out["wrong_model"] = e.status_code

    print(json.dumps(out))


if __name__ == "__main__":
    main()
