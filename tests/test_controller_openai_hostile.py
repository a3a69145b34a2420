"""The OpenAI-compatible controller against a hostile endpoint (tests/hostile_server.py, loopback
only): every case ends within its deadline with a clear error, and the API key is in no message
and never leaves for another address. scripts/dev/hostile_openai.py runs the same cases at full size."""
from __future__ import annotations

import threading
import time

import pytest

from hostile_server import HostileServer
from respec import comfy
from respec.controller import load_backend
from respec.errors import ControllerError, InputError, ReSpecError

KEY = "sk-live-7f3a9c1d5e8b2a4f6c0d9e1b3a5c7f9e"


@pytest.fixture()
def key(monkeypatch):
    monkeypatch.setenv("HOSTILE_TEST_KEY", KEY)
    return "HOSTILE_TEST_KEY"


def backend(srv, key_env, **options):
    opts = {"base_url": srv.url, "api_key_env": key_env, "retries": 0, "backoff": 0.0, "timeout": 2.0, **options}
    return load_backend("openai", "m", **opts)


def failure(fn) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(ReSpecError) as err:
        fn()
    return str(err.value), time.monotonic() - start


@pytest.mark.slow
def test_a_slow_loris_server_is_cut_off_at_the_attempt_deadline(key):
    with HostileServer("slowloris", drip_s=0.2) as srv:
        msg, took = failure(lambda: backend(srv, key, timeout=1.5, retries=1).chat(["hi"]))
    assert took < 1.5 * 2 + 1.0      # two attempts of 1.5 s, not one byte a second forever
    assert "no complete answer within 1.5 s" in msg and KEY not in msg


@pytest.mark.slow
def test_cancel_stops_a_request_in_flight_within_a_second(key):
    with HostileServer("slowloris", drip_s=0.2) as srv:
        vlm = backend(srv, key, timeout=30.0)
        threading.Timer(0.5, comfy.request_interrupt).start()
        start = time.monotonic()
        with pytest.raises(comfy.Interrupted):
            vlm.chat(["hi"])
        assert time.monotonic() - start < 0.5 + 1.0


@pytest.mark.parametrize("send_length", [True, False])
def test_an_oversized_answer_is_refused_at_the_cap(key, send_length):
    with HostileServer("huge", size=3 << 20, send_length=send_length) as srv:
        msg, _ = failure(lambda: backend(srv, key, max_response_bytes=1 << 20).chat(["hi"]))
    assert "more than 1 MiB" in msg and "max_response_bytes" in msg and KEY not in msg


def test_a_redirect_to_another_port_is_refused_and_the_key_stays_home(key):
    with HostileServer("ok", answer="stolen") as other, HostileServer("redirect", target=other) as srv:
        msg, _ = failure(lambda: backend(srv, key).chat(["hi"]))
        assert other.requests == []            # nothing was sent there, so no key either
    assert "redirect" in msg and f"127.0.0.1:{other.port}" in msg and KEY not in msg


def test_a_server_that_echoes_headers_cannot_put_the_key_into_the_error(key):
    with HostileServer("echo500") as srv:
        msg, _ = failure(lambda: backend(srv, key, retries=1).chat(["hi"]))
        assert srv.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"   # it was sent, and echoed
    assert "HTTP 500" in msg and "proxy error" in msg
    assert KEY not in msg and KEY[:12] not in msg and "[redacted]" in msg


@pytest.mark.slow
def test_retry_after_is_honoured_and_the_error_says_rate_limited(key):
    with HostileServer("ratelimit", retry_after="1", limit_n=1, answer="fine") as srv:
        start = time.monotonic()
        assert backend(srv, key, retries=1).chat(["hi"]) == "fine"
        assert time.monotonic() - start >= 0.9 and len(srv.requests) == 2
    with HostileServer("ratelimit", retry_after="1", limit_n=5) as srv:
        msg, _ = failure(lambda: backend(srv, key, retries=1).chat(["hi"]))
    assert "rate limit" in msg and "Retry-After" in msg and "is the server running" not in msg


def test_a_retry_after_beyond_the_bound_fails_at_once(key):
    with HostileServer("ratelimit", retry_after="100000", limit_n=5) as srv:
        msg, took = failure(lambda: backend(srv, key, retries=3).chat(["hi"]))
        assert len(srv.requests) == 1
    assert took < 2.0 and "rate limit" in msg and "100000 s" in msg


def test_missing_or_null_content_is_an_error_naming_the_field(key):
    for answer in (b'{"choices": [{"message": {"content": null}}]}', b'{"choices": [{"message": {"role": "x"}}]}'):
        class Null(HostileServer):
            def _serve(self, sock, body=answer):
                self._read_request(sock)
                self._send(sock, "200 OK", body)
        with Null() as srv:
            msg, _ = failure(lambda: backend(srv, key).chat(["hi"]))
        assert "choices[0].message.content" in msg


@pytest.mark.parametrize("pasted", ["gsk_2Jd8fK3mQp9xVb7nLr4TzW1yHc6sAe5uGo0i", "sk-proj-abcdEFGH1234ijkl5678",
                                    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"])
def test_a_key_pasted_where_the_variable_name_belongs_is_refused_without_echoing_it(pasted):
    with pytest.raises(InputError, match="looks like an API key") as err:
        load_backend("openai", "m", base_url="http://127.0.0.1:9/v1", api_key_env=pasted)
    assert pasted not in str(err.value) and pasted[:8] not in str(err.value)


def test_ordinary_variable_names_are_accepted(monkeypatch):
    for name in ("OPENAI_API_KEY", "GROQ_API_KEY", "my_vlm_key_2"):
        monkeypatch.delenv(name, raising=False)
        with pytest.raises(ControllerError, match=f"{name}.*not set"):
            load_backend("openai", "m", base_url="http://127.0.0.1:9/v1", api_key_env=name).chat(["hi"])
