#!/usr/bin/env python3
"""Checks one HTTP answer for tests/lambda/run (standard library only).

  check.py invoke RESPONSE_FILE EXPR [DETAIL]
      RESPONSE_FILE is what `cargo lambda invoke --output-format json` printed: a Lambda proxy
      response {"statusCode", "headers", "body", "isBase64Encoded", ...}.
  check.py http STATUS HEADERS_FILE BODY_FILE EXPR [DETAIL]
      what `curl -D HEADERS_FILE -o BODY_FILE -w '%{http_code}'` wrote.

EXPR is a Python expression over `s` (the status, an int), `h` (headers, lower-case names),
`raw` (the body text) and `b` (the body parsed as JSON, None when it is not JSON). Exit 0 when
it is true, after printing DETAIL (an expression over the same names) if given; else exit 1
after printing the status and the start of the body.
"""

from __future__ import annotations

import base64
import json
import sys


def load_invoke(path: str) -> tuple[int, dict, str]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    r = json.loads(text[text.index("{") :])  # anything printed before the JSON is not the answer
    body = r.get("body") or ""
    if r.get("isBase64Encoded"):
        body = base64.b64decode(body).decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in (r.get("headers") or {}).items()}
    for k, v in (r.get("multiValueHeaders") or {}).items():
        headers.setdefault(k.lower(), ", ".join(v))
    return int(r["statusCode"]), headers, body


def load_http(status: str, headers_path: str, body_path: str) -> tuple[int, dict, str]:
    headers: dict[str, str] = {}
    with open(headers_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if ":" in line and not line.startswith("HTTP/"):
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
    with open(body_path, encoding="utf-8", errors="replace") as f:
        body = f.read()
    return int(status), headers, body


def main() -> int:
    args = sys.argv[1:]
    try:
        if args[0] == "invoke":
            s, h, raw = load_invoke(args[1])
            rest = args[2:]
        elif args[0] == "http":
            s, h, raw = load_http(args[1], args[2], args[3])
            rest = args[4:]
        else:
            raise ValueError(f"unknown mode {args[0]!r}")
    except Exception as e:  # noqa: BLE001 - any unreadable answer is a failed check
        print(f"unreadable answer: {type(e).__name__}: {e}")
        return 1
    try:
        b = json.loads(raw)
    except ValueError:
        b = None
    names = {"s": s, "h": h, "raw": raw, "b": b, "json": json}
    try:
        ok = bool(eval(rest[0], names))  # noqa: S307 - expressions written in tests/lambda/run
    except Exception as e:  # noqa: BLE001
        ok = False
        print(f"({type(e).__name__}: {e}) ", end="")
    if not ok:
        print(f"status {s}: {raw[:400]}".replace("\n", " "))
        return 1
    if len(rest) > 1:
        try:
            print(eval(rest[1], names))  # noqa: S307
        except Exception as e:  # noqa: BLE001
            print(f"({type(e).__name__}: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
