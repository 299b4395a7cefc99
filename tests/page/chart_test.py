#!/usr/bin/env python3
"""Tables, CSV and charts in a real browser (tests/page/run), against a chat whose scripted model
(tests/page/chart_script.json, with a 10 MB show_chart call added by the runner) answers, in
order: one turn calling feedback_stats by category and by month and list_lads (120 rows), then
show_chart for a bar chart of the first and a line chart of the second; one turn calling
feedback_stats by sentiment, then show_chart four ways the chat must refuse (a url data source,
a column the rows lack, an image mark, a 10 MB spec); and one turn whose streamed body this test
rewrites (Playwright's route) to carry hostile charts and rows only the page itself can refuse.

Checks what a user sees: the SVG has one mark per row and axis titles from the fields, the
summary is the caption and the SVG's label, PNG and SVG files download, a table sorts by a
header click (and the keyboard) and pages past 50 rows, its CSV's bytes are the rows the server
sent, refused charts say why and draw nothing, a reload draws the same charts, the dark scheme
redraws them in the page's dark colours; and throughout, no CSP violation, no console error,
no request to another origin, and the chart library fetched only when a chart is drawn.

Environment: PARLEY_CHAT_URL, PARLEY_TOKEN (a bearer token for it), CHROMIUM, SCREENSHOTS.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

import checks
from checks import check

BASE = os.environ["PARLEY_CHAT_URL"].rstrip("/") + "/"
TOKEN = os.environ["PARLEY_TOKEN"]
SHOTS = Path(os.environ["SCREENSHOTS"])

# The scripted model's call ids (the stub numbers calls call_1, call_2, ... across its script).
BAR_ROWS, LINE_ROWS, LADS = "call_1", "call_2", "call_3"
BAR, LINE = "call_4", "call_5"
# The refused show_chart calls, each with a word the chat's refusal must name.
HOSTILE = [("call_7", "spec.data"), ("call_8", "no_such_column"), ("call_9", "image"), ("call_10", "CHART_MAX_SPEC_BYTES")]

# The page's colours (app.css): an axis title is drawn in --fg.
LIGHT_FG, DARK_FG = "#1d1d1f", "#e8e8ea"

# Rows a server could send, each cell something a CSV writer gets wrong, and the exact file the
# page must write for them (RFC 4180, UTF-8 with a BOM, formulas neutralised).
HOSTILE_ROWS = [
    {"name": "=HYPERLINK(\"https://example.org\",\"x\")", "n": 1, "note": "plain"},
    {"name": "+1+1", "n": -2.5, "note": "a, b"},
    {"name": "-2", "n": 0, "note": "line\nbreak"},
    {"name": "@SUM(A1)", "n": None, "note": "say \"hi\""},
    {"name": "\tTAB", "n": 1e-7, "note": "\r\nCRLF"},
    {"name": "Zürich ✓", "n": 12345678901, "note": {"a": [1, "b"]}},
]
HOSTILE_CSV = (
    "\ufeffname,n,note\r\n"
    "\"'=HYPERLINK(\"\"https://example.org\"\",\"\"x\"\")\",1,plain\r\n"
    "'+1+1,-2.5,\"a, b\"\r\n"
    "'-2,0,\"line\nbreak\"\r\n"
    "'@SUM(A1),,\"say \"\"hi\"\"\"\r\n"
    "'\tTAB,1e-7,\"'\r\nCRLF\"\r\n"
    "Zürich ✓,12345678901,\"{\"\"a\"\":[1,\"\"b\"\"]}\"\r\n"
).encode()

# A chart the page must draw, with no description (the page writes the summary) and a tooltip
# expression (vega reads expressions with the interpreter: the policy allows no eval).
FINE = {
    "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
    "data": {"values": [{"name": "a", "n": 3}, {"name": "b", "n": 1}, {"name": "c", "n": 2}]},
    "transform": [{"calculate": "datum.n * 2", "as": "double"}],
    "mark": {"type": "bar", "tooltip": True},
    "encoding": {"x": {"field": "name", "type": "nominal", "title": "name"},
                 "y": {"field": "n", "type": "quantitative", "title": "n"}},
}


def api(path: str) -> dict:
    request = urllib.request.Request(BASE + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def csv_bytes(rows: list[dict]) -> bytes:
    """The CSV the page must write for `rows` (text cells without formula starts or commas in
    the demo's rows, so only quoting and numbers matter here)."""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]

    def field(v) -> str:
        if v is None:
            return ""
        text = json.dumps(v) if isinstance(v, (dict, list)) else ("true" if v is True else "false" if v is False else str(v))
        if isinstance(v, str) and text[:1] in ("=", "+", "-", "@", "\t", "\r"):
            text = "'" + text
        return '"' + text.replace('"', '""') + '"' if any(ch in text for ch in ',"\r\n') else text

    lines = [",".join(field(c) for c in columns)] + [",".join(field(r.get(c)) for c in columns) for r in rows]
    return ("\ufeff" + "".join(line + "\r\n" for line in lines)).encode()


def main() -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ["CHROMIUM"], args=["--no-sandbox", "--disable-dev-shm-usage"])
        outside: list[str] = []
        context = browser.new_context(viewport={"width": 1280, "height": 1400}, accept_downloads=True)
        context.route(
            "**/*",
            lambda route: (route.continue_() if route.request.url.startswith(BASE) or route.request.url.startswith("data:")
                           else (outside.append(route.request.url), route.abort())),
        )
        # Every violation of the page's Content-Security-Policy, as the browser reports it.
        context.add_init_script(
            "window.__csp = []; document.addEventListener('securitypolicyviolation',"
            " (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));"
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        library: list[str] = []
        page.on("request", lambda r: library.append(r.url) if r.url.endswith("/charts-lib.js") else None)
        csp: list[str] = []

        def ask(question: str) -> None:
            box = page.get_by_label("Message", exact=True)
            box.fill(question)
            box.press("Enter")
            expect(page.locator(".message.user .text").last).to_have_text(question)

        def last_reply():
            return page.locator(".message.assistant").last

        def sign_in() -> str:
            page.goto(BASE)
            page.get_by_label("Access token").fill(TOKEN)
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_label("Message", exact=True)).to_be_visible()
            assert library == [], f"the chart library was fetched before any chart: {library}"
            return "signed in; the chart library not fetched yet"

        check("sign in", sign_in)

        stored: dict = {}

        def rows_of(call_id: str) -> list[dict]:
            return next(t for t in stored["traces"] if t["call_id"] == call_id)["output"]["rows"]

        def first_turn() -> str:
            ask("Chart feedback by category and by month")
            expect(last_reply().locator(".usage")).to_be_visible(timeout=30_000)
            conversation = page.evaluate("location.hash.slice(1)")
            stored.update(api(f"api/conversations/{conversation}/messages")["messages"][-1])
            stored["id"] = conversation
            calls = [t["name"] for t in stored["traces"]]
            return f"the model called {', '.join(calls)}"

        check("a turn whose model asks for two charts", first_turn)

        def open_details(details) -> None:
            if not details.evaluate("d => d.open"):
                details.locator("summary").click()

        def charts_drawn() -> str:
            reply = last_reply()
            expect(reply.locator("figure.chart:not([aria-busy])")).to_have_count(2, timeout=30_000)
            bar_rows, line_rows = rows_of(BAR_ROWS), rows_of(LINE_ROWS)
            bar = reply.locator(f"figure[data-chart={BAR}]")
            line = reply.locator(f"figure[data-chart={LINE}]")
            # Each chart right after its show_chart call.
            assert bar.evaluate("f => f.previousElementSibling.matches('details.tool[data-tool=show_chart]')")
            expect(bar.locator(".mark-rect path")).to_have_count(len(bar_rows))
            expect(line.locator(".mark-symbol path")).to_have_count(len(line_rows))
            expect(line.locator(".mark-line path")).to_have_count(1)
            for figure in (bar, line):
                titles = figure.locator(".role-axis-title text").all_text_contents()
                assert sorted(titles) == ["count", "key"], titles
                caption = figure.locator("figcaption").text_content()
                assert caption and caption.strip(), "no summary"
                expect(figure.locator("svg").first).to_have_attribute("aria-label", caption)
                fill = figure.locator(".role-axis-title text").first.get_attribute("fill")
                assert fill == LIGHT_FG, fill
            charts = {c["id"]: c for c in stored.get("charts", [])}
            assert set(charts) == {BAR, LINE}, charts
            assert charts[BAR]["call_id"] == BAR_ROWS and charts[LINE]["call_id"] == LINE_ROWS
            if isinstance(charts[BAR]["spec"].get("description"), str):
                expect(bar.locator("figcaption")).to_have_text(charts[BAR]["spec"]["description"])
            assert len(library) == 1, library
            page.screenshot(path=str(SHOTS / "charts-light.png"), full_page=True)
            return f"bar: {len(bar_rows)} bars, line: {len(line_rows)} points, axis titles key and count, captions as labels"

        check("a bar chart and a line chart drawn from a tool's rows", charts_drawn)

        def image_downloads() -> str:
            bar = last_reply().locator(f"figure[data-chart={BAR}]")
            sizes = []
            for kind, magic in (("PNG", b"\x89PNG\r\n\x1a\n"), ("SVG", b"<svg")):
                with page.expect_download() as download:
                    bar.get_by_role("button", name=f"Download {kind}").click()
                path = download.value.path()
                data = Path(path).read_bytes()
                assert data.startswith(magic), data[:40]
                assert download.value.suggested_filename == f"Feedback-by-category.{kind.lower()}", download.value.suggested_filename
                if kind == "SVG":
                    text = data.decode()
                    assert text.count("<path") >= len(rows_of(BAR_ROWS)) and ">count<" in text, text[:300]
                sizes.append(f"{kind} {len(data)} bytes")
            return ", ".join(sizes)

        check("the chart downloads as PNG and SVG", image_downloads)

        def table_sorted_and_paged() -> str:
            tool = last_reply().locator("details.tool[data-tool=feedback_stats]").first
            open_details(tool)
            table = tool.locator("table.rows")
            rows = rows_of(BAR_ROWS)
            columns = table.locator("thead th").all_text_contents()

            def cells(name: str) -> list[str]:
                return table.locator(f"tbody td:nth-child({columns.index(name) + 1})").all_text_contents()

            counts = lambda: [int(t) for t in cells("count")]  # noqa: E731
            assert counts() == [r["count"] for r in rows], "not in the server's order at first"
            count_header = table.locator("th", has=page.get_by_role("button", name="count", exact=True))
            count_header.get_by_role("button").click()
            expect(count_header).to_have_attribute("aria-sort", "ascending")
            assert counts() == sorted(r["count"] for r in rows), counts()
            count_header.get_by_role("button").click()
            expect(count_header).to_have_attribute("aria-sort", "descending")
            assert counts() == sorted((r["count"] for r in rows), reverse=True), counts()
            align = table.locator(f"tbody td:nth-child({columns.index('count') + 1})").first.evaluate("td => getComputedStyle(td).textAlign")
            assert align == "right", align
            # The keyboard: Tab to the key header's button, Enter sorts by it.
            key_header = table.locator("th", has=page.get_by_role("button", name="key", exact=True))
            key_header.get_by_role("button").focus()
            page.keyboard.press("Enter")
            expect(key_header).to_have_attribute("aria-sort", "ascending")
            expect(count_header).not_to_have_attribute("aria-sort", "descending")
            keys = cells("key")
            assert keys == sorted(keys), keys

            lads = last_reply().locator("details.tool[data-tool=list_lads]")
            open_details(lads)
            lads_rows = rows_of(LADS)
            assert len(lads_rows) == 120, len(lads_rows)
            expect(lads.locator(".rows-note")).to_have_text(
                "120 rows. Cut at the tool's row limit (120): there are more rows than shown.")
            expect(lads.locator("tbody tr")).to_have_count(50)
            where = lads.locator(".rows-where")
            expect(where).to_have_text("Rows 1–50 of 120")
            expect(lads.get_by_role("button", name="Previous")).to_be_disabled()
            lads.get_by_role("button", name="Next").click()
            expect(where).to_have_text("Rows 51–100 of 120")
            lads_columns = lads.locator("thead th").all_text_contents()
            code, name_at = lads_columns.index("code") + 1, lads_columns.index("name") + 1
            expect(lads.locator(f"tbody tr:first-child td:nth-child({code})")).to_have_text(lads_rows[50]["code"])
            lads.get_by_role("button", name="Next").click()
            expect(where).to_have_text("Rows 101–120 of 120")
            expect(lads.locator("tbody tr")).to_have_count(20)
            expect(lads.get_by_role("button", name="Next")).to_be_disabled()
            # Sorting goes back to the first page, by name descending on a second click.
            name = lads.get_by_role("button", name="name", exact=True)
            name.click()
            name.click()
            expect(where).to_have_text("Rows 1–50 of 120")
            names = sorted((r["name"] for r in lads_rows), key=str.casefold, reverse=True)
            expect(lads.locator(f"tbody tr:first-child td:nth-child({name_at})")).to_have_text(names[0])
            lads.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "table-sorted.png"))
            return "numbers sort numerically both ways, text by the keyboard; 120 rows in pages of 50; the cut stated"

        check("a table sorted by a header click and paged past 50 rows", table_sorted_and_paged)

        def csv_download() -> str:
            sizes = []
            for tool, call in (("list_lads", LADS), ("feedback_stats", BAR_ROWS)):
                details = last_reply().locator(f"details.tool[data-tool={tool}]").first
                open_details(details)
                with page.expect_download() as download:
                    details.get_by_role("button", name="Download CSV").click()
                assert download.value.suggested_filename == f"{tool}.csv", download.value.suggested_filename
                data = Path(download.value.path()).read_bytes()
                want = csv_bytes(rows_of(call))
                assert data == want, f"{tool}: got {data[:300]!r}\nwant {want[:300]!r}"
                sizes.append(f"{tool} {len(data)} bytes")
            return "the server's rows in its order (not the sorted view), byte for byte: " + ", ".join(sizes)

        check("a table downloaded as CSV", csv_download)

        def server_refuses() -> str:
            ask("Draw these charts")
            reply = last_reply()
            expect(reply.locator(".usage")).to_be_visible(timeout=60_000)
            refused = []
            for n, (_, names) in enumerate(HOSTILE):
                tool = reply.locator("details.tool[data-tool=show_chart]").nth(n)
                expect(tool).to_have_class("tool failed")
                said = (tool.locator(".tool-output").text_content() or "").strip()
                assert names in said, f"{said[:300]!r} does not name {names}"
                refused.append(said[:70])
            expect(reply.locator("figure.chart")).to_have_count(0)
            expect(reply.locator(".mark-rect, svg")).to_have_count(0)
            return " | ".join(refused)

        check("the chat refuses hostile show_chart calls (url data, unknown field, image mark, 10 MB)", server_refuses)

        def page_refuses() -> str:
            hostile = [
                ("inj_url", {"mark": "bar", "data": {"url": "https://example.org/x.csv"},
                             "encoding": {"x": {"field": "name"}, "y": {"field": "n"}}}, "chart not shown: its data are not inline values"),
                ("inj_href", {"mark": "bar", "data": {"values": [{"name": "a", "n": 1}]},
                              "encoding": {"x": {"field": "name"}, "y": {"field": "n"}, "href": {"field": "name"}}},
                 "chart not shown: it has a `href`"),
                ("inj_image", {"mark": {"type": "image"}, "data": {"values": [{"name": "a", "n": 1}]},
                               "encoding": {"x": {"field": "name"}, "y": {"field": "n"}}},
                 'chart not shown: its mark "image" is not one of bar, line, area, point, arc'),
                ("inj_address", {"mark": "point", "data": {"values": [{"name": "https://example.org/p.png", "n": 1}]},
                                 "encoding": {"x": {"field": "name"}, "y": {"field": "n"}}},
                 "chart not shown: it names an address (https://example.org/p.png)"),
                ("inj_big", {"mark": "bar", "data": {"values": [{"name": "x" * 1000, "n": i} for i in range(2500)]}},
                 "chart not shown: the chart is 2,"),
            ]

            def rewrite(route) -> None:
                response = route.fetch()
                events = response.text().split("\n\n")
                finish = next(i for i, e in enumerate(events) if '"type":"finish"' in e)
                added = [
                    {"type": "tool-input-available", "toolCallId": "inj_rows", "toolName": "run_sql", "input": {"sql": "select"}},
                    {"type": "tool-output-available", "toolCallId": "inj_rows",
                     "output": {"rows": HOSTILE_ROWS, "row_count": len(HOSTILE_ROWS), "truncated": False}},
                ] + [{"type": "data-chart", "id": i, "data": {"call_id": "inj_rows", "spec": s}} for i, s, _ in hostile] + [
                    {"type": "data-chart", "id": "inj_fine", "data": {"call_id": "inj_rows", "spec": FINE}}]
                events[finish:finish] = ["data: " + json.dumps(part) for part in added]
                headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
                route.fulfill(status=response.status, headers=headers, body="\n\n".join(events))

            page.route("**/api/chat", rewrite)
            try:
                ask("Show the table again")
                reply = last_reply()
                expect(reply.locator(".usage")).to_be_visible(timeout=30_000)
            finally:
                page.unroute("**/api/chat")
            refused = reply.locator(".chart-refused")
            expect(refused).to_have_count(len(hostile))
            for n, (_, _, says) in enumerate(hostile):
                text = refused.nth(n).text_content() or ""
                assert text.startswith(says), f"{text!r} does not start with {says!r}"
            # A spec the guard lets through is drawn with no request and no eval: one bar a row.
            fine = reply.locator("figure[data-chart=inj_fine]:not([aria-busy])")
            expect(fine.locator(".mark-rect path")).to_have_count(len(FINE["data"]["values"]), timeout=30_000)
            expect(fine.locator("figcaption")).to_have_text("A bar chart of n by name (3 rows).")
            expect(reply.locator("figure.chart")).to_have_count(1)
            details = reply.locator("details.tool[data-tool=run_sql]")
            details.locator("summary").click()
            with page.expect_download() as download:
                details.get_by_role("button", name="Download CSV").click()
            data = Path(download.value.path()).read_bytes()
            assert data == HOSTILE_CSV, f"got {data!r}\nwant {HOSTILE_CSV!r}"
            assert outside == [], f"requests to other origins: {outside}"
            page.screenshot(path=str(SHOTS / "charts-refused.png"), full_page=True)
            return f"{len(hostile)} injected charts refused, saying why; formulas, quotes, breaks and JSON in the CSV as RFC 4180 wants"

        check("the page refuses hostile charts the stream carries; CSV of hostile cells", page_refuses)

        def reloaded() -> str:
            csp.extend(page.evaluate("window.__csp"))
            page.goto(BASE + "#" + stored["id"])
            first = page.locator(".message.assistant").first
            expect(first.locator("figure.chart:not([aria-busy])")).to_have_count(2, timeout=30_000)
            expect(first.locator(f"figure[data-chart={BAR}] .mark-rect path")).to_have_count(len(rows_of(BAR_ROWS)))
            expect(first.locator(f"figure[data-chart={LINE}] .mark-symbol path")).to_have_count(len(rows_of(LINE_ROWS)))
            page.screenshot(path=str(SHOTS / "charts-reloaded.png"), full_page=True)
            return "the stored conversation draws the same two charts"

        check("a reloaded conversation shows the same charts", reloaded)

        def dark() -> str:
            page.emulate_media(color_scheme="dark")
            figure = page.locator(f"figure[data-chart={BAR}]").first
            expect(figure).to_have_attribute("data-scheme", "dark")
            fill = figure.locator(".role-axis-title text").first.get_attribute("fill")
            assert fill == DARK_FG, fill
            expect(figure.locator(".mark-rect path")).to_have_count(len(rows_of(BAR_ROWS)))
            figure.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "charts-dark.png"))
            page.emulate_media(color_scheme="light")
            return "redrawn in the page's dark colours"

        check("charts follow the dark colour scheme", dark)

        def clean() -> str:
            csp.extend(page.evaluate("window.__csp"))
            assert csp == [], f"CSP violations: {csp}"
            assert errors == [], f"console errors: {errors}"
            assert outside == [], f"requests to other origins: {outside}"
            return "no CSP violation, console error or request to another origin"

        check("nothing broke the page's policy", clean)
        browser.close()


if __name__ == "__main__":
    main()
    sys.exit(checks.exit_status())
