"""The OpenAI-compatible controller against a small chat-completions server started here
(it stands in for vLLM / Ollama / a hosted API): body, inline images, key from the named
environment variable, retries, HTTP errors, malformed bodies, timeouts."""
from __future__ import annotations

import base64
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from controller_helpers import make_history, picture
from respec.controller import load_backend, plan_turn
from respec.errors import ControllerError, InputError

KEY = "sk-test-abc123-do-not-log"


def completion(text: str) -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}]}).encode()


class ChatServer:
    """POST /v1/chat/completions answers from a script of (status, body, delay) steps; the last
    step repeats. Every request (headers + JSON body) is recorded."""

    def __init__(self):
        self.script: list[tuple[int, bytes, float]] = [(200, completion("{}"), 0.0)]
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": json.loads(body)})
                step = server.script.pop(0) if len(server.script) > 1 else server.script[0]
                status, payload, delay = step
                if delay:
                    time.sleep(delay)
                if self.path != "/v1/chat/completions":
                    status, payload = 404, b'{"error": "not found"}'
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    s = ChatServer()
    yield s
    s.close()


def remote(server, **options):
    opts = {"base_url": server.url, "backoff": 0.0, "retries": 2, "timeout": 5.0, **options}
    return load_backend("openai", "qwen3-vl-served", **opts)


def test_request_carries_model_greedy_cap_system_and_inline_images(server, monkeypatch):
    monkeypatch.setenv("MY_VLM_KEY", KEY)
    server.script = [(200, completion("hello"), 0.0)]
    vlm = remote(server, api_key_env="MY_VLM_KEY", max_pixels=1200)
    img = Image.fromarray(picture(1, (60, 80)))
    out = vlm.chat(["Image 0:", img, "what changed?"], system="be brief", max_new_tokens=33)
    assert out == "hello"
    req = server.requests[-1]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["model"] == "qwen3-vl-served" and body["temperature"] == 0.0 and body["max_tokens"] == 33
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    content = body["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "Image 0:"} and content[2]["text"] == "what changed?"
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.size[0] * sent.size[1] <= 1200 and sent.size == (40, 30)


def test_key_is_read_from_the_named_variable_and_never_kept(server, monkeypatch):
    monkeypatch.setenv("ROTATING_KEY", KEY)
    server.script = [(200, completion('{"reasoning": {}, "synthesis_instruction": "Paint the sky pink."}'), 0.0)]
    vlm = remote(server, api_key_env="ROTATING_KEY")
    plan = plan_turn(make_history(2), "make the sky pink", vlm, False)
    assert plan.synthesis_instruction == "Paint the sky pink."
    assert KEY not in json.dumps(plan.to_dict()) and KEY not in vlm.name and KEY not in repr(vars(vlm))
    monkeypatch.setenv("ROTATING_KEY", "sk-new-key")
    vlm.chat(["hi"])
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-new-key"


def test_no_key_variable_sends_no_authorization(server):
    remote(server).chat(["hi"])
    assert "Authorization" not in server.requests[-1]["headers"]


def test_named_but_unset_key_variable_is_a_clear_error(server, monkeypatch):
    monkeypatch.delenv("UNSET_KEY_VAR", raising=False)
    with pytest.raises(ControllerError, match="UNSET_KEY_VAR.*not set"):
        remote(server, api_key_env="UNSET_KEY_VAR").chat(["hi"])
    assert server.requests == []


def test_a_key_pasted_as_the_variable_name_is_refused(server):
    with pytest.raises(InputError, match="NAME of an environment variable"):
        remote(server, api_key_env="sk-live-123.456")


def test_server_errors_are_retried_then_succeed(server):
    server.script = [(500, b'{"error": "overloaded"}', 0.0), (503, b"busy", 0.0), (200, completion("ok"), 0.0)]
    vlm = remote(server, retries=2)
    assert vlm.chat(["hi"]) == "ok"
    assert len(server.requests) == 3


def test_persistent_500_raises_after_the_retries(server):
    server.script = [(500, b'{"error": "model crashed"}', 0.0)]
    with pytest.raises(ControllerError, match="after 3 attempt.*HTTP 500.*model crashed"):
        remote(server, retries=2).chat(["hi"])
    assert len(server.requests) == 3


def test_client_errors_fail_at_once(server):
    server.script = [(400, b'{"error": "image input not supported"}', 0.0)]
    with pytest.raises(ControllerError, match="HTTP 400.*image input not supported"):
        remote(server, retries=3).chat(["hi"])
    assert len(server.requests) == 1


def test_wrong_path_reports_the_404(server):
    vlm = load_backend("openai", "m", base_url=server.url.replace("/v1", "/v2"), backoff=0.0)
    with pytest.raises(ControllerError, match="HTTP 404"):
        vlm.chat(["hi"])


def test_body_that_is_not_json_is_a_clear_error(server):
    server.script = [(200, b"<html>proxy login</html>", 0.0)]
    with pytest.raises(ControllerError, match="not JSON.*proxy login"):
        remote(server).chat(["hi"])


def test_json_that_is_not_a_completion_is_a_clear_error(server):
    server.script = [(200, b'{"result": "hello"}', 0.0)]
    with pytest.raises(ControllerError, match="not a chat completion"):
        remote(server).chat(["hi"])


def test_timeouts_are_retried_then_reported(server):
    server.script = [(200, completion("late"), 1.0)]
    with pytest.raises(ControllerError, match="no complete answer within 0.2 s"):
        remote(server, timeout=0.2, retries=1).chat(["hi"])
    assert len(server.requests) == 2


def test_unreachable_server_is_a_clear_error():
    vlm = load_backend("openai", "m", base_url="http://127.0.0.1:9/v1", retries=0, timeout=2.0)
    with pytest.raises(ControllerError, match="cannot connect"):
        vlm.chat(["hi"])


def test_content_parts_are_read(server):
    parts_answer = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}
    server.script = [(200, json.dumps(parts_answer).encode(), 0.0)]
    assert remote(server).chat(["hi"]) == "ab"


def test_json_schema_response_format_is_sent_when_asked(server):
    from respec.controller.schemas import midturn_schema
    vlm = remote(server, response_format="json_schema")
    vlm.chat(["hi"], json_schema=midturn_schema())
    rf = server.requests[-1]["body"]["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == midturn_schema()
    remote(server).chat(["hi"], json_schema=midturn_schema())
    assert "response_format" not in server.requests[-1]["body"]


def test_restoration_plan_from_a_remote_controller(server):
    answer = {"reasoning": {"occluder": "box", "uncovered_region": "chest", "target_evidence": "the patch",
                            "add_into_region_turn": 1, "per_turn_classification": {"T1": "ADD-INTO-REGION",
                                                                                   "T2": "UNRELATED"},
                            "notes": ""},
              "identity_anchor_id": 2, "restoration_source_id": 0, "restoration_region": "chest",
              "image_ids": [0, 2], "synthesis_instruction": "Remove the box, revealing the patch from the first image."}
    server.script = [(200, completion("```json\n" + json.dumps(answer) + "\n```"), 0.0)]
    plan = plan_turn(make_history(3), "remove the box", remote(server), True)
    assert plan.image_ids == (0, 2) and plan.preservation_target == "the patch" and plan.fallbacks == ()
    content = server.requests[-1]["body"]["messages"][1]["content"]
    assert [c["text"] for c in content if c["type"] == "text"][:3] == ["Image 0:", "Image 1:", "Image 2:"]
    assert sum(c["type"] == "image_url" for c in content) == 3


def test_bad_base_url_is_refused():
    with pytest.raises(InputError, match="http://"):
        load_backend("openai", "m", base_url="localhost:8000/v1")


def test_a_pinned_base_url_cannot_be_redirected_by_a_workflow(server, monkeypatch):
    monkeypatch.setenv("RESPEC_OPENAI_BASE_URL", server.url)
    server.script = [(200, completion("pinned"), 0.0)]
    assert remote(server, base_url="").chat(["hi"]) == "pinned"            # empty: the pinned URL
    assert remote(server, base_url=server.url + "/").chat(["hi"]) == "pinned"
    with pytest.raises(InputError, match="RESPEC_OPENAI_BASE_URL") as info:
        remote(server, base_url="http://attacker.example:9999/v1")
    assert server.url not in str(info.value)  # the owner's URL is not revealed
