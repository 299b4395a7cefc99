#!/usr/bin/env python3
"""The chat page when a request is refused because the service is busy (issue 33, item 7), in
a real browser (tests/page/run): Debian's Chromium, driven by Playwright, against the same chat,
mcp and scripted model as page_test.py.

The refusals are AWS's, so Playwright stands in for the front door (`page.route`): a Lambda
Function URL's throttle (429 with AWS's `{"Message": ...}` or a text body), API Gateway's 503
busy response (template.yaml's `PageApiBusyResponse`), an HTTP API's bare
`{"message": "Service Unavailable"}`, and the chat's own 503 `database_pool_exhausted`. Each
time the page must say "Parley is busy right now; try again in N s" (N from `Retry-After`),
never a bare status, put the question back in the message box, hold Send for the wait, and then
send it again for real: the retry goes to the real chat and is answered.

Environment: PARLEY_CHAT_URL (the chat, with the page at /), PARLEY_TOKEN (a bearer token for
it), CHROMIUM (the browser's path), SCREENSHOTS (a directory). Prints one ok:/FAIL: line per
check; exits 1 if any check failed.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import sys
import time
from pathlib import Path

from playwright.sync_api import Page, Route, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
TOKEN = os.environ["PARLEY_TOKEN"]
SHOTS = Path(os.environ["SCREENSHOTS"])
# What the scripted model (tests/page/llm_script.json) answers every turn with.
ANSWER = "Kent has 3 districts"
# A turn here is a tool call and an answer from a scripted model: seconds at most.
TURN_MS = 30_000
# The wait every refusal below asks for, and what the page must say of it.
WAIT = 7
BUSY = f"Parley is busy right now; try again in {WAIT} s"
# Words of a bare refusal that must never reach the person.
BARE = re.compile(r"\b(429|503|500)\b|Too Many Requests|Service Unavailable|Rate Exceeded", re.I)
# A Function URL on another origin, as /api/page names it when the page streams through one.
STREAM = "http://stream.test/"

# How Chromium reports a refused request in the console: expected here, each one on purpose.
REFUSED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of (429|500|503)")

STATUS_LOG = """
document.addEventListener("DOMContentLoaded", () => {
    window.__statuses = [];
    const status = document.getElementById("status");
    new MutationObserver(() => window.__statuses.push(status.textContent))
        .observe(status, {childList: true, characterData: true, subtree: true});
});
"""


def box(page: Page):
    return page.get_by_label("Message", exact=True)


def send_button(page: Page):
    return page.locator("#send")


def refused_then_sent(page: Page, question: str, screenshot: str, text: str = BUSY) -> str:
    """`question` sent and refused (a route the caller set up answers the first POST): the
    page says `text`, the question is back in the box, Send is held for WAIT s and a submit
    meanwhile sends nothing; then it goes again and the real chat answers."""
    users = page.locator(".message.user").count()
    replies = page.locator(".message.assistant").count()
    posts: list[str] = []
    listener = lambda r: posts.append(r.url) if r.method == "POST" and r.url.endswith("api/chat") else None
    page.on("request", listener)
    try:
        box(page).fill(question)
        box(page).press("Enter")
        status = page.locator("#status")
        expect(status).to_contain_text(text)
        refused_at = time.monotonic()
        expect(status).to_contain_text("Your question is back in the message box.")
        expect(box(page)).to_have_value(question)
        expect(box(page)).to_be_focused()
        expect(send_button(page)).to_be_disabled()
        expect(send_button(page)).to_have_text(re.compile(r"^Send in [1-7] s$"))
        page.screenshot(path=str(SHOTS / screenshot))
        shown = page.locator("#app").inner_text()
        assert not BARE.search(shown), f"a bare refusal is shown: {BARE.search(shown).group(0)!r}"
        # Nothing of the refused turn is on the page: it was not stored.
        expect(page.locator(".message.user")).to_have_count(users)
        expect(page.locator(".message.assistant")).to_have_count(replies)
        # Enter while the wait runs sends nothing (no automatic resend either).
        box(page).press("Enter")
        page.wait_for_timeout(500)
        assert len(posts) == 1, f"{len(posts)} POSTs while Send was held"
        expect(send_button(page)).to_be_enabled(timeout=(WAIT + 5) * 1000)
        held = time.monotonic() - refused_at
        assert held >= WAIT - 1.5, f"Send came back after {held:.1f} s, not {WAIT}"
        expect(send_button(page)).to_have_text("Send")
        expect(status).to_have_text("You can send your question again now.")
        assert len(posts) == 1, f"the page sent the turn again by itself: {posts}"
        box(page).press("Enter")
        expect(page.locator(".message.assistant")).to_have_count(replies + 1, timeout=TURN_MS)
        expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER, timeout=TURN_MS)
        expect(page.locator(".message.user .text").last).to_have_text(question)
        expect(box(page)).to_have_value("")
        return f"held {held:.1f} s"
    finally:
        page.remove_listener("request", listener)


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ["CHROMIUM"],
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(viewport={"width": 1100, "height": 900})
        context.add_init_script(f"sessionStorage.setItem('parley.token', {json.dumps(TOKEN)})")
        context.add_init_script(STATUS_LOG)
        outside: list[str] = []
        context.route(
            "**/*",
            lambda route: (route.fallback() if route.request.url.startswith(BASE)
                           else (outside.append(route.request.url), route.abort())),
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(BASE)
        expect(box(page)).to_be_visible()
        chat_types: list[str] = []
        page.on("response", lambda r: chat_types.append(r.headers.get("content-type", ""))
                if r.url.endswith("/api/chat") and r.ok else None)

        def words() -> str:
            got = page.evaluate(
                """async () => {
                    const m = await import(new URL("assets/busy.js", document.baseURI).href);
                    const now = Date.parse("2026-11-29T10:00:00Z");
                    const cases = [
                        [429, "http_error", false, "Rate Exceeded."],
                        [429, "http_error", false, "Too Many Requests"],
                        [503, "busy", true, ""],
                        [500, "http_error", false, "Service Unavailable"],
                        [503, "http_error", false, ""],
                        [500, "http_error", false, "Internal Server Error"],
                        [502, "http_error", false, "<html>Bad Gateway</html>"],
                        [503, "database_pool_exhausted", true, ""],
                        [429, "too_many_reads", true, ""],
                        [409, "conversation_busy", true, ""],
                        [500, "internal", true, ""],
                        [502, "llm_unavailable", true, ""],
                        [404, "conversation_not_found", true, ""],
                    ];
                    return {
                        after: ["7", "Sun, 29 Nov 2026 10:00:07 GMT", "Sunday, 29-Nov-26 10:00:07 GMT",
                                "Sun, 29 Nov 2026 09:00:00 GMT", "7.5", "", null]
                            .map((v) => m.retryAfterSeconds(v, now)),
                        waits: [null, 0, 7, 86400].map(m.busyWait),
                        refusals: cases.map(([s, c, e, said]) => m.refusalOf(s, c, e, said)),
                        texts: [
                            {code: null, refusal: "busy", wait: 7},
                            {code: null, refusal: "unreachable", wait: 7},
                            {code: "conversation_busy", refusal: "busy", wait: 10},
                            {code: "database_pool_exhausted", refusal: "busy", wait: 1},
                            {code: "llm_rate_limited", refusal: "busy", wait: 300},
                        ].map((p) => m.busyText(p, "Parley")),
                    };
                }"""
            )
            assert got["after"] == [7, 7, 7, 0, None, None, None], got["after"]
            assert got["waits"] == [10, 1, 7, 300], got["waits"]
            assert got["refusals"] == ["busy", "busy", "busy", "busy", "busy", "unreachable", "unreachable",
                                       "busy", "busy", "busy", None, None, None], got["refusals"]
            assert got["texts"] == [
                "Parley is busy right now; try again in 7 s.",
                "Parley could not be reached right now; try again in 7 s.",
                "Another reply is still being written in this conversation; try again in 10 s, when it has finished.",
                "Parley is busy right now (every database connection is in use); try again in 1 s.",
                "The language model is busy right now; try again in 5 min.",
            ], got["texts"]
            return "Retry-After as seconds or an HTTP date (else 10 s); each front door's refusal; the chat's own words kept"

        check("refusals in words: the wait, the front door, the chat's codes", words)

        def function_url_throttle() -> str:
            page.get_by_role("button", name="New conversation").click()
            accepts: list[str] = []

            def throttle(route: Route) -> None:
                accepts.append(route.request.headers.get("accept", ""))
                # Lambda's answer to a throttled Function URL: 429, TooManyRequestsException.
                route.fulfill(status=429, headers={"Retry-After": str(WAIT), "x-amzn-ErrorType": "TooManyRequestsException"},
                              content_type="application/json", body='{"Message":"Rate Exceeded."}')

            page.route("**/api/chat", throttle, times=1)
            held = refused_then_sent(page, "Which districts are in Kent, streamed?", "busy-function-url.png")
            assert accepts and "text/event-stream" in accepts[0], f"the refused turn was not a streamed one: {accepts}"
            assert chat_types and chat_types[-1].startswith("text/event-stream"), chat_types
            return f"429 with Lambda's body refused a streamed turn; {held}; the retry streamed from the real chat"

        check("a Function URL's throttle (429) on a streamed turn", function_url_throttle)

        def gateway_busy() -> str:
            page.get_by_role("button", name="New conversation").click()
            refused: list[int] = []

            def gateway(route: Route) -> None:
                if not refused:
                    refused.append(1)
                    # template.yaml's PageApiBusyResponse, with a wait of this test's.
                    route.fulfill(status=503, headers={"Retry-After": str(WAIT), "Cache-Control": "no-store"},
                                  json={"error": {"code": "busy", "message": "The assistant is busy, or could not be "
                                                  "reached: try again in 10 seconds. If it keeps happening, tell whoever runs it."}})
                    return
                # The retry as a client without streaming sends it: the chat answers JSON.
                route.continue_(headers={**route.request.headers, "accept": "application/json"})

            page.route("**/api/chat", gateway)
            try:
                held = refused_then_sent(page, "Which districts are in Kent, as JSON?", "busy-api-gateway.png")
            finally:
                page.unroute("**/api/chat", gateway)
            assert "10 seconds" not in (page.locator("#status").text_content() or "")
            assert chat_types[-1].startswith("application/json"), chat_types
            return f"503 `busy` with Retry-After {WAIT}: the page's words with {WAIT} s, not the body's 10; {held}; the JSON retry answered"

        check("API Gateway's busy response (503) on a JSON turn", gateway_busy)

        def chat_503() -> str:
            # A follow-up in the conversation the last check made: the refusal must not lose it.
            conversation = page.evaluate("location.hash.slice(1)")
            assert len(conversation) == 36, conversation
            sent: list[dict] = []

            def exhausted(route: Route) -> None:
                sent.append(route.request.post_data_json)
                route.fulfill(status=503, headers={"Retry-After": str(WAIT)}, json={"error": {
                    "code": "database_pool_exhausted",
                    "message": "every database connection of this instance is in use; retry shortly"}})

            page.route("**/api/chat", exhausted, times=1)
            held = refused_then_sent(page, "And in Kent again?", "busy-chat-503.png",
                                     f"Parley is busy right now (every database connection is in use); try again in {WAIT} s")
            assert sent[0].get("conversation_id") == conversation, sent
            expect(page).to_have_url(f"{BASE}#{conversation}")
            expect(page.locator(".message.user")).to_have_count(2)
            return f"the chat's own words and the wait; {held}; the retry joined the same conversation"

        check("the chat's own 503 (database_pool_exhausted) on a follow-up", chat_503)

        def http_api_bare() -> str:
            page.get_by_role("button", name="New conversation").click()
            # An HTTP API's own answer when it cannot run the function: no Retry-After.
            page.route("**/api/chat", lambda route: route.fulfill(
                status=500, json={"message": "Service Unavailable"}), times=1)
            box(page).fill("Anyone there?")
            box(page).press("Enter")
            expect(page.locator("#status")).to_contain_text("Parley is busy right now; try again in 10 s.")
            expect(box(page)).to_have_value("Anyone there?")
            expect(send_button(page)).to_have_text(re.compile(r"^Send in (10|9) s$"))
            assert not BARE.search(page.locator("#app").inner_text())
            return "500 {\"message\": \"Service Unavailable\"} without Retry-After: busy, 10 s (the default)"

        check("an HTTP API's bare 500 without Retry-After", http_api_bare)

        def reload_refused() -> str:
            conversation = page.evaluate("""() => document.querySelector("#conversations a")?.dataset.id""")
            assert conversation, "no conversation listed"
            asked = {"list": 0, "messages": 0}

            def list_route(route: Route) -> None:
                asked["list"] += 1
                if asked["list"] == 1:
                    # A Function URL's throttle as text, not JSON.
                    route.fulfill(status=429, headers={"Retry-After": str(WAIT)}, content_type="text/plain",
                                  body="Too Many Requests")
                else:
                    route.fallback()

            def messages_route(route: Route) -> None:
                asked["messages"] += 1
                if asked["messages"] == 1:
                    # Retry-After as an HTTP date, WAIT s from now.
                    route.fulfill(status=503, headers={"Retry-After": email.utils.formatdate(time.time() + WAIT + 0.9, usegmt=True)},
                                  json={"message": "Service Unavailable"})
                else:
                    route.fallback()

            list_url = re.compile(r"/api/conversations\?")
            messages_url = f"**/api/conversations/{conversation}/messages"
            page.route(list_url, list_route)
            page.route(messages_url, messages_route)
            try:
                page.goto(BASE + "#" + conversation)
                page.reload()
                expect(page.locator("#status")).to_contain_text("Could not open the conversation: Parley is busy right now.")
                expect(page.locator("#status")).to_contain_text(re.compile(r"Trying again in [5-8] s\."))
                page.screenshot(path=str(SHOTS / "busy-reload.png"))
                assert not BARE.search(page.locator("#app").inner_text())
                link = page.locator(f"#conversations a[data-id='{conversation}']")
                expect(link).to_be_visible(timeout=(WAIT + 5) * 1000)
                expect(page.locator(".message.assistant .markdown").first).to_contain_text(ANSWER, timeout=(WAIT + 5) * 1000)
                expect(page.locator("#status")).to_have_text("")
                statuses = page.evaluate("window.__statuses")
                said = f"Could not load your conversations: Parley is busy right now. Trying again in {WAIT} s."
                assert said in statuses, statuses
            finally:
                page.unroute(list_url, list_route)
                page.unroute(messages_url, messages_route)
            assert asked["list"] >= 2 and asked["messages"] == 2, asked
            return "the list (429, text) and the conversation (503, HTTP-date Retry-After) said busy and were asked again after the wait"

        check("the conversation list and a reload, refused", reload_refused)

        def stream_url_throttle() -> str:
            # A deployment whose page streams through a Function URL on another origin: its
            # throttle comes with the URL's CORS headers, which must expose Retry-After for the
            # page to read it (else the page waits its default 10 s).
            cors = {
                "Access-Control-Allow-Origin": BASE.rstrip("/"),
                "Access-Control-Allow-Headers": "authorization, content-type",
                "Access-Control-Allow-Methods": "POST",
                "Access-Control-Expose-Headers": "retry-after, x-request-id",
            }
            elsewhere = browser.new_context(bypass_csp=True, viewport={"width": 1100, "height": 900})
            elsewhere.add_init_script(f"sessionStorage.setItem('parley.token', {json.dumps(TOKEN)})")
            tab = elsewhere.new_page()
            tab.on("pageerror", lambda e: errors.append(str(e)))
            posts: list[str] = []

            def info(route: Route) -> None:
                body = route.fetch().json()
                body["stream_url"] = STREAM
                route.fulfill(json=body)

            def function_url(route: Route) -> None:
                request = route.request
                if request.method == "OPTIONS":
                    route.fulfill(status=204, headers=cors)
                    return
                posts.append(request.url)
                if len(posts) == 1:
                    route.fulfill(status=429, headers={**cors, "Retry-After": str(WAIT)},
                                  content_type="application/json", body='{"Message":"Rate Exceeded."}')
                    return
                # The Function URL's function is the chat: the retry reaches the real one.
                headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
                answer = route.fetch(url=BASE + "api/chat", headers=headers)
                route.fulfill(response=answer, headers={**answer.headers, **cors})

            tab.route("**/api/page", info)
            tab.route(STREAM + "**", function_url)
            tab.goto(BASE)
            tab.wait_for_load_state("networkidle")
            held = refused_then_sent(tab, "Which districts are in Kent, from afar?", "busy-stream-url.png")
            elsewhere.close()
            assert posts == [STREAM + "api/chat"] * 2, posts
            return f"429 from the stream URL, Retry-After read through CORS; {held}; the retry answered there"

        check("a throttled stream URL on another origin (CORS)", stream_url_throttle)

        def clean() -> str:
            assert not outside, f"requests left the origin: {outside}"
            real = [e for e in errors if not REFUSED_LOAD.search(e)]
            assert not real, f"browser errors: {real}"
            return "no request to another origin, no script errors (the refusals' console lines aside)"

        check("nothing external, no errors", clean)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
