"""The OpenAI-compatible controller against a hostile local server (127.0.0.1 only).

Cases: slow-loris (one byte every 0.5 s), a 100 MB answer (with and without Content-Length), a
redirect to another port, a 500 that echoes the request headers (so the key), 429 with
Retry-After (honoured, then beyond the bound). Each case must end within its deadline with a
clear error, the key must appear in no message, and nothing may reach the redirect's target.
Prints a markdown table; exits 1 if any case breaks a rule.

    python scripts/dev/hostile_openai.py
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RESPEC_PROGRESS", "0")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))                 # script only: run from a checkout
sys.path.insert(0, str(ROOT / "tests"))       # the hostile server lives with the tests

from hostile_server import HostileServer  # noqa: E402

from respec.controller import load_backend  # noqa: E402
from respec.errors import ReSpecError  # noqa: E402

KEY = "sk-live-HOSTILE-7f3a9c1d5e8b2a4f6c0d9e1b3a5c7f9e"
TIMEOUT = 5.0


def _backend(srv, **options):
    opts = {"base_url": srv.url, "api_key_env": "RESPEC_HOSTILE_KEY", "timeout": TIMEOUT, "retries": 1,
            "backoff": 0.0, **options}
    return load_backend("openai", "m", **opts)


def _case(name: str, srv, deadline: float, expect: str, **options) -> dict:
    start = time.monotonic()
    try:
        answer = _backend(srv, **options).chat(["hi"])
        msg, ok_error = f"(answered: {answer[:60]!r})", False
    except ReSpecError as e:
        msg, ok_error = str(e), expect.lower() in str(e).lower()
    took = time.monotonic() - start
    return {"case": name, "seconds": took, "deadline": deadline, "in_time": took <= deadline,
            "clear_error": ok_error, "key_hidden": KEY not in msg and KEY[:14] not in msg, "message": msg}


def run() -> list[dict]:
    """Run every case; one dict per case."""
    os.environ["RESPEC_HOSTILE_KEY"] = KEY
    rows = []
    attempts = 2   # retries=1
    with HostileServer("slowloris", drip_s=0.5) as srv:
        rows.append(_case("slow-loris (1 byte / 0.5 s)", srv, attempts * TIMEOUT + 1.5, "no complete answer within"))
    for send_length in (True, False):
        with HostileServer("huge", size=100 << 20, send_length=send_length) as srv:
            rows.append(_case(f"100 MB answer ({'with' if send_length else 'no'} Content-Length)", srv,
                              attempts * TIMEOUT + 1.5, "more than 8 MiB"))
    with HostileServer("ok", answer="stolen") as other, HostileServer("redirect", target=other) as srv:
        row = _case("302 redirect to another port", srv, TIMEOUT + 1.5, "never follows redirects")
        row["clear_error"] = row["clear_error"] and not other.requests
        rows.append(row)
    with HostileServer("echo500") as srv:
        rows.append(_case("500 echoing the request headers", srv, attempts * TIMEOUT + 1.5, "HTTP 500"))
    with HostileServer("ratelimit", retry_after="2", limit_n=1, answer="after the wait") as srv:
        start = time.monotonic()
        answer = _backend(srv).chat(["hi"])
        took = time.monotonic() - start
        rows.append({"case": "429 Retry-After: 2, then 200", "seconds": took, "deadline": TIMEOUT + 2 + 1.5,
                     "in_time": 2.0 <= took <= TIMEOUT + 3.5, "clear_error": answer == "after the wait",
                     "key_hidden": True, "message": f"(answered after waiting: {answer!r})"})
    with HostileServer("ratelimit", retry_after="2", limit_n=9) as srv:
        rows.append(_case("429 Retry-After: 2, always", srv, attempts * TIMEOUT + 2 + 1.5, "rate limit"))
    with HostileServer("ratelimit", retry_after="3600", limit_n=9) as srv:
        rows.append(_case("429 Retry-After: 3600", srv, TIMEOUT + 1.5, "asks to wait 3600 s"))
    return rows


def main() -> int:
    rows = run()
    print(f"timeout {TIMEOUT:g} s per attempt, retries 1, max_response_bytes 8 MiB\n")
    print("| case | seconds | deadline | in time | clear error | key hidden | message (first 150 chars) |")
    print("|---|---:|---:|---|---|---|---|")
    for r in rows:
        msg = r["message"].replace("|", "\\|")[:150]
        print(f"| {r['case']} | {r['seconds']:.2f} | {r['deadline']:.1f} | {'yes' if r['in_time'] else 'NO'} | "
              f"{'yes' if r['clear_error'] else 'NO'} | {'yes' if r['key_hidden'] else 'NO'} | {msg} |")
    bad = [r for r in rows if not (r["in_time"] and r["clear_error"] and r["key_hidden"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
