#!/usr/bin/env python3
"""The checks of tests/lambda/run (standard library only), run once it has installed the tools,
built the workspace and made a database:

  checks.py --db-url URL --cargo-lambda PATH --bin-dir DIR [--interop-python PATH] [--passed N]

1. Starts the stub LLM (the testkit's `parley-llm-stub` from DIR, serving llm_script.json: one
   lad_by_ref call, then a reply), `cargo lambda watch --only-lambda-apis` on 127.0.0.1 and
   the two functions from DIR (the workspace's debug build) as that emulator's Lambda runtime
   clients, so the real lambda_http loop serves every request below.
2. (a) every event in events/ through `cargo lambda invoke <function> --data-file` (a streamed
       turn's event, answered whole here, is read as it streams in (e));
   (b) the Function URL emulation with curl on /lambda-url/<function>/...;
   (c) the official MCP Python SDK (tests/interop/python_client.py) through
       /lambda-url/mcp/mcp, when --interop-python is given;
   (d) the chat with LAMBDA_RESPONSE_STREAMING=true under a second watch server (as `chat`: it
       serves only functions named after the workspace's binaries): /health, a JSON turn and a
       refusal still answer as before, and a turn
       asked for with `Accept: text/event-stream` arrives as server-sent events while the stub
       LLM is still writing (skipped, saying so, while POST /api/chat answers such a request
       with JSON);
   (e) the chat under runtime_api.py, a Lambda Runtime API emulator that records each chunk of
       a response with its arrival time: buffered by default, and with
       LAMBDA_RESPONSE_STREAMING=true the streamed prelude (status, headers), the body after
       it, and the event-stream turn's body in several chunks spread over the stub's pace; then
       as the template's page REST API (v1 events, stage `chat`) invokes it: the page, api/page
       naming no stream_url (one origin), and events/rest-v1-chat-stream-turn.json, whose
       prelude must be what API Gateway's streaming format accepts (statusCode, one value per
       header, cookies), then 8 NUL bytes, then the body in several chunks;
   (f) parley-admin, the migration function, with the custom-resource events events/admin-*.json
       against the empty database --admin-db-url (admin.py: moto for the secrets, a local
       receiver for CloudFormation's ResponseURL), and a direct `audit`;
   (g) the ingest function with the S3 events events/ingest-*.json against moto's S3 and SQS
       (ingest.py): create, overwrite, a duplicate, an older event late, a corrupt file
       dead-lettered, the settings object, a delete, and an event arriving after the delete.
Prints one `ok:`/`FAIL:` line per check (`skip:` for a check that cannot run yet) and `lambda: N passed, N failed` (N counting --passed,
the setup checks tests/lambda/run made); exits 1 if anything failed. KEEP_WORK=1 keeps the logs.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import sse  # noqa: E402 - beside this file
from coldstart import free_port, stop  # noqa: E402 - beside this file
from admin import run_admin  # noqa: E402 - beside this file
from ingest import run_ingest  # noqa: E402 - beside this file
from runtime_api import (  # noqa: E402 - beside this file
    Invocation, RuntimeApi, function_url_event, prelude_problems, rest_v1_event,
)

MCP_TOKEN = "local-mcp-token"  # the token the events carry
JWT_SECRET = "local-dev-secret-change-me-0123456789"  # the secret the events' JWTs are signed with
# Both demo domains, as TOOLS_FILE below serves them.
TOOLS = sorted(["feedback_stats", "get_feedback", "lad_by_ref", "list_lads", "search_feedback",
                "list_tasks", "create_task", "update_task", "complete_task", "delete_task"])
LEEDS = "E08000035"


# --- answers and checks ------------------------------------------------------------------------


@dataclass
class Answer:
    """One HTTP answer, whichever way it came (a Lambda proxy response or curl)."""

    status: int
    headers: dict[str, str]  # lower-case names
    text: str

    @property
    def json(self):
        return json.loads(self.text)


Expect = Callable[[Answer], bool]
Detail = Callable[[Answer], str]


@dataclass
class Checks:
    passed: int = 0
    failed: int = 0
    logs: list[Path] = field(default_factory=list)  # shown (warnings, errors) when a check fails

    def ok(self, what: str) -> None:
        self.passed += 1
        print(f"ok: {what}", flush=True)

    def fail(self, what: str) -> None:
        self.failed += 1
        print(f"FAIL: {what}", flush=True)

    def skip(self, what: str) -> None:
        """A check that cannot run on this branch yet; counted neither way."""
        print(f"skip: {what}", flush=True)

    def verdict(self, name: str, problems: list[str], detail: str, marks: list[int]) -> None:
        """ok with `detail`, or FAIL with the problems and the logs' warnings since `marks`."""
        if problems:
            self.fail(f"{name}: {'; '.join(problems)}"[:1500])
            self.show_log_errors(marks)
        else:
            self.ok(f"{name} ({detail})")

    def check(self, name: str, get: Callable[[], Answer], expect: Expect, detail: Detail | None = None) -> Answer | None:
        marks = [log_size(p) for p in self.logs]
        try:
            answer = get()
        except Exception as e:  # noqa: BLE001 - an answer we cannot read is a failed check
            self.fail(f"{name}: {e}")
            self.show_log_errors(marks)
            return None
        try:
            good = bool(expect(answer))
            why = "" if good else f"status {answer.status}: {answer.text[:400]}"
        except Exception as e:  # noqa: BLE001 - e.g. a field missing from the body
            good, why = False, f"({type(e).__name__}: {e}) status {answer.status}: {answer.text[:400]}"
        if not good:
            self.fail(f"{name}: {why}".replace("\n", " "))
            self.show_log_errors(marks)
            return answer
        note = ""
        if detail:
            try:
                note = f" ({detail(answer)})"
            except Exception as e:  # noqa: BLE001
                note = f" ({type(e).__name__}: {e})"
        self.ok(name + note)
        return answer

    def show_log_errors(self, marks: list[int]) -> None:
        """The functions' warnings and errors logged since the check began: why it failed."""
        for path, mark in zip(self.logs, marks):
            for line in read_log(path, mark).splitlines():
                if re.search(r"WARN|ERROR|panicked", line) and "AWS_LAMBDA_MAX_CONCURRENCY" not in line:
                    print(f"  {path.name}: {line[:300]}", flush=True)


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def read_log(path: Path, start: int = 0) -> str:
    """A log without ANSI colours, from byte offset `start`."""
    with open(path, "rb") as f:
        f.seek(start)
        return re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode("utf-8", "replace"))


# --- the servers -------------------------------------------------------------------------------


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def start_llm_stub(bin_dir: str, work: Path, procs: list[subprocess.Popen]) -> str:
    """The testkit's scripted LLM (DIR/parley-llm-stub) serving LLM_SCRIPT at LLM_PACE; its
    requests go to WORK/llm.requests as JSON lines, its log to WORK/llm.log. Its base URL, or
    "" if it did not start within 10 s."""
    url_file = work / "llm.url"
    proc = subprocess.Popen(
        [str(Path(bin_dir) / "parley-llm-stub"), "--script", str(LLM_SCRIPT),
         "--requests", str(work / "llm.requests"), "--pace-ms", str(round(LLM_PACE * 1000)),
         "--url-file", str(url_file)],
        stdout=subprocess.DEVNULL, stderr=open(work / "llm.log", "wb"),  # noqa: SIM115
        stdin=subprocess.DEVNULL,
    )
    procs.append(proc)
    deadline = time.monotonic() + 10
    while not url_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return url_file.read_text().strip() if url_file.exists() else ""


def event_hosts(events: list[Path]) -> str:
    """The events' Host headers, so the mcp function accepts them (the shared mcp events say
    127.0.0.1; a deployment lists its API Gateway / Function URL domain), plus loopback."""
    hosts = {"127.0.0.1", "localhost"}
    for path in events:
        for k, v in (json.loads(path.read_text()).get("headers") or {}).items():
            if k.lower() == "host" and v:
                hosts.add(v.split(":")[0])
    return ",".join(sorted(hosts))


def user_jwt(sub: str) -> str:
    """A user token of our own, signed with the events' secret (HS256, an hour)."""

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    def part(obj: dict) -> bytes:
        return b64(json.dumps(obj, separators=(",", ":")).encode())

    signing = part({"alg": "HS256", "typ": "JWT"}) + b"." + part({"sub": sub, "exp": int(time.time()) + 3600})
    return (signing + b"." + b64(hmac.new(JWT_SECRET.encode(), signing, hashlib.sha256).digest())).decode()


# --- (a) the events, with cargo lambda invoke ----------------------------------------------------


def invoke(cargo_lambda: str, port: int, function: str, event: Path) -> Answer:
    r = subprocess.run(
        [cargo_lambda, "lambda", "invoke", function, "--invoke-address", "127.0.0.1",
         "--invoke-port", str(port), "--data-file", str(event), "--output-format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"cargo lambda invoke exited {r.returncode}: {(r.stderr or r.stdout)[:300]}")
    proxy = json.loads(r.stdout[r.stdout.index("{"):])  # anything printed before the JSON is not the answer
    body = proxy.get("body") or ""
    if proxy.get("isBase64Encoded"):
        body = base64.b64decode(body).decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in (proxy.get("headers") or {}).items()}
    for k, v in (proxy.get("multiValueHeaders") or {}).items():
        headers.setdefault(k.lower(), ", ".join(v))
    return Answer(int(proxy["statusCode"]), headers, body)


def event_order(event: Path) -> int:
    """Chat turns first (they make the conversations the other events list), mcp last."""
    name = event.name
    for rank, word in ((3, "mcp"), (2, "messages"), (1, "conversations")):
        if word in name:
            return rank
    return 0


def with_conversation(event: Path, conversation: str, out: Path) -> Path:
    """The event with the conversation id in its path replaced by `conversation`."""
    text = event.read_text()
    for old in set(re.findall(r"/conversations/([0-9a-f-]{36})/", text)):
        text = text.replace(old, conversation)
    out.write_text(text)
    return out


def tools_listed(a: Answer) -> bool:
    return a.status == 200 and sorted(t["name"] for t in a.json["result"]["tools"]) == TOOLS


def leeds_found(a: Answer) -> bool:
    result = a.json["result"]
    return a.status == 200 and result["isError"] is False and result["structuredContent"]["rows"][0]["code"] == LEEDS


def turn_answered(a: Answer) -> bool:
    b = a.json
    return (
        a.status == 200
        and b["reply"].startswith("hello from the stub")
        and len(b["conversation_id"]) == 36
        and [t["name"] for t in b["traces"]] == ["lad_by_ref"]
        and b["traces"][0]["output"]["rows"][0]["code"] == LEEDS
    )


def whole_event_stream_turn(a: Answer) -> bool:
    """A streamed turn answered in one body: the UI message stream, well formed, with the stub's
    lad_by_ref call and reply."""
    data = [d for _, d in sse.frames([(0.0, a.text.encode())])]
    parts = sse.parts_of(data)
    text = "".join(str(p.get("delta", "")) for p in parts if p.get("type") == "text-delta")
    tools = [p.get("toolName") for p in parts if p.get("type") == "tool-input-available"]
    return (a.status == 200 and a.headers.get("content-type", "").startswith("text/event-stream")
            and not sse.ui_stream_problems(data) and tools == ["lad_by_ref"]
            and text.startswith("hello from the stub"))


def turn_detail(a: Answer) -> str:
    b = a.json
    return f"200, reply {b['reply']!r}, trace lad_by_ref -> {b['traces'][0]['output']['rows'][0]['code']}"


def error_is(status: int, code: str) -> Expect:
    return lambda a: a.status == status and a.json["error"]["code"] == code


def run_events(checks: Checks, cargo_lambda: str, port: int, work: Path, events: list[Path]) -> None:
    turn_conversation = ""  # the first chat turn's: the list and messages events read it back
    for event in sorted(events, key=lambda e: (event_order(e), e.name)):
        base, shown = event.stem, f"events/{event.name}"
        if base.startswith(("admin-", "ingest-")):
            continue  # parley-admin's and the ingest function's, (f) and (g) below

        def call(function: str, path: Path = event) -> Callable[[], Answer]:
            return lambda: invoke(cargo_lambda, port, function, path)

        if "mcp" in base and ("tools-list" in base or "tools_list" in base):
            checks.check(f"invoke mcp {shown}", call("mcp"), tools_listed,
                         lambda a: f"{a.status}, {len(a.json['result']['tools'])} tools")
        elif "mcp" in base and ("tools-call" in base or "tools_call" in base):
            checks.check(f"invoke mcp {shown}", call("mcp"), leeds_found, lambda a: (
                f"{a.status}, {a.json['result']['structuredContent']['rows'][0]['code']} "
                f"{a.json['result']['structuredContent']['rows'][0]['name']}"))
        elif "messages" in base:
            # As shipped, the event names a conversation this fresh database does not have: 404.
            checks.check(f"invoke chat {shown}", call("chat"),
                         lambda a: error_is(404, "conversation_not_found")(a)
                         or a.status == 200 and isinstance(a.json["messages"], list),
                         lambda a: f"{a.status} {a.json.get('error', {}).get('code', '')}")
            if not turn_conversation:
                checks.fail(f"invoke chat {shown} with the chat turn's conversation: no chat-turn event made one")
                continue
            # The same event pointed at the conversation the chat-turn event made: its history.
            own = with_conversation(event, turn_conversation, work / f"{base}.own.json")
            checks.check(
                f"invoke chat {shown}", call("chat", own),
                lambda a: a.status == 200 and a.json["conversation_id"] == turn_conversation
                and [m["role"] for m in a.json["messages"]] == ["user", "assistant"]
                and a.json["messages"][1]["content"].startswith("hello from the stub")
                and a.json["messages"][1]["traces"][0]["name"] == "lad_by_ref",
                lambda a: f"with the chat-turn event's conversation id: {a.status}, {len(a.json['messages'])} messages")
        elif "stream" in base:
            # A streamed turn's event (the page's REST API, Accept: text/event-stream): the
            # buffered chat answers it whole; (e) sends it to the streaming chat.
            checks.check(f"invoke chat {shown}", call("chat"), whole_event_stream_turn,
                         lambda a: f"{a.status} {a.headers.get('content-type')}, the stub's reply "
                         "and its lad_by_ref call as UI message stream parts, in one body")
        elif "conversations" in base:
            checks.check(f"invoke chat {shown}", call("chat"),
                         lambda a: a.status == 200 and isinstance(a.json["conversations"], list)
                         and (not turn_conversation or turn_conversation in [c["id"] for c in a.json["conversations"]]),
                         lambda a: f"{a.status}, {len(a.json['conversations'])} conversation(s), the chat-turn event's included")
        elif "chat" in base:
            answer = checks.check(f"invoke chat {shown}", call("chat"), turn_answered, turn_detail)
            # The shared events are all signed for one user, so the others see this conversation.
            if answer and answer.status == 200 and not turn_conversation:
                turn_conversation = answer.json.get("conversation_id", "")
        else:
            checks.fail(f"invoke {shown}: no check for this event in tests/lambda/checks.py")


# --- (b) the Function URL emulation, with curl -------------------------------------------------


def curl(work: Path, *args: str) -> Answer:
    """One curl through the watch server; the answer is also kept in WORK."""
    n = len(list(work.glob("curl-*.h"))) + 1
    head, body = work / f"curl-{n}.h", work / f"curl-{n}.b"
    r = subprocess.run(["curl", "-s", "--max-time", "60", "-D", str(head), "-o", str(body),
                        "-w", "%{http_code}", *args], capture_output=True, text=True, check=False)
    headers = {}
    for line in head.read_text(errors="replace").splitlines() if head.exists() else []:
        if ":" in line and not line.startswith("HTTP/"):
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return Answer(int(r.stdout or 0), headers, body.read_text(errors="replace") if body.exists() else "")


def run_function_urls(checks: Checks, base: str, work: Path) -> None:
    mcp_url, chat_url = f"{base}/lambda-url/mcp/mcp", f"{base}/lambda-url/chat/api/chat"
    jwt = user_jwt("lambda-run-curl")
    user = ["-H", f"Authorization: Bearer {jwt}"]
    token = ["-H", f"Authorization: Bearer {MCP_TOKEN}"]
    json_post = ["-X", "POST", "-H", "Content-Type: application/json"]

    def mcp(body: dict, *extra: str) -> Callable[[], Answer]:
        return lambda: curl(work, *json_post, mcp_url, "-H", "Accept: application/json, text/event-stream",
                            "-H", "MCP-Protocol-Version: 2025-06-18", "-d", json.dumps(body), *extra)

    def get(*args: str) -> Callable[[], Answer]:
        return lambda: curl(work, *args)

    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    leeds = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "lad_by_ref", "arguments": {"ref": "Leeds"}}}
    bearer_challenge = lambda a: a.headers.get("www-authenticate", "").startswith("Bearer")  # noqa: E731

    checks.check("curl POST /lambda-url/mcp/mcp tools/list", mcp(tools_list, *token), tools_listed,
                 lambda a: f"{a.status}, {len(a.json['result']['tools'])} tools")
    checks.check("curl POST /lambda-url/mcp/mcp tools/call lad_by_ref Leeds", mcp(leeds, *token), leeds_found,
                 lambda a: f"{a.status}, {a.json['result']['structuredContent']['rows'][0]['code']}")
    checks.check("curl POST /lambda-url/mcp/mcp without a token -> 401", mcp(tools_list),
                 lambda a: error_is(401, "unauthorized")(a) and bearer_challenge(a))
    checks.check("curl POST /lambda-url/mcp/mcp with a foreign Host -> 403",
                 mcp(tools_list, *token, "-H", "Host: evil.example"), error_is(403, "forbidden"))

    turn = checks.check("curl POST /lambda-url/chat/api/chat",
                        get(*json_post, chat_url, *user, "-d", json.dumps(
                            {"message": "Tell me about Leeds",
                             "context": {"district": {"code": LEEDS, "label": "Leeds"}}})),
                        turn_answered, turn_detail)
    try:
        conversation = turn.json["conversation_id"] if turn else ""
    except (ValueError, KeyError):
        conversation = ""
    conversation = conversation or "00000000-0000-4000-8000-000000000000"
    checks.check("curl POST /lambda-url/chat/api/chat, same conversation",
                 get(*json_post, chat_url, *user, "-d",
                     json.dumps({"message": "And again?", "conversation_id": conversation})),
                 lambda a: a.status == 200 and a.json["conversation_id"] == conversation,
                 lambda a: f"{a.status}, reply {a.json['reply']!r}")
    checks.check("curl GET /lambda-url/chat/api/conversations",
                 get(f"{base}/lambda-url/chat/api/conversations?limit=5", *user),
                 lambda a: a.status == 200 and [c["id"] for c in a.json["conversations"]] == [conversation]
                 and a.json["conversations"][0]["message_count"] == 4,
                 lambda a: f"{a.status}, {len(a.json['conversations'])} conversation, "
                 f"{a.json['conversations'][0]['message_count']} messages")
    checks.check("curl GET /lambda-url/chat/api/conversations/{id}/messages",
                 get(f"{base}/lambda-url/chat/api/conversations/{conversation}/messages", *user),
                 lambda a: a.status == 200
                 and [m["role"] for m in a.json["messages"]] == ["user", "assistant", "user", "assistant"],
                 lambda a: f"{a.status}, {len(a.json['messages'])} messages")
    checks.check("curl GET /lambda-url/chat/api/conversations/{unknown id}/messages -> 404",
                 get(f"{base}/lambda-url/chat/api/conversations/{uuid.uuid4()}/messages", *user),
                 error_is(404, "conversation_not_found"))
    checks.check("curl POST /lambda-url/chat/api/chat without a token -> 401",
                 get(*json_post, chat_url, "-d", '{"message": "hi"}'),
                 lambda a: error_is(401, "unauthorized")(a) and bearer_challenge(a))
    checks.check("curl POST /lambda-url/chat/api/chat malformed JSON -> 400",
                 get(*json_post, chat_url, *user, "-d", '{"message":'), error_is(400, "invalid_json"))
    checks.check("curl GET /lambda-url/chat/nowhere -> 404 JSON, x-request-id set",
                 get(f"{base}/lambda-url/chat/nowhere"),
                 lambda a: error_is(404, "not_found")(a) and len(a.headers.get("x-request-id", "")) >= 32,
                 lambda a: f"request id {a.headers['x-request-id']}")
    checks.check("curl GET /lambda-url/chat/api/chat -> 405 JSON, the caller's x-request-id echoed",
                 get(chat_url, "-H", "x-request-id: lambda-test-42"),
                 lambda a: error_is(405, "method_not_allowed")(a) and a.headers.get("x-request-id") == "lambda-test-42")


# --- (c) the official MCP Python SDK through the watch URL ---------------------------------------


def run_python_sdk(checks: Checks, interop_python: str, base: str) -> None:
    marks = [log_size(p) for p in checks.logs]
    env = dict(os.environ, PARLEY_MCP_URL=f"{base}/lambda-url/mcp/mcp", PARLEY_MCP_TOKEN=MCP_TOKEN)
    try:
        r = subprocess.run([interop_python, str(ROOT / "tests/interop/python_client.py")], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        checks.fail("python-sdk: python_client.py did not finish within 120 s")
        return
    failed_before = checks.failed
    for line in r.stdout.splitlines():
        m = re.match(r"^(ok|FAIL): python-sdk (.*)", line)
        if m:
            what = f"python-sdk via /lambda-url/mcp/mcp: {m.group(2)}"
            checks.ok(what) if m.group(1) == "ok" else checks.fail(what)
    if r.returncode != 0 and checks.failed == failed_before:
        print(r.stderr[-2000:], file=sys.stderr)
        checks.fail(f"python-sdk: python_client.py exited {r.returncode} without reporting a failed check")
    if checks.failed != failed_before:
        checks.show_log_errors(marks)


# --- (d) and (e): the chat in streaming mode ----------------------------------------------------

STREAM_FUNCTION = "chat-stream"  # the template's streaming chat, `<stack>-chat-stream`
STREAMING = "streaming mode, second watch server"
TURN = {"message": "Tell me about Leeds"}
LLM_SCRIPT = HERE / "llm_script.json"
# Seconds between the stub's streamed text pieces: the script's pace, or LLM_STUB_PACE_MS.
LLM_PACE = int(os.environ.get("LLM_STUB_PACE_MS")
               or json.loads(LLM_SCRIPT.read_text())["pace"]["every_ms"]) / 1000


def start_function(checks: Checks, procs: list[subprocess.Popen], bin_dir: str, binary: str,
                   name: str, runtime_api: str, settings: dict[str, str], log: Path) -> subprocess.Popen:
    """`binary` of the build as the Lambda function `name`, polling `runtime_api`; its log joins
    the ones a failed check shows."""
    checks.logs.append(log)
    proc = subprocess.Popen(
        [str(Path(bin_dir) / binary)],
        env=dict(settings, AWS_LAMBDA_RUNTIME_API=runtime_api, AWS_LAMBDA_FUNCTION_NAME=name,
                 AWS_LAMBDA_FUNCTION_VERSION="1", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1024"),
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,  # noqa: SIM115
    )
    procs.append(proc)
    return proc


def llm_requests(work: Path) -> list[dict]:
    """What the chat has sent the stub LLM so far (start_llm_stub's log)."""
    path = work / "llm.requests"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def event_stream_turn(checks: Checks, name: str, status: int, headers: dict[str, str],
                      chunks: sse.Chunks, done_at: float, llm_streamed: bool,
                      prelude_at: float | None = None) -> None:
    """One streamed turn's checks: the UI message stream's headers and parts (the stub's turn: a
    lad_by_ref call, then its reply), in more than one piece, and, when the chat asked the stub
    LLM to stream (`llm_streamed`), its text arriving over the stub's pace, not all at the end.
    Skipped while the route answers `Accept: text/event-stream` with something else."""
    content_type = headers.get("content-type", "")
    if status == 200 and not content_type.startswith("text/event-stream"):
        checks.skip(f"{name}: answered 200 {content_type or '(no content type)'}, not "
                    "text/event-stream: POST /api/chat does not stream on this branch yet")
        return
    marks = [log_size(p) for p in checks.logs]
    timed = sse.frames(chunks)
    data = [d for _, d in timed]
    problems = [] if status == 200 else [f"status {status}: {b''.join(c for _, c in chunks)[:300]!r}"]
    for header, value in (("x-vercel-ai-ui-message-stream", "v1"), ("cache-control", "no-cache")):
        if headers.get(header) != value:
            problems.append(f"{header} is {headers.get(header)!r}, not {value!r}")
    problems += sse.ui_stream_problems(data)
    parts = sse.parts_of(data)
    kinds = [p.get("type") for p in parts]
    tools = [p.get("toolName") for p in parts if p.get("type") == "tool-input-available"]
    if tools != ["lad_by_ref"] or "tool-output-available" not in kinds:
        problems.append(f"tool parts {tools}, {kinds.count('tool-output-available')} outputs: "
                        "not the stub's one lad_by_ref call and its output")
    deltas = [(at, str(part[0].get("delta", ""))) for at, raw in timed
              if (part := sse.parts_of([raw])) and part[0].get("type") == "text-delta"]
    text = "".join(d for _, d in deltas)
    if not text.startswith("hello from the stub"):
        problems.append(f"the streamed text is {text!r}, not the stub's reply")
    # The stub sends its reply in pieces of 4 characters, LLM_PACE apart: streamed, the first
    # piece reaches the caller that long before the last, times the pieces between them.
    spread = deltas[-1][0] - deltas[0][0] if deltas else 0.0
    least = LLM_PACE * (len(text) // 4 - 1) / 2
    if not llm_streamed:
        checks.skip(f"{name}: when the text arrives: the chat asked the stub LLM for whole "
                    "answers (no \"stream\": true), so there was no pace to follow")
    elif spread < least:
        problems.append(f"the text deltas arrived within {spread * 1000:.0f} ms of each other, "
                        f"less than {least * 1000:.0f} ms: not streamed")
    if llm_streamed and deltas and deltas[0][0] >= done_at - LLM_PACE:
        problems.append("the first text delta arrived with the end of the response")
    if prelude_at is not None and deltas and prelude_at >= deltas[0][0]:
        problems.append("the prelude did not arrive before the first text delta")
    arrivals = len({at for at, _ in chunks})
    if arrivals < 2:
        problems.append(f"the body arrived in {arrivals} read(s)")
    first = f"{(deltas[0][0] - chunks[0][0]) * 1000:.0f} ms after the body began" if deltas and chunks else "-"
    checks.verdict(name, problems, f"{len(parts)} parts in {arrivals} arrivals over "
                   f"{(done_at - chunks[0][0]) * 1000 if chunks else 0:.0f} ms, first text delta "
                   f"{first}, text spread over {spread * 1000:.0f} ms", marks)


def run_streaming_watch(checks: Checks, cargo_lambda: str, bin_dir: str, settings: dict[str, str],
                        work: Path, procs: list[subprocess.Popen]) -> None:
    """(d) the chat with LAMBDA_RESPONSE_STREAMING=true under a second watch server (it serves
    only functions named after the workspace's binaries, and `chat` is taken on the first),
    whose Function URL emulation passes a streamed body on as it arrives."""
    base = start_watch(checks, cargo_lambda, work / "watch-stream.log", procs)
    if not base:
        return
    log = work / "chat-stream.log"
    start_function(checks, procs, bin_dir, "chat", "chat", f"{base}/.rt/chat", settings, log)
    url = f"{base}/lambda-url/chat"
    user = {"Authorization": f"Bearer {user_jwt('lambda-run-stream')}", "Content-Type": "application/json"}
    # Streamed by the function, re-framed by the emulator: it says so in a header of its own.
    streamed = lambda a: a.headers.get("lambda-runtime-function-response-mode") == "streaming"  # noqa: E731
    health = checks.check(f"{STREAMING}: curl GET /lambda-url/chat/health",
                          lambda: curl(work, f"{url}/health"),
                          lambda a: a.status == 200 and a.json == {"status": "ok"} and streamed(a),
                          lambda a: f"{a.status} {a.text.strip()}, answered as a stream")
    if health is None or health.status != 200:
        print(read_log(log)[-3000:], file=sys.stderr)
        return
    checks.check(f"{STREAMING}: curl POST /lambda-url/chat/api/chat (JSON)",
                 lambda: curl(work, "-X", "POST", f"{url}/api/chat", *header_args(user), "-d", json.dumps(TURN)),
                 lambda a: turn_answered(a) and a.headers.get("content-type") == "application/json" and streamed(a),
                 turn_detail)
    checks.check(f"{STREAMING}: curl POST /lambda-url/chat/api/chat without a token -> 401",
                 lambda: curl(work, "-X", "POST", f"{url}/api/chat", "-H", "Content-Type: application/json",
                              "-H", "Accept: text/event-stream", "-d", json.dumps(TURN)),
                 lambda a: error_is(401, "unauthorized")(a) and a.headers.get("content-type") == "application/json")
    name = f"{STREAMING}: POST /lambda-url/chat/api/chat, Accept: text/event-stream"
    asked = len(llm_requests(work))
    try:
        answer = sse.post_timed(f"{url}/api/chat", dict(user, Accept="text/event-stream"), json.dumps(TURN))
    except OSError as e:
        checks.fail(f"{name}: {e}")
        return
    done_at = answer.chunks[-1][0] if answer.chunks else answer.sent_at
    event_stream_turn(checks, name, answer.status, answer.headers, answer.chunks, done_at,
                      any(r.get("stream") is True for r in llm_requests(work)[asked:]))


def header_args(headers: dict[str, str]) -> list[str]:
    return [arg for k, v in headers.items() for arg in ("-H", f"{k}: {v}")]


def invocation_answer(invocation: Invocation) -> Answer:
    return Answer(invocation.status, invocation.headers, invocation.text)


def run_runtime_api(checks: Checks, bin_dir: str, buffered: dict[str, str], streaming: dict[str, str],
                    work: Path, procs: list[subprocess.Popen]) -> None:
    """(e) the chat under runtime_api.py, buffered, then streaming: what reaches the Runtime API,
    chunk by chunk."""
    api = RuntimeApi()
    user = {"authorization": f"Bearer {user_jwt('lambda-run-runtime-api')}", "content-type": "application/json"}
    try:
        for mode, settings in (("buffered", buffered), ("streaming", streaming)):
            log = work / f"runtime-api-{mode}.log"
            proc = start_function(checks, procs, bin_dir, "chat", STREAM_FUNCTION, api.address, settings, log)
            try:
                runtime_api_checks(checks, api, mode, user, log, work)
            finally:
                stop(proc)  # the next mode's process must be the only one asking for events
    finally:
        api.close()


def runtime_api_checks(checks: Checks, api: RuntimeApi, mode: str, user: dict[str, str], log: Path,
                       work: Path) -> None:
    where = f"{mode} mode, Runtime API emulator"

    def invoke(event: dict, timeout: float = 60) -> Callable[[], Invocation]:
        return lambda: api.invoke(event, timeout)

    def shape(i: Invocation) -> bool:
        """The response mode asked for, and nothing reported as an error."""
        if mode == "buffered":
            return i.mode == "buffered" and len(i.chunks) == 1
        return (i.mode == "streaming" and not i.stream_error
                and i.request_headers.get("content-type") == "application/vnd.awslambda.http-integration-response")

    # The first invocation also waits for the process to start and ask for it.
    health = checks.check(
        f"{where}: GET /health", invoke(function_url_event("GET", "/health")),
        lambda i: shape(i) and i.status == 200 and json.loads(i.body) == {"status": "ok"}
        and i.headers.get("content-type") == "application/json" and i.headers.get("x-request-id") == i.request_id,
        lambda i: f"{i.mode}: {len(i.chunks)} chunk(s), statusCode {i.status}, {i.text.strip()}, "
        f"x-request-id = the invocation id")
    if health is None or not health.mode:
        print(read_log(log)[-3000:], file=sys.stderr)
        return
    checks.check(f"{where}: POST /api/chat (JSON)",
                 invoke(function_url_event("POST", "/api/chat", user, json.dumps(TURN))),
                 lambda i: shape(i) and turn_answered(invocation_answer(i))
                 and i.headers.get("content-type") == "application/json",
                 lambda i: turn_detail(invocation_answer(i)))
    checks.check(f"{where}: POST /api/chat without a token -> 401",
                 invoke(function_url_event("POST", "/api/chat", {"content-type": "application/json"},
                                           json.dumps(TURN))),
                 lambda i: shape(i) and error_is(401, "unauthorized")(invocation_answer(i))
                 and i.headers.get("www-authenticate", "").startswith("Bearer"))
    if mode != "streaming":
        return
    name = f"{where}: POST /api/chat, Accept: text/event-stream"
    marks = [log_size(p) for p in checks.logs]
    asked = len(llm_requests(work))
    try:
        i = api.invoke(function_url_event("POST", "/api/chat", dict(user, accept="text/event-stream"),
                                          json.dumps(TURN)), 60)
        status, headers = i.status, i.headers
    except (TimeoutError, ValueError, KeyError) as e:
        checks.fail(f"{name}: {e}")
        checks.show_log_errors(marks)
        return
    if not shape(i):
        checks.fail(f"{name}: answered in mode {i.mode!r}, {i.stream_error or 'no stream error'}")
        checks.show_log_errors(marks)
        return
    event_stream_turn(checks, name, status, headers, [(c.at, c.data) for c in i.body_chunks()],
                      i.done_at, any(r.get("stream") is True for r in llm_requests(work)[asked:]),
                      prelude_at=i.chunks[0].at)
    rest_api_checks(checks, api, user, work)


def rest_api_checks(checks: Checks, api: RuntimeApi, user: dict[str, str], work: Path) -> None:
    """The streaming chat as the template's page REST API invokes it (ChatStreaming rest-api:
    every path of stage `chat` through InvokeWithResponseStream): the page and api/page from
    that one origin, then a streamed turn, whose prelude API Gateway reads before it passes the
    body on."""
    where = "streaming mode, REST API (v1) events"

    def streamed(i: Invocation) -> bool:
        return (i.mode == "streaming" and not i.stream_error
                and i.request_headers.get("content-type") == "application/vnd.awslambda.http-integration-response")

    checks.check(
        f"{where}: GET / (the page, stage chat)", lambda: api.invoke(rest_v1_event("GET", "/"), 60),
        lambda i: streamed(i) and i.status == 200 and i.headers.get("content-type", "").startswith("text/html")
        and "assets/page.js" in i.text and "content-security-policy" in i.headers
        and not prelude_problems(i.prelude_split()[0]),
        lambda i: f"200 {i.headers['content-type']}, {len(i.body)} bytes, prelude as API Gateway reads it")
    # No stream_url: the page posts its turns to its own origin, which streams.
    checks.check(
        f"{where}: GET /api/page names no stream_url", lambda: api.invoke(rest_v1_event("GET", "/api/page"), 60),
        lambda i: streamed(i) and i.status == 200 and "stream_url" in json.loads(i.body)
        and json.loads(i.body)["stream_url"] is None,
        lambda i: f"200, stream_url {json.loads(i.body)['stream_url']!r}: turns go to api/chat on this origin")

    event_file = ROOT / "events" / "rest-v1-chat-stream-turn.json"
    name = f"{where}: events/{event_file.name} (POST /api/chat, Accept: text/event-stream)"
    marks = [log_size(p) for p in checks.logs]
    asked = len(llm_requests(work))
    try:
        event = json.loads(event_file.read_text())
        # The shared events' user, here its own token: a conversation of its own.
        token = user["authorization"]
        event["headers"]["authorization"] = token
        event["multiValueHeaders"]["authorization"] = [token]
        i = api.invoke(event, 60)
        prelude, body = i.prelude_split()
    except (OSError, TimeoutError, ValueError, KeyError) as e:
        checks.fail(f"{name}: {e}")
        checks.show_log_errors(marks)
        return
    problems = [] if streamed(i) else [f"answered in mode {i.mode!r}, {i.stream_error or 'no stream error'}"]
    problems += prelude_problems(prelude)
    if body[:1] == b"\0":
        problems.append("more than 8 NUL bytes between the prelude and the body")
    if not body.startswith(b"data:"):
        problems.append(f"the body does not start with an event: {body[:80]!r}")
    checks.verdict(f"{name}: the prelude", problems,
                   f"{len(prelude)} bytes, keys {sorted(json.loads(prelude))}, each header one string, "
                   "then 8 NUL bytes, then the event stream", marks)
    event_stream_turn(checks, name, i.status, i.headers, [(c.at, c.data) for c in i.body_chunks()],
                      i.done_at, any(r.get("stream") is True for r in llm_requests(work)[asked:]),
                      prelude_at=i.chunks[0].at)


# --- the run -------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db-url", required=True)
    p.add_argument("--cargo-lambda", required=True)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--interop-python", default="")
    p.add_argument("--passed", type=int, default=0)
    p.add_argument("--admin-db-url", default="", help="an empty database for parley-admin's events")
    p.add_argument("--moto-server", default="", help="moto_server, the Secrets Manager parley-admin reads")
    p.add_argument("--psql", default="", help="psql, to look at what parley-admin did")
    args = p.parse_args()

    checks = Checks(passed=args.passed)
    work = Path(tempfile.mkdtemp(prefix="parley-lambda."))
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        run(args, checks, work, procs)
    finally:
        for proc in reversed(procs):
            stop(proc)
        if os.environ.get("KEEP_WORK"):
            print(f"tests/lambda/run: logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"tests/lambda/run: the checks took {time.monotonic() - started:.0f} s")
    print(f"lambda: {checks.passed} passed, {checks.failed} failed")
    return 0 if checks.failed == 0 else 1


KEEP = ("PATH", "HOME", "USER", "LANG", "TMPDIR")  # what the emulator and functions inherit


def start_watch(checks: Checks, cargo_lambda: str, log: Path, procs: list[subprocess.Popen]) -> str:
    """`cargo lambda watch` on a free loopback port; its base URL, or "" (a failed check) if it
    did not start. The emulator only (--only-lambda-apis): the functions are the workspace's
    debug build, started by the checks, not a `cargo run` of another feature set. It starts from
    a clean environment."""
    port = free_port()
    keep = {k: v for k, v in os.environ.items() if k in KEEP}
    procs.append(subprocess.Popen(
        [cargo_lambda, "lambda", "watch", "--only-lambda-apis", "--ignore-changes",
         "--invoke-address", "127.0.0.1", "--invoke-port", str(port)],
        env=keep, stdout=open(log, "wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,  # noqa: SIM115
        cwd=ROOT,
    ))
    deadline = time.monotonic() + 60
    while "starting Runtime server" not in read_log(log):
        if procs[-1].poll() is not None or time.monotonic() > deadline:
            print(read_log(log)[-3000:], file=sys.stderr)
            checks.fail(f"setup: cargo lambda watch --only-lambda-apis did not start ({log.name} above)")
            return ""
        time.sleep(0.1)
    return f"http://127.0.0.1:{port}"


def run(args: argparse.Namespace, checks: Checks, work: Path, procs: list[subprocess.Popen]) -> None:
    events = sorted((ROOT / "events").glob("*.json"))
    if not events:
        checks.fail("setup: no events/*.json")
        return
    llm_url = start_llm_stub(args.bin_dir, work, procs)
    if not llm_url:
        checks.fail(f"setup: the stub LLM (parley-llm-stub) did not start: {read_log(work / 'llm.log')[-500:]}")
        return

    base = start_watch(checks, args.cargo_lambda, work / "watch.log", procs)
    if not base:
        return
    port = int(base.rsplit(":", 1)[1])
    keep = {k: v for k, v in os.environ.items() if k in KEEP}

    # Both functions get the same settings, and nothing of the caller's own Parley settings.
    # AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH: without it lambda_http serves the REST v1 event
    # (stage `prod`) as /prod/mcp, which no route matches (404); template.yaml sets it too.
    settings = dict(
        keep,
        DATABASE_URL=args.db_url,
        MCP_AUTH_TOKEN=MCP_TOKEN,
        MCP_ALLOWED_HOSTS=event_hosts(events),
        AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH="1",
        JWT_SECRET=JWT_SECRET,
        MCP_URL=f"{base}/lambda-url/mcp/mcp",
        # With JWT_SECRET the mcp function accepts user tokens and must know its public URL.
        MCP_RESOURCE_URL=f"{base}/lambda-url/mcp/mcp",
        # Both demo domains, as the template's default; the chat vouches for its users with
        # assertions signed with this key, the mcp function checks them with it.
        TOOLS_FILE=f"{ROOT}/domains/feedback/tools.toml,{ROOT}/domains/tasks/tools.toml",
        MCP_CALLER_KEY="lambda-checks-caller-key-of-at-least-32-bytes",
        LLM_BASE_URL=llm_url,
        LLM_API_KEY="stub-key",
        LLM_MAX_RETRIES="0",
        DB_POOL_MAX_SIZE="2",
        RUST_LOG="info",
    )
    first_answers = []
    for function in ("mcp", "chat"):
        log = work / f"{function}.log"
        t0 = time.monotonic()
        start_function(checks, procs, args.bin_dir, function, function,
                       f"http://127.0.0.1:{port}/.rt/{function}", settings, log)
        # The emulator holds the request until the function has initialised and polled for it.
        status = get_status(f"{base}/lambda-url/{function}/health")
        if status != 200:
            print(read_log(log)[-3000:], file=sys.stderr)
            checks.fail(f"setup: GET {base}/lambda-url/{function}/health answered {status}, not 200 (log above)")
            return
        first_answers.append(f"{function} {(time.monotonic() - t0) * 1000:.0f} ms")
    checks.ok(f"setup: cargo lambda watch on {base} serves both functions "
              f"(GET /lambda-url/{{mcp,chat}}/health 200; Init + first answer: {', '.join(first_answers)})")

    run_events(checks, args.cargo_lambda, port, work, events)
    run_admin(checks, args.cargo_lambda, args.bin_dir, base, args.admin_db_url, args.moto_server, args.psql,
              keep, work, procs, start_function, ROOT / "events")
    run_ingest(checks, args.cargo_lambda, args.bin_dir, base, args.db_url, args.moto_server, args.psql,
               keep, work, procs, start_function, ROOT / "events", ROOT / ".parley" / "models" / "all-MiniLM-L6-v2")
    run_function_urls(checks, base, work)
    if args.interop_python:
        run_python_sdk(checks, args.interop_python, base)
    else:
        checks.fail("python-sdk: could not install the MCP Python SDK (tests/interop/requirements.txt)")
    # A streamed turn gets the longer deadline of its own; the template's streaming function
    # sets 285 s, well past what these turns take.
    streaming = dict(settings, LAMBDA_RESPONSE_STREAMING="true", STREAM_TURN_DEADLINE_MS="60000")
    run_streaming_watch(checks, args.cargo_lambda, args.bin_dir, streaming, work, procs)
    run_runtime_api(checks, args.bin_dir, settings, streaming, work, procs)

    panics = [line for path in checks.logs for line in read_log(path).splitlines() if "panicked" in line]
    if panics:
        checks.fail(f"no function panicked: {panics[0][:300]}")
    else:
        checks.ok("no function panicked (every function's log)")


if __name__ == "__main__":
    sys.exit(main())
