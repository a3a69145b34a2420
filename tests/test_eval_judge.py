"""The S_IF judge (figure 11's 0–3 scale): prompt, parsing, failures recorded, through real backends
(an OpenAI-compatible endpoint served here, and the tiny Qwen3-VL with forced JSON)."""
from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from controller_helpers import tiny_qwen_dir  # noqa: F401  (session fixture)
from respec.controller import load_backend
from respec.errors import ControllerError, InputError
from respec.eval.judge import JUDGE_SCHEMA, judge_instruction, parse_judgement


def image(seed, h=48, w=64):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


class ChatEndpoint:
    """A chat-completions endpoint answering with the queued texts (the last one repeats)."""

    def __init__(self):
        self.answers = ["{}"]
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                text = outer.answers.pop(0) if len(outer.answers) > 1 else outer.answers[0]
                data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def endpoint():
    e = ChatEndpoint()
    yield e
    e.close()


def judge_via(endpoint, reply, **options):
    endpoint.answers = [reply]
    backend = load_backend("openai", "gpt-4o-mini", base_url=endpoint.url, retries=0, timeout=5.0,
                           response_format="json_schema")
    return judge_instruction(backend, image(1), image(2), "add a red hat to the dog", **options)


# ----------------------------------------------------------------------------- parsing

def test_a_plain_json_reply_gives_s_if_as_score_over_three(endpoint):
    res = judge_via(endpoint, '{"score": 2, "reason": "hat added but blue"}')
    assert res["ok"] and res["score"] == 2 and res["S_IF"] == pytest.approx(2 / 3) and res["S_IF_norm"] == res["S_IF"]
    assert res["reason"] == "hat added but blue" and res["parse"] == "json" and res["failure"] is None


def test_a_fenced_json_reply_is_read(endpoint):
    res = judge_via(endpoint, 'Here you go:\n```json\n{"score": 3, "reason": "done"}\n```\nThanks')
    assert res["ok"] and res["score"] == 3 and res["S_IF"] == 1.0 and res["parse"] == "fenced_json"


def test_a_garbage_reply_is_a_recorded_failure_not_a_crash(endpoint):
    res = judge_via(endpoint, "I cannot evaluate images, sorry.")
    assert not res["ok"] and res["score"] is None and math.isnan(res["S_IF"]) and res["S_IF_norm"] is None
    assert "no JSON object" in res["failure"] and res["raw"] == "I cannot evaluate images, sorry."


def test_a_score_outside_zero_to_three_is_a_recorded_failure(endpoint):
    res = judge_via(endpoint, '{"score": 7, "reason": "great"}')
    assert not res["ok"] and "not an integer 0–3" in res["failure"]


def test_parsing_accepts_the_usual_variants_of_a_score():
    assert parse_judgement('{"score": "3", "reason": "x"}')["score"] == 3
    assert parse_judgement('{"score": 1.0}')["score"] == 1
    assert parse_judgement('{"rating": 0, "reason": "absent"}')["score"] == 0
    assert parse_judgement('Reasoning first {"note": 1} then {"score": 2}')["score"] == 2
    assert parse_judgement('score: 2 (mostly correct)') == {"score": 2, "reason": "", "parse": "regex", "failure": None}
    assert parse_judgement('{"score": true}')["score"] is None
    assert parse_judgement("")["failure"] == "the judge returned an empty reply"


# ----------------------------------------------------------------------------- the request

def test_the_judge_sends_before_after_instruction_and_the_0_3_scale(endpoint):
    judge_via(endpoint, '{"score": 1, "reason": "weak"}')
    body = endpoint.bodies[-1]
    system, user = body["messages"]
    assert system["role"] == "system" and "instruction" in system["content"]
    items = user["content"]
    kinds = [c["type"] for c in items]
    assert kinds.count("image_url") == 2
    texts = [c["text"] for c in items if c["type"] == "text"]
    intro = texts[0]
    assert all(f"{n} -" in intro for n in range(4)) and "not a grade of image" in intro
    before_i, after_i = kinds.index("image_url"), len(kinds) - 1 - kinds[::-1].index("image_url")
    assert "before" in items[before_i - 1]["text"].lower() and "grade" in items[after_i - 1]["text"].lower()
    assert any("add a red hat to the dog" in t for t in texts)
    assert body["response_format"]["json_schema"]["schema"] == JUDGE_SCHEMA


def test_an_empty_instruction_is_refused(endpoint):
    with pytest.raises(InputError, match="instruction"):
        judge_instruction(load_backend("openai", "m", base_url=endpoint.url), image(1), image(2), "  ")
    assert endpoint.bodies == []


def test_a_backend_failure_is_raised_not_scored():
    backend = load_backend("openai", "gpt-4o-mini", base_url="http://127.0.0.1:9/v1", retries=0, timeout=1.0)
    with pytest.raises(ControllerError):
        judge_instruction(backend, image(1), image(2), "add a hat")


# ----------------------------------------------------------------------------- a local VLM as judge

@pytest.mark.slow
def test_the_tiny_qwen3_vl_judge_answers_in_the_forced_json(tiny_qwen_dir):
    # json_max_string bounds the random model's "reason" so the whole object fits in the token budget
    backend = load_backend("qwen3-vl", str(tiny_qwen_dir), max_new_tokens=64, json_constrained=True,
                           json_max_string=8)
    res = judge_instruction(backend, image(3), image(4), "make the sky purple", max_new_tokens=64)
    assert res["ok"], res
    assert res["score"] in (0, 1, 2, 3) and res["S_IF"] == res["score"] / 3
    assert res["parse"] == "json" and json.loads(res["raw"])["score"] == res["score"]
