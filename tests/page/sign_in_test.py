#!/usr/bin/env python3
"""The chat page's sign-in with a real OpenID provider, in a real browser (tests/page/run).

tests/page/oidc_provider.mjs (the certified `oidc-provider`, its development login form) runs
on loopback; the chat under test has OIDC_ISSUER pointing at it and verifies its RS256 access
tokens (JWT_JWKS_URL, JWT_ISSUER, JWT_AUDIENCE, JWT_LEEWAY_SECS=0, so an expired token is
refused at once). Debian's Chromium, driven by Playwright, signs in through the provider's
form, asks, reloads, outlives its first access token, is refused, loses its session mid-turn and
signs out.

Environment: PARLEY_OIDC_CHAT_URL (that chat, page at /), PARLEY_OIDC_ISSUER, PARLEY_OIDC_CLIENT_ID,
PARLEY_ACCESS_TOKEN_TTL (seconds), CHROMIUM, SCREENSHOTS. Prints one ok:/FAIL: line per check;
exits 1 if any check failed.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_OIDC_CHAT_URL"].rstrip("/") + "/"
ISSUER = os.environ["PARLEY_OIDC_ISSUER"]
CLIENT_ID = os.environ["PARLEY_OIDC_CLIENT_ID"]
TTL = int(os.environ["PARLEY_ACCESS_TOKEN_TTL"])
SHOTS = Path(os.environ["SCREENSHOTS"])
USER = "ada"
QUESTION = "Which districts are in Kent?"
LATER = "And which are in Kent after the refresh?"
INTERRUPTED = "A question asked as the session ends"



def claims(token: str) -> dict:
    body = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def session(page: Page) -> dict | None:
    raw = page.evaluate("sessionStorage.getItem('parley.session')")
    return json.loads(raw) if raw else None


def chat_status(token: str) -> int:
    """What the chat answers this bearer token, outside the browser."""
    request = urllib.request.Request(BASE + "api/conversations?limit=1", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def revoke(refresh_token: str) -> None:
    """Revokes a refresh token at the provider (RFC 7009), as an administrator or a password
    change would; the provider then refuses it and ends its grant."""
    body = urllib.parse.urlencode({"token": refresh_token, "token_type_hint": "refresh_token",
                                   "client_id": CLIENT_ID}).encode()
    with urllib.request.urlopen(urllib.request.Request(ISSUER + "/token/revocation", data=body), timeout=10) as r:
        assert r.status == 200, r.status


def through_provider(page: Page, user: str = USER) -> str:
    """From the page to the provider and back: its development login form when it has no
    session, its consent screen when it asks; returns what it showed."""
    page.wait_for_url(lambda url: url.startswith(ISSUER))
    shown = []
    while True:
        page.wait_for_url(lambda url: url.startswith(BASE) or "/interaction/" in url)
        if page.url.startswith(BASE):
            return ", ".join(shown) or "nothing (straight back)"
        at = page.url
        form = page.locator("input[name=login], button:has-text('Continue')").first
        form.wait_for()
        if page.locator("input[name=login]").count():
            shown.append("login form")
            page.locator("input[name=login]").fill(user)
            page.locator("input[name=password]").fill("any password")
            page.get_by_role("button", name="Sign-in").click()
        else:
            shown.append("consent")
            page.get_by_role("button", name="Continue").click()
        page.wait_for_url(lambda url, at=at: url != at)


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ["CHROMIUM"],
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        # Only the chat and the provider: anything else (the provider's pages import a web font)
        # is cut off, and any request the chat page makes elsewhere is a failure.
        outside: list[str] = []

        def only_loopback(route) -> None:
            url = route.request.url
            if url.startswith(BASE) or url.startswith(ISSUER + "/") or url.startswith("data:"):
                route.continue_()
                return
            if route.request.frame.url.startswith(BASE):
                outside.append(url)
            route.abort()

        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", only_loopback)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # Bearer tokens the chat received on POST api/chat, in order.
        turn_tokens: list[str] = []
        page.on("request", lambda r: turn_tokens.append(r.headers.get("authorization", ""))
                if r.url == BASE + "api/chat" and r.method == "POST" else None)
        first: dict = {}

        def sign_in() -> str:
            page.goto(BASE)
            expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
            button = page.get_by_role("button", name="Sign in")
            expect(button).to_be_focused()
            page.screenshot(path=str(SHOTS / "oidc-sign-in.png"))
            page.keyboard.press("Enter")
            page.wait_for_url(lambda url: url.startswith(ISSUER))
            expect(page.locator("input[name=login]")).to_be_visible()
            page.screenshot(path=str(SHOTS / "oidc-provider-login.png"))
            shown = through_provider(page)
            assert shown.startswith("login form"), shown
            expect(page.get_by_label("Message", exact=True)).to_be_visible()
            assert "code=" not in page.url and "state=" not in page.url, f"the code stayed in the address: {page.url}"
            stored = session(page)
            assert stored and stored["refresh_token"] and stored["id_token"], f"tokens not kept: {stored}"
            token = claims(stored["access_token"])
            assert token["sub"] == USER and token["iss"] == ISSUER, token
            cookies = [c["name"] for c in context.cookies(BASE)]
            assert not any("token" in c.lower() or "parley" in c.lower() for c in cookies), cookies
            local = page.evaluate("Object.keys(localStorage)")
            assert not [k for k in local if "session" in k or "token" in k], f"tokens in localStorage: {local}"
            first.update(stored)
            return f"through the provider's form as {USER}; an RS256 access token for {token['aud']}, kept in sessionStorage only; the code gone from the address"

        check("sign in through the OpenID provider", sign_in)

        def ask() -> str:
            box = page.get_by_label("Message", exact=True)
            box.fill(QUESTION)
            box.press("Enter")
            reply = page.locator(".message.assistant .markdown").last
            expect(reply).to_contain_text("Kent has 3 districts", timeout=30_000)
            assert turn_tokens and turn_tokens[-1] == f"Bearer {first['access_token']}", "the turn did not carry the access token"
            page.screenshot(path=str(SHOTS / "oidc-signed-in.png"), full_page=True)
            return "the scripted model answered; the turn carried the provider's access token"

        check("ask when signed in", ask)

        def reload() -> str:
            page.reload()
            expect(page.locator("#conversations a").first).to_contain_text(QUESTION[:20])
            assert page.url.startswith(BASE), page.url
            expect(page.locator(".message.assistant .markdown").first).to_contain_text("Kent has 3 districts")
            return "after a reload the conversation is there, without going back to the provider"

        check("reload and stay signed in", reload)

        def refreshed() -> str:
            # The first access token runs out (JWT_LEEWAY_SECS=0); the page must have renewed it.
            wait = first["expires_at"] / 1000 - time.time() + 1
            if wait > 0:
                time.sleep(wait)
            assert chat_status(first["access_token"]) == 401, "the first access token is still taken after its expiry"
            box = page.get_by_label("Message", exact=True)
            box.fill(LATER)
            box.press("Enter")
            expect(page.locator(".message.assistant .usage")).to_have_count(2, timeout=30_000)
            now = session(page)
            sent = turn_tokens[-1].removeprefix("Bearer ")
            assert sent != first["access_token"], "the turn carried the expired token"
            assert sent == now["access_token"], "the turn did not carry the stored token"
            assert claims(sent)["exp"] > time.time(), "the new token is already expired"
            assert now["refresh_token"] != first["refresh_token"], "the refresh token was not rotated"
            return f"the first token (TTL {TTL} s) is refused by the chat; the turn after it went with a renewed one"

        check("the access token is refreshed before it expires", refreshed)

        def expired_mid_turn() -> str:
            # The provider ends the grant (its refresh token revoked), and the chat refuses the
            # page's token on the next turn, as it would a token revoked or judged expired by a
            # clock ahead of the browser's: the turn's request carries the expired first token.
            stored = session(page)
            revoke(stored["refresh_token"])

            def stale(route) -> None:
                headers = {**route.request.headers, "authorization": f"Bearer {first['access_token']}"}
                route.continue_(headers=headers)

            page.route("**/api/chat", stale)
            page.get_by_role("button", name="New conversation").click()
            box = page.get_by_label("Message", exact=True)
            box.fill(INTERRUPTED)
            box.press("Enter")
            expect(page.get_by_role("heading", name="Session expired")).to_be_visible(timeout=15_000)
            expect(page.get_by_role("button", name="Sign in again")).to_be_focused()
            page.unroute("**/api/chat")
            assert session(page) is None, "the tokens stayed after the session ended"
            page.screenshot(path=str(SHOTS / "oidc-session-expired.png"))
            page.keyboard.press("Enter")
            shown = through_provider(page)
            box = page.get_by_label("Message", exact=True)
            expect(box).to_have_value(INTERRUPTED)
            expect(box).to_be_focused()
            return f"a 401 mid-turn and a refused refresh: the sign-in-again screen; the provider showed {shown}; the question is back in the message box"

        check("a session that ends mid-turn keeps the question", expired_mid_turn)

        def sign_out() -> str:
            page.get_by_label("Message", exact=True).fill("")
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url(lambda url: url.startswith(ISSUER))
            page.get_by_role("button", name="Yes, sign me out").click()
            page.wait_for_url(lambda url: url.startswith(BASE))
            expect(page.locator("#provider-message")).to_have_text("You are signed out.")
            expect(page.get_by_role("button", name="Sign in")).to_be_visible()
            assert session(page) is None, "tokens left after signing out"
            page.screenshot(path=str(SHOTS / "oidc-signed-out.png"))
            # The provider's session ended too: signing in asks for the login form again.
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: url.startswith(ISSUER))
            expect(page.locator("input[name=login]")).to_be_visible()
            return "tokens gone, back at the sign-in screen, and the provider asks for a login again"

        check("sign out ends both sessions", sign_out)

        def refused() -> str:
            # The login form from the previous check: its Cancel refuses the sign-in.
            page.get_by_role("link", name="[ Cancel ]").click()
            page.wait_for_url(lambda url: url.startswith(BASE))
            expect(page.get_by_role("heading", name="Sign-in refused")).to_be_visible()
            expect(page.locator("#provider-problem")).to_contain_text("access_denied")
            expect(page.get_by_role("button", name="Try again")).to_be_focused()
            assert "error=" not in page.url and "state=" not in page.url, page.url
            assert session(page) is None
            page.screenshot(path=str(SHOTS / "oidc-refused.png"))
            return "the provider's Cancel (error=access_denied) gives the refusal screen, address cleaned"

        check("a refused login", refused)

        def forged_answer() -> str:
            tab = context.new_page()
            tab.goto(BASE + "?code=stolen&state=not-this-tabs")
            expect(tab.locator("#provider-problem")).to_contain_text("not for this tab's request")
            assert "code=" not in tab.url, tab.url
            tab.close()
            return "a code with a state this tab never sent is not exchanged"

        check("an answer for another request is refused", forged_answer)

        def unavailable() -> str:
            # /api/page as the chat answers when the provider's discovery failed (its own test
            # is functions/chat/tests/api/sign_in.rs): the page says so and offers no button.
            reason = f"the sign-in provider's discovery document {ISSUER}/.well-known/openid-configuration answered HTTP 503"
            tab = context.new_page()

            def broken(route) -> None:
                info = route.fetch().json()
                info["sign_in"].update(authorization_endpoint=None, token_endpoint=None,
                                       end_session_endpoint=None, unavailable=reason)
                route.fulfill(json=info)

            tab.route("**/api/page", broken)
            tab.goto(BASE)
            expect(tab.get_by_role("heading", name="Sign-in unavailable")).to_be_visible()
            expect(tab.locator("#provider-problem")).to_have_text(reason)
            expect(tab.get_by_role("button", name="Sign in")).to_have_count(0)
            tab.screenshot(path=str(SHOTS / "oidc-unavailable.png"))
            tab.close()
            return "the reason /api/page gives, and no sign-in button"

        check("a provider that cannot be reached", unavailable)

        def clean() -> str:
            assert not outside, f"the page reached other origins: {outside}"
            assert not errors, f"script errors: {errors}"
            return "the page reached only its origin and the provider; no script errors"

        check("nothing external, no errors", clean)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
