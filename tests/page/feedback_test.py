#!/usr/bin/env python3
"""Feedback on a reply in a real browser (tests/page/run), against a chat whose scripted model
cites Kent's districts (a tool whose rows are sources) and counts them with run_sql, and which
keeps comments to 200 characters (FEEDBACK_MAX_COMMENT_CHARS).

Checks what a user sees and what the team gets: the thumbs under a reply just streamed, their
pressed state (aria-pressed), rated and taken back from the keyboard, a thumbs down that opens
the comment box, a comment too long refused in words, the comment sent, the rating and comment
shown again after a reload; then `parley feedback export --rating down` (the built binary) has
that thumbs down with its comment, its SQL and its sources. Throughout: no CSP violation, no
console error, no request to another origin.

Environment: PARLEY_CHAT_URL, PARLEY_TOKEN (a bearer token for it), PARLEY_DATABASE_URL (the
chat's database, for the export), PARLEY_BIN (the parley binary), CHROMIUM, SCREENSHOTS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
TOKEN = os.environ["PARLEY_TOKEN"]
SHOTS = Path(os.environ["SCREENSHOTS"])
QUESTION = "How many districts does Kent have?"
SQL = "SELECT count(*) AS districts FROM lads WHERE utla_name = 'Kent'"
COMMENT = "It should list the districts, not only count them."


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["CHROMIUM"], args=["--no-sandbox", "--disable-dev-shm-usage"])
        outside: list[str] = []
        context = browser.new_context(viewport={"width": 1100, "height": 1100})
        context.route(
            "**/*",
            lambda route: (route.continue_() if route.request.url.startswith(BASE) or route.request.url.startswith("data:")
                           else (outside.append(route.request.url), route.abort())),
        )
        context.add_init_script(
            "window.__csp = []; document.addEventListener('securitypolicyviolation',"
            " (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));"
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # A refused save is a 422 the page reports in words; the browser logs the status too.
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "422" not in m.text else None)
        state: dict = {}

        def reply():
            return page.locator(".message.assistant").last

        def thumb(name: str):
            return reply().get_by_role("button", name=name, exact=True)

        def said():
            return reply().locator(".feedback-said")

        def ask() -> str:
            page.goto(BASE)
            page.get_by_label("Access token").fill(TOKEN)
            page.get_by_role("button", name="Sign in").click()
            box = page.get_by_label("Message", exact=True)
            box.fill(QUESTION)
            box.press("Enter")
            expect(reply().locator(".usage")).to_be_visible(timeout=30_000)
            state["conversation"] = page.evaluate("location.hash.slice(1)")
            tools = reply().locator("details.tool").evaluate_all("ds => ds.map(d => d.dataset.tool)")
            assert tools == ["cite_districts", "run_sql"], tools
            expect(reply().locator(".sources-box li")).not_to_have_count(0)
            return f"the model called {', '.join(tools)} and cited its sources"

        check("a reply that cites districts and runs SQL", ask)

        def thumbs_on_a_streamed_reply() -> str:
            for name in ("Good answer", "Bad answer"):
                expect(thumb(name)).to_be_visible()
                expect(thumb(name)).to_have_attribute("aria-pressed", "false")
            expect(reply().locator("textarea")).to_be_hidden()
            return "Good answer and Bad answer, neither pressed, no comment box yet"

        check("the thumbs under a reply just streamed", thumbs_on_a_streamed_reply)

        def keyboard() -> str:
            thumb("Good answer").focus()
            page.keyboard.press("Enter")
            expect(thumb("Good answer")).to_have_attribute("aria-pressed", "true")
            expect(said()).to_have_text("Thanks: your rating is saved.")
            expect(reply().get_by_role("button", name="Add a comment")).to_be_visible()
            # The pressed thumb again takes it back.
            thumb("Good answer").focus()
            page.keyboard.press("Space")
            expect(thumb("Good answer")).to_have_attribute("aria-pressed", "false")
            expect(said()).to_have_text("Feedback removed.")
            return "Enter rates, Space on the pressed thumb takes it back"

        check("rated and taken back from the keyboard", keyboard)

        def thumbs_down() -> str:
            thumb("Bad answer").click()
            expect(thumb("Bad answer")).to_have_attribute("aria-pressed", "true")
            expect(thumb("Good answer")).to_have_attribute("aria-pressed", "false")
            box = reply().get_by_label("What was wrong? (optional)")
            expect(box).to_be_visible()
            expect(box).to_be_focused()
            return "Bad answer pressed, the comment box open with the focus"

        check("a thumbs down opens the comment box", thumbs_down)

        def too_long() -> str:
            box = reply().get_by_label("What was wrong? (optional)")
            box.fill("x" * 201)
            reply().get_by_role("button", name="Send").click()
            expect(said()).to_contain_text("Your feedback was not saved")
            expect(said()).to_contain_text("at most 200")
            expect(said()).to_have_class("feedback-said error")
            expect(thumb("Bad answer")).to_have_attribute("aria-pressed", "true")
            return said().text_content()

        check("a comment over the limit is refused in words", too_long)

        def send() -> str:
            box = reply().get_by_label("What was wrong? (optional)")
            box.fill(COMMENT)
            box.press("Control+Enter")
            expect(said()).to_have_text("Thanks: your rating and comment are saved.")
            page.screenshot(path=str(SHOTS / "feedback.png"), full_page=True)
            return "saved with Ctrl+Enter"

        check("the comment sent with the rating", send)

        def reload() -> str:
            page.reload()
            expect(reply().locator(".usage")).to_be_visible(timeout=15_000)
            expect(thumb("Bad answer")).to_have_attribute("aria-pressed", "true")
            expect(thumb("Good answer")).to_have_attribute("aria-pressed", "false")
            expect(reply().get_by_label("What was wrong? (optional)")).to_have_value(COMMENT)
            return "Bad answer pressed, the comment in its box"

        check("after a reload the rating and comment are shown", reload)

        def export() -> str:
            out = subprocess.run(
                [os.environ["PARLEY_BIN"], "feedback", "export", "--rating", "down"],
                env={"DATABASE_URL": os.environ["PARLEY_DATABASE_URL"], "PATH": os.environ.get("PATH", "")},
                capture_output=True, text=True, timeout=60, check=False,
            )
            assert out.returncode == 0, out.stderr
            lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
            mine = [line for line in lines if line["feedback"]["conversation_id"] == state["conversation"]]
            assert len(mine) == 1, lines
            line = mine[0]
            assert line["q"] == QUESTION, line
            feedback = line["feedback"]
            assert feedback["rating"] == "down" and feedback["comment"] == COMMENT, feedback
            assert feedback["owner"] == "page-test-user", feedback
            sql = [c.get("sql") for c in feedback["tool_calls"] if c["name"] == "run_sql"]
            assert sql == [SQL], feedback["tool_calls"]
            sources = feedback["sources"]
            assert sources and all(s["title"] and s["uri"].startswith("https://example.org/districts/") for s in sources), sources
            assert any(s["cited"] for s in sources), sources
            assert line["pages"] == [] and line["tables"] == [], line
            return f"its SQL and {len(sources)} sources, the comment and the owner"

        check("parley feedback export --rating down has the thumbs down given in the page", export)

        def clean() -> str:
            csp = page.evaluate("window.__csp")
            assert not csp, csp
            assert not errors, errors
            assert not outside, outside
            return "no CSP violation, console error or request to another origin"

        check("nothing refused or broken along the way", clean)
        browser.close()
    sys.exit(checks.exit_status())


if __name__ == "__main__":
    main()
