#!/usr/bin/env python3
"""The chat page when its user is over their daily token budget or question rate (issue 37),
in a real browser (tests/page/run): Debian's Chromium, driven by Playwright, against a chat
whose budget is 1 token a day (BUDGET_DAILY_TOKENS=1: one answer spends it) and whose group
`raters` has no budget but one question a minute (QUOTA_GROUP_OVERRIDES), on the scripted model
of page_test.py. Nothing here is simulated: the refusals are the chat's own 429
`quota_exceeded`.

The browser runs in en-GB on India's clock (UTC+05:30), so the reset the page names is visibly
converted from the server's UTC midnight. Checks what a person sees: after one answer, the next
question is refused with "You have used your token budget for today. It resets at 05:30, in N
h M min", the question is back in the message box, nothing of it is added to the conversation,
and it is not said to be "busy"; a member of `raters` asking twice in a minute is told when to
ask again, with Send held for that wait. Screenshot: quota.png (and quota-rate.png).

Environment: PARLEY_CHAT_URL (the chat), PARLEY_JWT_SECRET (its HS256 secret: the test mints a
token per user), CHROMIUM, SCREENSHOTS.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path
from zoneinfo import ZoneInfo

from playwright.sync_api import Page, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
SECRET = os.environ["PARLEY_JWT_SECRET"]
SHOTS = Path(os.environ["SCREENSHOTS"])
ZONE = "Asia/Kolkata"
ANSWER = "Kent has 3 districts"
TURN_MS = 30_000
REFUSED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of 429")


def token(sub: str, groups: list[str] | None = None) -> str:
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    claims = {"sub": sub, "exp": int(time.time()) + 3600}
    if groups:
        claims["groups"] = groups
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def box(page: Page):
    return page.get_by_label("Message", exact=True)


def ask(page: Page, question: str) -> None:
    box(page).fill(question)
    box(page).press("Enter")


def answered(page: Page, question: str) -> None:
    replies = page.locator(".message.assistant").count()
    ask(page, question)
    expect(page.locator(".message.assistant")).to_have_count(replies + 1, timeout=TURN_MS)
    expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER, timeout=TURN_MS)
    expect(page.locator("#send")).to_be_visible(timeout=TURN_MS)


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["CHROMIUM"], args=["--no-sandbox", "--disable-dev-shm-usage"])
        errors: list[str] = []

        def signed_in(sub: str, groups: list[str] | None = None) -> Page:
            context = browser.new_context(viewport={"width": 1100, "height": 900}, locale="en-GB", timezone_id=ZONE)
            context.add_init_script(f"sessionStorage.setItem('parley.token', {json.dumps(token(sub, groups))})")
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error" else None)
            page.goto(BASE)
            expect(box(page)).to_be_visible()
            return page

        def budget() -> str:
            page = signed_in(f"quota-{secrets.token_hex(4)}")
            answered(page, "Which districts are in Kent?")
            users = page.locator(".message.user").count()
            replies = page.locator(".message.assistant").count()
            question = "And which are in Surrey?"
            ask(page, question)
            status = page.locator("#status")
            expect(status).to_contain_text("You have used your token budget for today.")
            now = dt.datetime.now(dt.timezone.utc)
            reset = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.timezone.utc)
            local = reset.astimezone(ZoneInfo(ZONE))
            day = "" if local.date() == now.astimezone(ZoneInfo(ZONE)).date() else "tomorrow "
            expect(status).to_contain_text(f"It resets {day}at {local:%H:%M}, in ")
            expect(status).to_contain_text("Your question is back in the message box.")
            text = status.inner_text()
            left = re.search(r"in (?:(\d+) h)? ?(?:(\d+) min)?\.", text)
            assert left, text
            said = int(left.group(1) or 0) * 60 + int(left.group(2) or 0)
            minutes = (reset - now).total_seconds() / 60
            assert abs(said - minutes) <= 2, f"{text!r}: {minutes:.1f} min left"
            assert "busy" not in text.lower(), f"said to be busy: {text!r}"
            assert "quota" in (status.get_attribute("class") or ""), "the notice is not marked"
            expect(box(page)).to_have_value(question)
            # A budget resets in hours: the page says when rather than holding Send.
            expect(page.locator("#send")).to_be_enabled()
            expect(page.locator(".message.user")).to_have_count(users)
            expect(page.locator(".message.assistant")).to_have_count(replies)
            page.screenshot(path=str(SHOTS / "quota.png"))
            # A reload shows the conversation as stored: the refused question is not in it.
            page.reload()
            expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER, timeout=TURN_MS)
            expect(page.locator(".message.user")).to_have_count(users)
            return text

        check("over the day's budget: the page says it resets at 05:30 India time, the question kept", budget)

        def rate() -> str:
            page = signed_in(f"rater-{secrets.token_hex(4)}", ["raters"])
            answered(page, "Which districts are in Kent?")
            question = "And which are in Essex?"
            ask(page, question)
            status = page.locator("#status")
            expect(status).to_contain_text("You have asked too many questions in a minute. You can ask again at ")
            text = status.inner_text()
            m = re.search(r"ask again at (\d\d:\d\d:\d\d), in (\d+) s\.", text)
            assert m, text
            wait = int(m.group(2))
            assert 1 <= wait <= 60, text
            local = dt.datetime.now(ZoneInfo(ZONE)) + dt.timedelta(seconds=wait)
            shown = dt.datetime.strptime(m.group(1), "%H:%M:%S").time()
            drift = abs((dt.datetime.combine(local.date(), shown, local.tzinfo) - local).total_seconds())
            assert drift <= 3 or drift >= 86400 - 3, f"{m.group(1)} is not {wait} s from now on India's clock"
            assert "busy" not in text.lower(), f"said to be busy: {text!r}"
            expect(box(page)).to_have_value(question)
            expect(page.locator("#send")).to_be_disabled()
            expect(page.locator("#send")).to_have_text(re.compile(r"^Send in \d+ s$"))
            page.screenshot(path=str(SHOTS / "quota-rate.png"))
            return text

        check("over the question rate: when to ask again, Send held for it", rate)

        def clean() -> str:
            # The refusals are on purpose; the browser's own favicon lookup is not the page's.
            real = [e for e in errors if not REFUSED_LOAD.search(e) and "/favicon.ico" not in e]
            assert not real, f"browser errors: {real}"
            return "no script errors (the refusals' console lines and the browser's favicon lookup aside)"

        check("no errors", clean)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
