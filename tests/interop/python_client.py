#!/usr/bin/env python3
"""Interop check: Parley's MCP server driven by the official MCP Python SDK (`mcp` on PyPI).

Usage: PARLEY_MCP_URL=http://127.0.0.1:PORT/mcp PARLEY_MCP_TOKEN=... python_client.py
With PARLEY_MCP_JWT_SECRET (and PARLEY_MCP_JWT_ISSUER), the server's JWT_SECRET (JWT_ISSUER),
it also mints a user's HS256 JWT and checks that the SDK calls a tool with it.
Written for the mcp 1.x API pinned in requirements.txt (2.x renamed fields to snake_case and
moved to httpx2, so an upgrade to 2.x means porting this file).

Connects over Streamable HTTP with the bearer token, initializes, lists the tools, calls each
one, checks argument errors, prompts, a wrong token, and user tokens on caller-bound tools. Prints one `ok:`/`FAIL:` line per check, then
`python-sdk: N passed, N failed`; exits 1 if any check failed. Run by tests/interop/run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
import httpx
import jwt  # PyJWT, already a dependency of the SDK
from mcp import ClientSession, McpError, types
from mcp.client.streamable_http import streamable_http_client



@asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Any]:
    """Streamable HTTP streams with `Authorization: Bearer <token>` on every request."""
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(20.0, read=30.0),
    ) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


FEEDBACK_TOOLS = {"lad_by_ref", "list_lads", "search_feedback", "feedback_stats", "get_feedback"}
TASKS_TOOLS = {"list_tasks", "create_task", "update_task", "complete_task", "delete_task"}
SQL_TOOLS = {"run_sql", "list_tables", "describe_table", "explain_sql"}
# The server serves the ad-hoc SQL tools too (tests/interop/run sets it; the Lambda checks do not).
WITH_SQL = os.environ.get("PARLEY_MCP_SQL_TOOLS") == "1"
EXPECTED_TOOLS = FEEDBACK_TOOLS | TASKS_TOOLS | (SQL_TOOLS if WITH_SQL else set())
TIMEOUT_S = 30

passed = 0
failed = 0


def report(ok: bool, name: str, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: python-sdk {name}" + (f" ({detail})" if detail else ""), flush=True)
    else:
        failed += 1
        print(f"FAIL: python-sdk {name}" + (f": {detail}" if detail else ""), flush=True)


async def check(name: str, fn: Callable[[], Awaitable[str | None]]) -> None:
    """Runs one check; an AssertionError or any exception fails it with its message."""
    try:
        with anyio.fail_after(TIMEOUT_S):
            detail = await fn()
        report(True, name, detail or "")
    except AssertionError as e:
        report(False, name, str(e) or "assertion failed")
    except BaseException as e:  # noqa: BLE001 - a check must never stop the others
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        report(False, name, f"{type(e).__name__}: {flatten(e)}")


def flatten(e: BaseException) -> str:
    """The messages of an exception and everything it wraps (task groups nest them)."""
    parts: list[str] = []

    def walk(x: BaseException | None, depth: int = 0) -> None:
        if x is None or depth > 8:
            return
        parts.append(f"{type(x).__name__}: {x}")
        for sub in getattr(x, "exceptions", ()) or ():
            walk(sub, depth + 1)
        walk(x.__cause__, depth + 1)
        if not x.__suppress_context__:
            walk(x.__context__, depth + 1)

    walk(e)
    return " | ".join(parts)


def envelope(result: types.CallToolResult) -> dict[str, Any]:
    """Checks the shape every successful Parley tool result has; returns structuredContent."""
    assert not result.isError, f"isError: {texts(result)[:300]}"
    sc = result.structuredContent
    assert isinstance(sc, dict), f"structuredContent is {type(sc).__name__}, not an object"
    assert isinstance(sc.get("rows"), list), "structuredContent.rows is not a list"
    assert sc.get("row_count") == len(sc["rows"]), (
        f"row_count {sc.get('row_count')} != len(rows) {len(sc['rows'])}"
    )
    assert isinstance(sc.get("truncated"), bool), "structuredContent.truncated is not a boolean"
    blocks = texts(result)
    assert blocks, "no text content block"
    assert json.loads(blocks[0]) == sc, "the text block is not the same JSON as structuredContent"
    return sc


def texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


async def main() -> int:
    url = os.environ["PARLEY_MCP_URL"]
    token = os.environ["PARLEY_MCP_TOKEN"]
    state: dict[str, Any] = {}

    try:
        with anyio.fail_after(TIMEOUT_S * 8):
            async with connect(url, token) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await run_checks(session, state)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        report(False, "session", f"{type(e).__name__}: {flatten(e)}")
        traceback.print_exc(file=sys.stderr)

    await check("wrong token is refused with 401", lambda: wrong_token(url, token + "-wrong"))
    secret = os.environ.get("PARLEY_MCP_JWT_SECRET")
    if secret:
        issuer = os.environ.get("PARLEY_MCP_JWT_ISSUER")
        await check("a user JWT calls lad_by_ref", lambda: user_token_call(url, secret, issuer))
        await check(
            "two users' JWTs: create_task, then list_tasks shows each only their own",
            lambda: user_tasks(url, secret, issuer),
        )
    print(f"python-sdk: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


async def run_checks(session: ClientSession, state: dict[str, Any]) -> None:
    async def initialize() -> str:
        init = await session.initialize()
        assert init.serverInfo.name == "parley-mcp", f"serverInfo.name is {init.serverInfo.name!r}"
        assert init.capabilities.tools is not None, "server does not declare the tools capability"
        assert init.protocolVersion, "no protocolVersion"
        state["initialized"] = True
        return f"protocol {init.protocolVersion}, server {init.serverInfo.name} {init.serverInfo.version}"

    await check("initialize", initialize)
    if not state.get("initialized"):
        return

    async def list_tools() -> str:
        listed = await session.list_tools()
        names = [t.name for t in listed.tools]
        assert set(names) == EXPECTED_TOOLS and len(names) == len(EXPECTED_TOOLS), (
            f"tools are {sorted(names)}"
        )
        for t in listed.tools:
            assert isinstance(t.inputSchema, dict) and t.inputSchema.get("type") == "object", (
                f"{t.name}: inputSchema is not an object schema"
            )
            assert t.description, f"{t.name}: no description"
            read_only = t.name in FEEDBACK_TOOLS | SQL_TOOLS or t.name == "list_tasks"
            assert t.annotations is not None and t.annotations.readOnlyHint is read_only, (
                f"{t.name}: readOnlyHint is not {read_only}"
            )
            assert "owner" not in t.inputSchema.get("properties", {}), (
                f"{t.name}: the caller-bound `owner` is in the input schema"
            )
        delete = next(t for t in listed.tools if t.name == "delete_task")
        assert delete.annotations.destructiveHint is True, "delete_task is not destructiveHint"
        required = {t.name: t.inputSchema.get("required", []) for t in listed.tools}
        assert required["lad_by_ref"] == ["ref"], f"lad_by_ref required {required['lad_by_ref']}"
        assert required["get_feedback"] == ["id"], f"get_feedback required {required['get_feedback']}"
        return ", ".join(sorted(names))

    await check(f"tools/list has exactly the {len(EXPECTED_TOOLS)} tools with input schemas", list_tools)

    async def run_sql() -> str:
        sql = (
            "SELECT l.country, count(*) AS items, round(avg(f.rating), 2) AS average "
            "FROM feedback f JOIN lads l ON l.code = f.lad_code GROUP BY 1 ORDER BY 1"
        )
        sc = envelope(await session.call_tool("run_sql", {"sql": sql}))
        countries = [r["country"] for r in sc["rows"]]
        assert countries and set(countries) <= {"England", "Wales"}, f"rows {sc['rows']}"
        refused = await session.call_tool("run_sql", {"sql": "DELETE FROM feedback"})
        assert refused.isError is True, f"a DELETE was not refused: {texts(refused)}"
        described = await session.call_tool("describe_table", {"name": "lads"})
        assert described.isError is not True, texts(described)
        assert described.structuredContent["columns"][0]["name"] == "code"
        return f"{len(countries)} countries; DELETE refused: {texts(refused)[0][:80]}"

    if WITH_SQL:
        await check("run_sql answers a query of its own, refuses a DELETE; describe_table", run_sql)

    async def list_prompts() -> str:
        listed = await session.list_prompts()
        names = sorted(p.name for p in listed.prompts)
        assert names, "no prompts"
        first = listed.prompts[0]
        args = {a.name: "x" for a in (first.arguments or []) if a.required}
        got = await session.get_prompt(first.name, args)
        assert got.messages, f"prompts/get {first.name} returned no messages"
        return ", ".join(names)

    await check("prompts/list and prompts/get", list_prompts)

    async def service_cannot_act_for_a_user() -> str:
        result = await session.call_tool("list_tasks", {})
        msg = " ".join(texts(result))
        assert result.isError is True, f"the service token listed tasks: {msg[:200]}"
        return msg

    await check("the service token cannot call list_tasks (caller-bound)", service_cannot_act_for_a_user)

    async def lad_by_ref() -> str:
        sc = envelope(await session.call_tool("lad_by_ref", {"ref": "Leeds"}))
        assert sc["rows"], "no rows"
        row = sc["rows"][0]
        assert row.get("code") == "E08000035", f"code is {row.get('code')!r}"
        return f"{row['code']} {row.get('name')}"

    await check("lad_by_ref Leeds -> E08000035", lad_by_ref)

    async def list_lads() -> str:
        sc = envelope(
            await session.call_tool(
                "list_lads", {"upper_tier": "Kent", "country": "England", "limit": 5}
            )
        )
        assert len(sc["rows"]) == 5, f"{len(sc['rows'])} rows, want 5 (limit)"
        assert sc["truncated"] is True, "Kent has more than 5 districts but truncated is false"
        assert all(r.get("country") == "England" for r in sc["rows"]), "a row is not in England"
        return ", ".join(r["name"] for r in sc["rows"])

    await check("list_lads upper_tier=Kent limit=5", list_lads)

    async def search() -> str:
        sc = envelope(
            await session.call_tool("search_feedback", {"query": "bin", "limit": 5})
        )
        assert sc["rows"], "no feedback matched `bin`"
        first = sc["rows"][0]
        assert isinstance(first.get("id"), int), f"id is {first.get('id')!r}"
        state["feedback_id"] = first["id"]
        filtered = envelope(
            await session.call_tool(
                "search_feedback",
                {"query": "bin", "district": first["lad_code"], "from": "2000-01-01",
                 "to": "2100-12-31", "limit": 50},
            )
        )
        assert filtered["rows"], "no rows with the district and date filters"
        assert all(r["lad_code"] == first["lad_code"] for r in filtered["rows"]), (
            "district filter not applied"
        )
        return f"{sc['row_count']} rows, first id {first['id']}"

    await check("search_feedback query=bin (+ district/date filters)", search)

    async def get_feedback() -> str:
        fid = state.get("feedback_id")
        assert fid is not None, "no id from search_feedback"
        sc = envelope(await session.call_tool("get_feedback", {"id": fid}))
        assert len(sc["rows"]) == 1 and sc["rows"][0].get("id") == fid, f"did not return id {fid}"
        return f"id {fid}: {sc['rows'][0].get('title')!r}"

    await check("get_feedback id from the search", get_feedback)

    async def stats() -> str:
        sc = envelope(await session.call_tool("feedback_stats", {"group_by": "category"}))
        assert sc["rows"], "no rows"
        sc_all = envelope(await session.call_tool("feedback_stats", {}))
        assert sc_all["rows"], "no rows without arguments"
        return f"{sc['row_count']} categories"

    await check("feedback_stats group_by=category and no arguments", stats)

    async def bad_integer() -> str:
        result = await session.call_tool("get_feedback", {"id": "not-a-number"})
        msg = " ".join(texts(result))
        assert result.isError is True, f"isError is {result.isError!r}: {msg[:200]}"
        assert "id" in msg, f"message does not name `id`: {msg!r}"
        return msg

    await check("get_feedback id=\"not-a-number\" -> isError naming id", bad_integer)

    async def bad_enum() -> str:
        result = await session.call_tool("list_lads", {"country": "France"})
        msg = " ".join(texts(result))
        assert result.isError is True, f"isError is {result.isError!r}: {msg[:200]}"
        assert "country" in msg, f"message does not name `country`: {msg!r}"
        return msg

    await check("list_lads country=France -> isError naming country", bad_enum)

    async def missing_required() -> str:
        result = await session.call_tool("lad_by_ref", {})
        msg = " ".join(texts(result))
        assert result.isError is True, f"isError is {result.isError!r}: {msg[:200]}"
        assert "ref" in msg, f"message does not name `ref`: {msg!r}"
        return msg

    await check("lad_by_ref without ref -> isError naming ref", missing_required)

    async def unknown_tool() -> str:
        try:
            result = await session.call_tool("no_such_tool", {})
        except McpError as e:
            assert e.error.code == types.INVALID_PARAMS, f"error code {e.error.code}"
            return f"JSON-RPC error {e.error.code}"
        raise AssertionError(f"no protocol error; got isError={result.isError}")

    await check("unknown tool -> JSON-RPC -32602", unknown_tool)


async def wrong_token(url: str, token: str) -> str:
    try:
        async with connect(url, token) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                await session.list_tools()
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        text = flatten(e)
        assert "401" in text, f"refused, but not with 401: {text[:400]}"
        return next(line for line in text.replace(" | ", "\n").splitlines() if "401" in line)
    raise AssertionError("initialize and tools/list succeeded with a wrong token")


def user_token(secret: str, issuer: str | None, sub: str) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + 300}
    if issuer:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm="HS256")


async def user_tasks(url: str, secret: str, issuer: str | None) -> str:
    """Each user creates a task with their own token and lists only their own; the owner
    cannot be passed as an argument."""
    seen = {}
    for user in ("interop-ann", "interop-bob"):
        async with connect(url, user_token(secret, issuer, user)) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                created = envelope(
                    await session.call_tool("create_task", {"title": f"task of {user}"})
                )
                assert created["row_count"] == 1, f"create_task: {created!r}"
                forged = await session.call_tool(
                    "create_task", {"title": "forged", "owner": "interop-ann"}
                )
                assert forged.isError is True, "an `owner` argument was accepted"
                listed = envelope(await session.call_tool("list_tasks", {}))
                seen[user] = sorted(r["title"] for r in listed["rows"])
    assert seen == {
        "interop-ann": ["task of interop-ann"],
        "interop-bob": ["task of interop-bob"],
    }, f"each user should see only their own task: {seen!r}"
    return f"{seen!r}"


async def user_token_call(url: str, secret: str, issuer: str | None) -> str:
    """A fresh session authenticated by a user's JWT (not the service token) calls a tool."""
    token = user_token(secret, issuer, "interop-user")
    async with connect(url, token) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            result = await session.call_tool("lad_by_ref", {"ref": "Leeds"})
    rows = envelope(result)["rows"]
    assert rows and rows[0]["code"] == "E08000035", f"rows: {rows!r}"
    return f"sub=interop-user -> {rows[0]['code']}"


if __name__ == "__main__":
    sys.exit(anyio.run(main))
