"""One `ok:`/`FAIL:` line per check, for tests/page/run to count; shared by the page's test
scripts (page_test.py, approval_test.py, sign_in_test.py), each of which exits 1 if any
check failed."""

import sys
import traceback

failures = 0


def check(name: str, fn) -> None:
    """Runs `fn`; prints `ok: name` (with what it returned, if anything) or `FAIL: name: why`
    and the traceback on stderr. A failure never stops the other checks."""
    global failures
    try:
        detail = fn()
        print(f"ok: {name}" + (f" ({detail})" if detail else ""), flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported as one line
        failures += 1
        print(f"FAIL: {name}: {type(e).__name__}: {str(e)[:600]}", flush=True)
        traceback.print_exc(file=sys.stderr)


def exit_status() -> int:
    return 1 if failures else 0
