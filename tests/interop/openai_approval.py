#!/usr/bin/env python3
"""Approves a tool call through Parley's OpenAI-compatible endpoint with the official `openai`
package, as a stateless OpenAI client would, and prints what it saw as one JSON object.

Usage: openai_approval.py BASE_URL TOKEN   (run by functions/chat/tests/api/openai_approvals.rs
under .parley/venv-interop, with a model scripted to call the destructive `delete_task`)

1. "Delete my passport task": the turn pauses and the reply asks for approval;
2. the whole history again plus "yes", with no conversation id (as Open WebUI and LibreChat
   send it): the question's reference line leads the answer to the paused conversation, the
   call runs and the model answers;
3. the same request again, as a client retrying after a lost answer: the stored outcome.
"""

from __future__ import annotations

import json
import sys

import openai

HEADER = "x-parley-conversation-id"


def main() -> None:
    base, token = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0)
    history = [{"role": "user", "content": "Delete my passport task"}]
    raw = client.chat.completions.with_raw_response.create(model="parley", messages=history)
    paused = raw.parse()
    question = paused.choices[0].message.content
    history += [
        {"role": "assistant", "content": question},
        {"role": "user", "content": "yes"},
    ]
    answered = client.chat.completions.with_raw_response.create(model="parley", messages=history)
    resumed = answered.parse()
    retried = client.chat.completions.create(model="parley", messages=history)
    print(
        json.dumps(
            {
                "question": question,
                "answer": resumed.choices[0].message.content,
                "same_conversation": answered.headers.get(HEADER) == raw.headers.get(HEADER),
                "retried_status": (retried.model_extra or {}).get("parley", {}).get("status"),
            }
        )
    )


if __name__ == "__main__":
    main()
