#!/usr/bin/env python3
"""The chat page's Usage view in a real browser: Debian's Chromium, driven by Playwright
(tests/page/run), against two chats on the test's database asking the same scripted model
(tests/page/llm_script.json: a list_lads call, then an answer, 1200 tokens in and 80 out per
answer) as the models page-priced (priced by MODEL_PRICES) and page-unpriced (not), with
ADMIN_GROUP=usage-admins. The test posts turns as three users, then reads the view: an admin
sees every user's turns, tokens and cost as the ledger holds them (read with psql, priced
here), a user only their own; an unpriced model's cost is "unknown"; keyboard and a screenshot.

Environment: PARLEY_CHAT_URL and PARLEY_UNPRICED_CHAT_URL (the two chats, the page at /),
PARLEY_JWT_SECRET (their HS256 secret), PARLEY_PRICES (their MODEL_PRICES),
PARLEY_DATABASE_URL and PARLEY_PSQL (the test's database, read with psql), CHROMIUM (the
browser's path), SCREENSHOTS (a directory). Prints one ok:/FAIL: line per check; exits 1 if any
check failed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
UNPRICED = os.environ["PARLEY_UNPRICED_CHAT_URL"].rstrip("/") + "/"
SECRET = os.environ["PARLEY_JWT_SECRET"]
PRICES = json.loads(os.environ["PARLEY_PRICES"])
DATABASE_URL = os.environ["PARLEY_DATABASE_URL"]
PSQL = os.environ["PARLEY_PSQL"]
SHOTS = Path(os.environ["SCREENSHOTS"])
ADMIN, ANN, BO = "usage-admin", "usage-ann", "usage-bo"
# A page load and a report against a local chat: seconds at most.
LOAD_MS = 20_000


def token(sub: str, groups: list[str]) -> str:
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": sub, "groups": groups, "exp": int(time.time()) + 3600}).encode())
    sig = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


TOKENS = {ADMIN: token(ADMIN, ["staff", "usage-admins"]), ANN: token(ANN, ["staff"]), BO: token(BO, [])}


def turn(chat: str, user: str, message: str) -> None:
    request = urllib.request.Request(
        f"{chat}api/chat", data=json.dumps({"message": message}).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[user]}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200, response.status


def sql(query: str) -> list[list[str]]:
    """Rows of one statement through psql as the superuser, fields split on tabs."""
    out = subprocess.run([PSQL, "-XAtq", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", DATABASE_URL, "-c", query],
                         check=True, capture_output=True, text=True, timeout=30)
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def cost_text(cost: Decimal | None) -> str:
    """A cost as the page shows it: JavaScript's shortest form of the number, or "" (shown as
    "unknown") when a model of it has no price."""
    return "" if cost is None else format(cost.normalize(), "f")


def ledger(key: str, owner: str | None = None) -> dict[str, list[str]]:
    """The ledger's sums of the last 7 UTC days per `key`, as the page's cells: turns, model
    calls, tokens in and out, tool calls, tool errors, failed turns, and the cost priced here
    from PARLEY_PRICES, each model's tokens at its own price."""
    where = f"AND owner = '{owner}'" if owner else ""
    rows = sql(
        f"SELECT {key}, model, count(*), sum(model_calls), sum(input_tokens), sum(output_tokens), "
        "sum(tool_calls), sum(tool_errors), count(*) FILTER (WHERE error) FROM chat.turn_usage "
        f"WHERE at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '6 days' {where} "
        "GROUP BY 1, 2")
    sums: dict[str, list[int]] = {}
    costs: dict[str, Decimal] = {}
    unknown: set[str] = set()
    for k, model, *numbers in rows:
        acc = sums.setdefault(k, [0] * 7)
        for i, n in enumerate(numbers):
            acc[i] += int(n)
        price = PRICES.get(model, PRICES.get("*"))
        if price is None:
            unknown.add(k)
            continue
        part = Decimal(numbers[2]) * Decimal(str(price["input"])) + Decimal(numbers[3]) * Decimal(str(price["output"]))
        costs[k] = costs.get(k, Decimal(0)) + part / Decimal(1_000_000)
    return {k: [str(n) for n in v] + [cost_text(None if k in unknown else costs.get(k, Decimal(0)))]
            for k, v in sums.items()}


def table(page: Page) -> dict[str, list[str]]:
    """The view's rows, by their first cell."""
    rows = page.eval_on_selector_all(
        "#usage-report tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    return {cells[0]: cells[1:] for cells in rows}


def totals(page: Page) -> list[str]:
    return page.eval_on_selector_all("#usage-report tfoot tr > *", "cells => cells.map(c => c.textContent)")


def open_usage(page: Page) -> None:
    page.get_by_role("button", name="Usage", exact=True).click()
    expect(page.get_by_role("heading", name="Usage", exact=True)).to_be_focused()
    expect(page.locator("#usage-report table.rows, #usage-empty")).to_be_visible(timeout=LOAD_MS)
    expect(page.locator("#usage")).not_to_have_attribute("aria-busy", "true")


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)

    def traffic() -> str:
        turn(BASE, ANN, "Kent's districts?")
        turn(BASE, ANN, "Again, please.")
        turn(BASE, BO, "Kent's districts?")
        turn(UNPRICED, BO, "And on the other model?")
        turn(BASE, ADMIN, "Kent's districts?")
        count = sql("SELECT count(*) FROM chat.turn_usage WHERE owner LIKE 'usage-%'")[0][0]
        assert count == "5", f"{count} ledger rows for 5 turns"
        return "5 turns by 3 users on 2 models, 5 rows in the ledger"

    check("a day of traffic through the chat", traffic)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["CHROMIUM"],
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])

        def signed_in(user: str) -> tuple[Page, list[str]]:
            context = browser.new_context(viewport={"width": 1200, "height": 900})
            context.add_init_script(f"sessionStorage.setItem('parley.token', {json.dumps(TOKENS[user])})")
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            # The browser's own favicon request is no error of the page's.
            page.on("console", lambda m: errors.append(f"{m.text} {m.location}")
                    if m.type == "error" and "favicon.ico" not in str(m.location) else None)
            page.goto(BASE)
            expect(page.get_by_label("Message", exact=True)).to_be_visible()
            return page, errors

        admin, admin_errors = signed_in(ADMIN)

        def admin_per_user() -> str:
            open_usage(admin)
            expect(admin.locator("#usage-scope")).to_have_text("Everyone's usage: you are in the admin group.")
            expect(admin.get_by_label("Per", exact=True)).to_have_value("user")
            expected = ledger("owner")
            shown = table(admin)
            assert shown == expected, f"page {shown} != ledger {expected}"
            assert {ANN, BO, ADMIN} <= shown.keys(), shown.keys()
            # bo's turn on page-unpriced makes his cost unknown, and says so.
            assert shown[BO][-1] == "", shown[BO]
            after = admin.locator("#usage-report tbody tr", has_text=BO).locator("td").last.evaluate(
                "c => getComputedStyle(c, '::after').content")
            assert after == '"unknown"', after
            foot = totals(admin)
            assert foot[0] == "Total" and foot[-1] == "unknown", foot
            assert foot[1] == str(sum(int(v[0]) for v in expected.values())), foot
            expect(admin.locator("#usage-note")).to_contain_text("MODEL_PRICES")
            # The other phases' chats ask the default model, unpriced too: named with it.
            expect(admin.locator("#usage-note")).to_contain_text("No price for ")
            expect(admin.locator("#usage-note")).to_contain_text("page-unpriced")
            assert "page-priced" not in admin.locator("#usage-note").inner_text().split("No price")[1]
            admin.screenshot(path=str(SHOTS / "usage.png"), full_page=True)
            return f"{len(shown)} users, each as the ledger sums them; unknown cost said; totals"

        check("an admin sees every user's usage as the ledger holds it", admin_per_user)

        def admin_per_model_by_keyboard() -> str:
            by = admin.get_by_label("Per", exact=True)
            by.focus()
            by.select_option("model")
            expect(admin.locator("#usage-report thead")).to_contain_text("model", timeout=LOAD_MS)
            expect(admin.locator("#usage-report tbody tr")).to_have_count(len(ledger("model")), timeout=LOAD_MS)
            shown = table(admin)
            assert shown == ledger("model"), f"{shown} != {ledger('model')}"
            assert shown["page-priced"][-1] not in ("", "0"), shown
            assert shown["page-unpriced"][-1] == "", shown
            # Sorting by a column is the table's own: a header button, from the keyboard.
            admin.get_by_role("button", name="tokens in", exact=True).focus()
            admin.keyboard.press("Enter")
            expect(admin.locator("#usage-report th[aria-sort=ascending]")).to_have_count(1)
            # Escape goes back to the chat, focus on the Usage button.
            admin.keyboard.press("Escape")
            expect(admin.locator("#usage")).to_be_hidden()
            expect(admin.get_by_label("Message", exact=True)).to_be_visible()
            expect(admin.get_by_role("button", name="Usage", exact=True)).to_be_focused()
            return "per model, the unpriced one unknown; sorted and closed from the keyboard"

        check("per model, from the keyboard", admin_per_model_by_keyboard)

        ann, ann_errors = signed_in(ANN)

        def a_user_sees_only_their_own() -> str:
            open_usage(ann)
            expect(ann.locator("#usage-scope")).to_have_text("Your own usage.")
            expect(ann.get_by_label("Per", exact=True)).to_have_value("day")
            shown = table(ann)
            assert shown == ledger("to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')", ANN), shown
            ann.get_by_label("Per", exact=True).select_option("user")
            expect(ann.locator("#usage-report tbody tr")).to_have_count(1, timeout=LOAD_MS)
            expect(ann.locator("#usage-report thead")).to_contain_text("user")
            shown = table(ann)
            assert shown == ledger("owner", ANN), shown
            text = ann.locator("#usage").inner_text()
            assert BO not in text and ADMIN not in text, text
            ann.get_by_label("Period", exact=True).select_option("1d")
            expect(ann.locator("#usage-report tbody tr")).to_have_count(1, timeout=LOAD_MS)
            return f"{ANN}'s turns only: {shown[ANN][0]} turns, cost {shown[ANN][-1]}"

        check("a user outside the admin group sees only their own", a_user_sees_only_their_own)

        def no_errors() -> str:
            errors = admin_errors + ann_errors
            assert not errors, errors
            return "no console or page errors (CSP included)"

        check("no errors", no_errors)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
