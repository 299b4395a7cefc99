#!/usr/bin/env python3
"""The chat page's approval card in a real browser: Debian's Chromium, driven by Playwright
(tests/page/run), against a chat whose scripted model (tests/page/approval_script.json) calls the
tasks domain's destructive delete_task on task 90001, then answers after the result.

Environment: PARLEY_CHAT_URL (that chat, with the page at /), PARLEY_TOKEN (a bearer token for
PARLEY_USER), PARLEY_DATABASE_URL and PARLEY_PSQL (the test's database, read and seeded with
psql), CHROMIUM (the browser's path), SCREENSHOTS (a directory). Prints one ok:/FAIL: line per
check; exits 1 if any check failed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
TOKEN = os.environ["PARLEY_TOKEN"]
DATABASE_URL = os.environ["PARLEY_DATABASE_URL"]
PSQL = os.environ["PARLEY_PSQL"]
USER = os.environ["PARLEY_USER"]
SHOTS = Path(os.environ["SCREENSHOTS"])
# The task approval_script.json's model deletes.
TASK = 90001
# The resumed turn's answer, from approval_script.json.
ANSWER = "That is settled"
# delete_task's description as the tasks domain declares it (the card shows it under the tool).
DELETE_TASK_DESCRIPTION = next(
    t["description"].strip()
    for t in tomllib.loads((Path(__file__).resolve().parents[2] / "domains/tasks/tools.toml").read_text())["tool"]
    if t["name"] == "delete_task"
)
# A turn here is a model request or two against a scripted model: seconds at most.
TURN_MS = 20_000



def sql(query: str) -> str:
    """One statement through psql as the superuser (row-level security does not hide rows)."""
    out = subprocess.run([PSQL, "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", DATABASE_URL, "-c", query],
                         check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def add_task() -> None:
    """Task 90001 of the signed-in user, there again whatever an earlier check did to it."""
    sql(f"INSERT INTO tasks (id, owner, title, notes) OVERRIDING SYSTEM VALUE "
        f"VALUES ({TASK}, '{USER}', 'Cancel the gym membership', '') ON CONFLICT (id) DO NOTHING")


def task_exists() -> bool:
    return sql(f"SELECT count(*) FROM tasks WHERE id = {TASK}") == "1"


def deletions() -> int:
    """delete_task calls the mcp function ran (its audit trail), whatever they deleted."""
    return int(sql("SELECT count(*) FROM parley.audit WHERE tool = 'delete_task' AND outcome = 'ok'"))


def decisions(conversation: str) -> list[str]:
    return sql(f"SELECT decision FROM chat.approvals WHERE conversation_id = '{conversation}' "
               "ORDER BY created_at").split()


def ask(page: Page, text: str = "Delete my gym task, please.") -> None:
    """A new conversation, the question sent, and the card the paused turn shows."""
    page.get_by_role("button", name="New conversation").click()
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")
    expect(card(page)).to_be_visible(timeout=TURN_MS)


def card(page: Page):
    return page.locator("section.approval[data-tool=delete_task]").last


def conversation_of(page: Page) -> str:
    conversation = page.evaluate("location.hash.slice(1)")
    assert len(conversation) == 36, f"no conversation in the address: {conversation!r}"
    return conversation


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ["CHROMIUM"],
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        context = browser.new_context(viewport={"width": 1100, "height": 900})
        # Every tab of this context is signed in (sessionStorage is per tab).
        context.add_init_script(f"sessionStorage.setItem('parley.token', {json.dumps(TOKEN)})")
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error" else None)
        page.on("response", lambda r: errors.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
        page.goto(BASE)
        expect(page.get_by_label("Message", exact=True)).to_be_visible()

        def shows_the_call() -> str:
            add_task()
            ask(page)
            c = card(page)
            expect(c).to_be_focused()
            expect(c).to_have_attribute("data-decision", "pending")
            expect(c.locator("h4")).to_contain_text("delete_task")
            # Why it waits (delete_task is declared destructive) and what it does, as the tasks
            # domain's tools.toml describes it.
            expect(c.locator(".change")).to_contain_text("This deletes or overwrites data.")
            expect(c.locator(".about")).to_contain_text("Delete a task")
            expect(c.locator(".about")).to_contain_text(DELETE_TASK_DESCRIPTION[:60])
            row = c.locator("table.approval-args tbody tr")
            expect(row).to_have_count(1)
            expect(row.locator("th")).to_have_text("id")
            expect(row.locator("td")).to_have_text(str(TASK))
            expect(c.locator(".expires")).to_contain_text("Waiting for your answer until")
            expect(c.get_by_role("button", name="Approve")).to_be_enabled()
            expect(c.get_by_role("button", name="Deny")).to_be_enabled()
            # The call did not run: no tool output, the task is there, the server holds it back.
            assert page.locator("details.tool[data-tool=delete_task]").count() == 0, "the waiting call is shown as run"
            assert task_exists(), "the task went before anyone approved"
            assert decisions(conversation_of(page)) == ["pending"], decisions(conversation_of(page))
            c.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "approval-card.png"))
            return "tool, its description, what it changes, the arguments as a table, its expiry; focused; nothing ran"

        check("a call waiting for approval is a card", shows_the_call)

        def approve() -> str:
            c = card(page)
            before = deletions()
            # Whether both buttons were ever off together (the answer in flight).
            c.evaluate("""card => {
                window.__disabled = false;
                const buttons = card.querySelectorAll("button");
                new MutationObserver(() => {
                    if ([...buttons].every((b) => b.disabled)) window.__disabled = true;
                }).observe(card, {subtree: true, attributes: true, attributeFilter: ["disabled"]});
            }""")
            c.get_by_role("button", name="Approve").click()
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            assert page.evaluate("window.__disabled"), "the buttons stayed on while the answer was in flight"
            expect(c.locator(".outcome")).to_contain_text("Approved")
            expect(c.get_by_role("button", name="Approve")).to_be_hidden()
            expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER)
            assert not task_exists(), "the approved deletion did not happen"
            assert deletions() == before + 1, f"{deletions() - before} deletions ran"
            page.screenshot(path=str(SHOTS / "approval-done.png"))
            page.reload()
            expect(card(page)).to_have_attribute("data-outcome", "done")
            expect(card(page).locator(".outcome")).to_contain_text("done")
            expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER)
            # The resumed turn's stored traces start with the call it ran.
            expect(page.locator("details.tool[data-tool=delete_task].done")).to_have_count(1)
            return "buttons off in flight; the task is gone (one deletion in the audit); the card says done, also after a reload"

        check("approve: the call runs once and the turn goes on", approve)

        def deny() -> str:
            add_task()
            ask(page)
            c = card(page)
            c.get_by_label("Reason, if you deny (optional)").fill("keep it <b>for now</b>")
            c.get_by_role("button", name="Deny").focus()
            page.keyboard.press("Enter")
            expect(c).to_have_attribute("data-decision", "denied", timeout=TURN_MS)
            expect(c.locator(".outcome")).to_contain_text("Declined")
            expect(c.locator(".outcome")).to_contain_text("keep it <b>for now</b>")
            expect(page.locator(".message.assistant .markdown").last).to_contain_text(ANSWER)
            assert task_exists(), "a denied deletion ran"
            assert decisions(conversation_of(page)) == ["denied"], decisions(conversation_of(page))
            page.screenshot(path=str(SHOTS / "approval-declined.png"))
            page.reload()
            expect(card(page)).to_have_attribute("data-decision", "denied")
            expect(card(page).locator(".outcome")).to_contain_text("keep it")
            return "the task is still there, the card says declined with the reason, also after a reload"

        check("deny: the call does not run", deny)

        def reload_while_pending() -> str:
            add_task()
            ask(page)
            page.reload()
            c = card(page)
            expect(c).to_have_attribute("data-decision", "pending")
            expect(c).to_be_focused()
            expect(c.locator("table.approval-args td")).to_have_text(str(TASK))
            # Read back from the stored approval: the same sentence and description.
            expect(c.locator(".change")).to_contain_text("This deletes or overwrites data.")
            expect(c.locator(".about")).to_contain_text(DELETE_TASK_DESCRIPTION[:60])
            c.get_by_role("button", name="Approve").click()
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            assert not task_exists(), "approved after a reload, the task is still there"
            return "the card is back from the messages endpoint, focused, and its Approve still works"

        check("reload while the call waits", reload_while_pending)

        def two_tabs() -> str:
            add_task()
            ask(page)
            conversation = conversation_of(page)
            other = context.new_page()
            other.on("pageerror", lambda e: errors.append(str(e)))
            other.goto(BASE + "#" + conversation)
            expect(card(other)).to_have_attribute("data-decision", "pending")
            before = deletions()
            # Both answers leave before either is answered.
            card(page).get_by_role("button", name="Approve").click()
            card(other).get_by_role("button", name="Approve").click()
            for tab in (page, other):
                expect(card(tab)).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
                expect(tab.locator(".message.assistant .markdown", has_text=ANSWER)).to_have_count(1)
            assert not task_exists()
            assert deletions() == before + 1, f"{deletions() - before} deletions ran"
            assert decisions(conversation) == ["approved"], decisions(conversation)
            told = [t.locator("#status").text_content() or "" for t in (page, other)]
            assert any("another tab" in s for s in told), f"neither tab said the other answered: {told}"
            other.screenshot(path=str(SHOTS / "approval-second-tab.png"))
            other.close()
            return "one deletion; both tabs show the card done and the one resumed reply; one says another tab answered"

        check("two tabs approving at once", two_tabs)

        def busy_conversation() -> str:
            # Another tab's turn held the conversation past TURN_LOCK_WAIT_MS: 409 before anything
            # was decided. The page says so calmly and shows the conversation as stored.
            add_task()
            ask(page)
            answered: list[dict] = []

            def busy(route) -> None:
                answered.append(route.request.post_data_json)
                route.fulfill(status=409, json={"error": {
                    "code": "conversation_busy", "message": "another turn is running in this conversation"}})

            page.route("**/api/chat", busy)
            card(page).get_by_role("button", name="Approve").click()
            expect(page.locator("#status")).to_contain_text("busy with an answer from another tab")
            page.unroute("**/api/chat")
            assert answered and answered[0].get("approvals", [{}])[0].get("approved") is True, answered
            c = card(page)
            expect(c).to_have_attribute("data-decision", "pending")
            expect(c.get_by_role("button", name="Approve")).to_be_enabled()
            assert page.locator(".message.assistant .error").count() == 0, "the refusal is shown as a failed turn"
            assert task_exists()
            c.get_by_role("button", name="Approve").click()
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            assert not task_exists()
            return "a calm line, no error in the conversation, the card redrawn from the server and still answerable"

        check("a busy conversation (409) while answering", busy_conversation)

        def busy_service() -> str:
            # API Gateway's busy response (template.yaml's PageApiBusyResponse) to the answer:
            # nothing was decided, so the card says so with the wait, holds its buttons for it,
            # and the same answer then goes through to the real chat.
            add_task()
            ask(page)
            c = card(page)
            refused: list[dict] = []

            def gateway(route) -> None:
                refused.append(route.request.post_data_json)
                route.fulfill(status=503, headers={"Retry-After": "7"}, json={"error": {
                    "code": "busy", "message": "The assistant is busy, or could not be reached: try again in 10 seconds."}})

            page.route("**/api/chat", gateway, times=1)
            before = deletions()
            c.get_by_role("button", name="Approve").click()
            expect(c.locator(".outcome")).to_have_text("Not sent: Parley is busy right now; try again in 7 s.")
            refused_at = time.monotonic()
            approve_button = c.locator("button.approve")
            expect(approve_button).to_be_disabled()
            expect(approve_button).to_have_text(re.compile(r"^Approve \([1-7] s\)$"))
            expect(c).to_have_attribute("data-decision", "pending")
            assert page.locator(".message.assistant .error").count() == 0, "the refusal is shown as a failed turn"
            assert "503" not in (c.text_content() or "")
            c.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "approval-busy.png"))
            expect(approve_button).to_be_enabled(timeout=12_000)
            held = time.monotonic() - refused_at
            assert held >= 5.5, f"the buttons came back after {held:.1f} s"
            expect(approve_button).to_have_text("Approve")
            expect(c.locator(".outcome")).to_have_text("Not sent, as Parley was busy. You can answer again now.")
            assert task_exists() and deletions() == before, "the refused answer ran the call"
            assert decisions(conversation_of(page)) == ["pending"], decisions(conversation_of(page))
            approve_button.click()
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            assert not task_exists() and deletions() == before + 1
            assert refused and refused[0]["approvals"][0]["approved"] is True, refused
            return f"the card said busy and 7 s, held its buttons {held:.1f} s; the same answer then ran the call once"

        check("a busy service (503) while answering", busy_service)

        def outcome_unknown() -> str:
            # The chat's own 503 approval_outcome_unknown (the approved call's answer did not
            # arrive): the card offers the same answer again after the wait, and only that.
            add_task()
            ask(page)
            c = card(page)
            page.route("**/api/chat", lambda route: route.fulfill(status=503, headers={"Retry-After": "2"}, json={"error": {
                "code": "approval_outcome_unknown",
                "message": "the approved call `delete_task` was sent but its answer did not arrive in time"}}), times=1)
            c.get_by_role("button", name="Approve").click()
            expect(c.locator(".outcome")).to_contain_text("Send the same answer again in 2 s")
            again = c.get_by_role("button", name="Send the approval again")
            expect(again).to_be_enabled(timeout=6_000)
            expect(c.get_by_role("button", name="Deny")).to_be_hidden()
            expect(c.locator(".outcome")).to_contain_text("send the same answer again now")
            again.click()
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            expect(c.get_by_role("button", name="Approve")).to_be_hidden()
            assert not task_exists()
            return "the card offered 'Send the approval again' after 2 s (no Deny); sent, the call ran"

        check("an approved call's outcome unknown (503)", outcome_unknown)

        def keyboard_only() -> str:
            add_task()
            page.get_by_role("button", name="New conversation").focus()
            page.keyboard.press("Enter")
            expect(page.get_by_label("Message", exact=True)).to_be_focused()
            page.keyboard.type("Delete my gym task, from the keyboard.")
            page.keyboard.press("Enter")
            c = card(page)
            expect(c).to_be_visible(timeout=TURN_MS)
            expect(c).to_be_focused()
            page.keyboard.press("Tab")
            approve_button = c.get_by_role("button", name="Approve")
            expect(approve_button).to_be_focused()
            ring = approve_button.evaluate("b => { const s = getComputedStyle(b); return [s.outlineStyle, s.outlineWidth]; }")
            assert ring[0] != "none" and ring[1] != "0px", f"no visible focus ring on Approve: {ring}"
            page.screenshot(path=str(SHOTS / "approval-keyboard.png"))
            page.keyboard.press("Space")
            expect(c).to_have_attribute("data-outcome", "done", timeout=TURN_MS)
            assert not task_exists()
            return "the card takes the focus, Tab reaches Approve (with a focus ring), Space approves"

        check("keyboard-only approval", keyboard_only)

        def new_message_declines() -> str:
            add_task()
            ask(page)
            first = card(page)
            approval_id = first.get_attribute("data-approval-id")
            box = page.get_by_label("Message", exact=True)
            box.fill("Never mind, what is on my list?")
            box.press("Enter")
            declined = page.locator(f"section.approval[data-approval-id='{approval_id}']")
            expect(declined).to_have_attribute("data-decision", "denied", timeout=TURN_MS)
            expect(declined.locator(".outcome")).to_contain_text("Declined")
            assert task_exists(), "the call a new message declined ran"
            page.reload()
            expect(declined).to_have_attribute("data-decision", "denied")
            return "the waiting card shows declined, the task is still there"

        check("a new message declines the waiting call", new_message_declines)

        def arguments_as_text() -> str:
            # A stored pause whose arguments hold markup and a value wider than any window.
            fake = "6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f21"
            long = "x" * 1500
            approval = {"id": "0d9f0c1e-2b3a-4c5d-8e7f-901234567890", "step": 1, "call_id": "c1", "server": "mail",
                        "tool": "send_email", "arguments": {"to": "<img src=x onerror=\"window.__pwned=1\">",
                                                            "body": long, "copies": {"cc": ["a@example.org"]}},
                        "created_at": "2026-01-01T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z",
                        "decision": "pending", "decided_by": None, "decided_at": None, "reason": None,
                        "result": None, "result_is_error": False}
            # One decided expired, one still pending whose time has passed: neither takes an answer.
            late = {**approval, "id": "0d9f0c1e-2b3a-4c5d-8e7f-901234567891", "call_id": "c2", "tool": "pay_invoice",
                    "arguments": {"amount": 12}, "decision": "expired", "decided_at": "2026-01-01T00:20:00Z"}
            gone = {**late, "id": "0d9f0c1e-2b3a-4c5d-8e7f-901234567892", "call_id": "c3", "tool": "cancel_order",
                    "decision": "pending", "decided_at": None, "expires_at": "2026-01-01T00:15:00Z"}
            messages = {"conversation_id": fake, "messages": [
                {"seq": 1, "role": "user", "content": "Mail it", "created_at": "2026-01-01T00:00:00Z"},
                {"seq": 2, "role": "assistant", "content": "", "created_at": "2026-01-01T00:00:00Z", "traces": [],
                 "usage": None, "steps": 1, "sources": [], "approvals": [approval, late, gone]}]}
            page.route(f"**/api/conversations/{fake}/messages", lambda route: route.fulfill(json=messages))
            page.goto(BASE + "#" + fake)
            page.reload()
            c = page.locator("section.approval[data-tool=send_email]")
            expect(c).to_be_visible()
            expect(c.locator("tbody tr")).to_have_count(3)
            expect(c.locator("tbody td").first).to_have_text('<img src=x onerror="window.__pwned=1">')
            assert c.locator("img").count() == 0, "an argument became markup"
            fits = c.evaluate("n => n.scrollWidth <= n.clientWidth + 1")
            assert fits, "a long argument runs past the card's edge"
            expect(c.locator("tbody td").nth(2)).to_contain_text('"cc"')
            assert page.evaluate("window.__pwned") is None
            for tool in ("pay_invoice", "cancel_order"):
                expired = page.locator(f"section.approval[data-tool={tool}]")
                expect(expired).to_have_attribute("data-decision", "expired")
                expect(expired.locator(".outcome")).to_contain_text("Expired: not run")
                expect(expired.get_by_role("button", name="Approve")).to_be_hidden()
            page.unroute(f"**/api/conversations/{fake}/messages")
            return "markup shown as text, a 1,500-character value wrapped inside the card, objects as JSON; expired calls say so"

        check("arguments are text, wrapped; expired calls take no answer", arguments_as_text)

        def clean() -> str:
            # Chromium asks for /favicon.ico by itself; the page has none to give.
            # The 409 and the two 503s of the busy cases are logged by the browser on purpose
            # (once as a response, once in the console each).
            real = [e for e in errors if "/favicon.ico" not in e and "409" not in e]
            refused = [e for e in real if e.startswith("503 POST ") or "status of 503" in e]
            assert len(refused) <= 4, f"more 503s than the busy cases sent: {refused}"
            real = [e for e in real if e not in refused]
            assert not real, f"browser errors: {real}"
            return "no script errors"

        check("no errors", clean)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
