"""plan_turn with the real tiny controllers: calls per turn, the prompt, templates, skipping."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from controller_helpers import CountingVLM, ScriptedAnswer, make_history, tiny_qwen_dir  # noqa: F401
from respec.controller import PlanOptions, count_vlm_calls, load_backend, load_templates, plan_turn
from respec.controller.prompts import builtin_template, template_fingerprint
from respec.errors import InputError
from respec.history import History
from respec.plan import Plan


@pytest.fixture()
def qwen(tiny_qwen_dir):
    return CountingVLM(load_backend("qwen3-vl", str(tiny_qwen_dir), json_constrained=False, max_new_tokens=8))


def run_scenario(n_turns: int, backend, skip: bool, restoration_turn: int | None = None) -> History:
    """Run turns 1..n_turns (the last one the restoration turn), appending each plan."""
    restoration_turn = n_turns if restoration_turn is None else restoration_turn
    h = make_history(1)
    for t in range(1, n_turns + 1):
        plan = plan_turn(h, f"edit number {t}", backend, t == restoration_turn, PlanOptions(skip_non_restoration=skip))
        h = h.append(h.current.image.array, plan.user_instruction, plan.synthesis_instruction, plan)
    return h


def test_turn_1_makes_no_vlm_call(qwen):
    plan = plan_turn(make_history(1), "add a red balloon", qwen, False)
    assert qwen.calls == []
    assert plan.vlm_called is False and plan.turn == 1
    assert plan.synthesis_instruction == "add a red balloon"
    assert plan.vlm_calls == 0 and plan.meta["skipped"] == "first_turn"


def test_turn_1_needs_no_backend_at_all():
    plan = plan_turn(make_history(1), "add a red balloon", None, True)
    assert plan.synthesis_instruction == "add a red balloon" and plan.vlm_called is False


@pytest.mark.parametrize("n_turns", [2, 3, 4, 5])
def test_every_turn_after_the_first_makes_exactly_one_call(qwen, n_turns):
    h = run_scenario(n_turns, qwen, skip=False)
    assert len(qwen.calls) == n_turns - 1
    assert count_vlm_calls(h) == n_turns - 1
    assert [t.plan.vlm_calls for t in h.turns[1:]] == [0] + [1] * (n_turns - 1)
    assert h.turns[-1].plan.meta["vlm_calls_so_far"] == n_turns - 1


@pytest.mark.parametrize("n_turns", [2, 3, 4, 5])
def test_skipping_non_restoration_turns_calls_only_on_the_restoration_turn(qwen, n_turns):
    h = run_scenario(n_turns, qwen, skip=True)
    assert len(qwen.calls) == 1
    assert count_vlm_calls(h) == 1
    skipped = [t.plan.meta.get("skipped") for t in h.turns[1:]]
    assert skipped == ["first_turn"] + ["non_restoration_turn_skipped"] * (n_turns - 2) + [None]
    assert all(t.plan.synthesis_instruction == t.instruction for t in h.turns[1:-1])


def test_restoration_turn_uses_the_restoration_prompt_and_schema(qwen):
    plan = plan_turn(make_history(3), "remove the large cardboard box", qwen, True)
    call = qwen.calls[-1]
    assert call["system"] == builtin_template("restoration")
    assert set(call["json_schema"]["properties"]) == {"reasoning", "identity_anchor_id", "restoration_source_id",
                                                      "restoration_region", "image_ids", "synthesis_instruction"}
    assert plan.meta["prompt"] == "restoration" and plan.is_restoration


def test_mid_turn_uses_the_rewrite_prompt_and_schema(qwen):
    plan = plan_turn(make_history(3), "make the sky pink", qwen, False)
    call = qwen.calls[-1]
    assert call["system"] == builtin_template("midturn")
    assert set(call["json_schema"]["properties"]) == {"reasoning", "synthesis_instruction"}
    assert plan.meta["prompt"] == "midturn" and not plan.is_restoration


def test_prompt_shows_each_image_once_with_its_label_then_history_and_request(qwen):
    h = make_history(4)
    plan_turn(h, "remove the large cardboard box", qwen, True)
    parts = qwen.calls[-1]["parts"]
    images = [p for p in parts if isinstance(p, Image.Image)]
    assert len(images) == 4  # I_0..I_3; I_{t-1} is not duplicated
    for k in range(4):
        assert parts[2 * k] == f"Image {k}:" and isinstance(parts[2 * k + 1], Image.Image)
    text = parts[-1]
    for k, instr in enumerate(h.instructions, start=1):
        assert f"Turn {k} (Image {k - 1} -> Image {k}): {instr}" in text
    assert "turn N = 4" in text and "[Current Request] (turn 4): remove the large cardboard box" in text


def test_prompt_images_are_shrunk_to_the_pixel_budget(qwen):
    h = make_history(3, size=(120, 160))
    plan = plan_turn(h, "make the sky pink", qwen, False, PlanOptions(max_pixels=4800))
    images = [p for p in qwen.calls[-1]["parts"] if isinstance(p, Image.Image)]
    assert all(w * h_ <= 4800 for w, h_ in (im.size for im in images))
    assert images[0].size == (80, 60)  # aspect kept
    assert plan.meta["max_pixels"] == 4800


def test_ground_truth_and_earlier_rewrites_never_reach_the_controller(qwen):
    h = make_history(1)
    secret_plan = Plan(turn=1, user_instruction="add a box", synthesis_instruction="SECRET REWRITE")
    h = h.append(make_history(2).current.image.array, "add a box", "SECRET REWRITE", secret_plan,
                 meta={"ground_truth_reference_turn": 0, "note": "GROUND TRUTH SOURCE IS IMAGE 0"})
    plan_turn(h, "remove the box", qwen, True)
    sent = json.dumps([p for p in qwen.calls[-1]["parts"] if isinstance(p, str)]) + qwen.calls[-1]["system"]
    assert "SECRET" not in sent and "GROUND TRUTH" not in sent and "ground_truth" not in sent
    assert "add a box" in sent


def test_template_override_file_replaces_the_builtin(qwen, tmp_path):
    f = tmp_path / "my_restoration.txt"
    f.write_text("Custom restoration prompt. Answer in JSON.", encoding="utf-8")
    templates = load_templates(restoration_path=str(f))
    plan = plan_turn(make_history(2), "remove the box", qwen, True, PlanOptions(templates=templates))
    assert qwen.calls[-1]["system"] == "Custom restoration prompt. Answer in JSON."
    assert plan.meta["template"]["source"] == str(f)
    plan_turn(make_history(2), "make it pink", qwen, False, PlanOptions(templates=templates))
    assert qwen.calls[-1]["system"] == builtin_template("midturn")


def test_missing_template_file_is_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_templates(midturn_path=str(tmp_path / "nope.txt"))


def test_builtin_templates_ask_for_exactly_the_papers_fields():
    rest, mid = builtin_template("restoration"), builtin_template("midturn")
    for key in ("reasoning", "occluder", "uncovered_region", "target_evidence", "add_into_region_turn",
                "per_turn_classification", "notes", "identity_anchor_id", "restoration_source_id",
                "restoration_region", "image_ids", "synthesis_instruction",
                "ADD-INTO-REGION", "MODIFY-IN-REGION", "UNRELATED"):
        assert f'"{key}"' in rest or key in rest
    for key in ("reasoning", "action_type", "notes", "synthesis_instruction"):
        assert f'"{key}"' in mid
    assert "Add|Modify|Replace|Style-transfer|Other" in mid


def test_empty_request_is_refused(qwen):
    with pytest.raises(InputError, match="empty"):
        plan_turn(make_history(2), "  ", qwen, False)


def test_later_turn_without_a_controller_is_refused():
    with pytest.raises(InputError, match="needs a controller"):
        plan_turn(make_history(2), "make it pink", None, False)


def test_backend_settings_are_the_defaults_of_a_call(tiny_qwen_dir):
    vlm = CountingVLM(load_backend("qwen3-vl", str(tiny_qwen_dir), json_constrained=False, max_new_tokens=5,
                                   max_pixels=2000))
    plan = plan_turn(make_history(2, size=(80, 80)), "make it pink", vlm, False)
    assert vlm.calls[-1]["max_new_tokens"] == 5
    assert plan.meta["max_pixels"] == 2000 and plan.meta["max_new_tokens"] == 5


def test_scripted_answer_flows_into_the_plan_meta():
    vlm = ScriptedAnswer('{"reasoning": {"action_type": "Modify", "notes": "n"}, "synthesis_instruction": "x y"}')
    plan = plan_turn(make_history(2), "make it pink", vlm, False, meta={"restoration_decided_by": "manual"})
    assert plan.meta["restoration_decided_by"] == "manual" and plan.meta["images_shown"] == [0, 1]
    assert plan.controller == "scripted" and plan.seconds >= 0


def test_the_template_cache_key_follows_the_override_files_text(tmp_path):
    f = tmp_path / "rest.txt"
    f.write_text("v1", encoding="utf-8")
    first = template_fingerprint(str(f), "")
    assert template_fingerprint(str(f), "  ") == first and first != ""
    f.write_text("v2", encoding="utf-8")
    assert template_fingerprint(str(f), "") != first
    assert template_fingerprint(None, str(f)) != template_fingerprint(str(f), None)   # which prompt it replaces
    assert template_fingerprint("", "") == ""                  # built-in templates only: nothing to watch
    missing = template_fingerprint(str(tmp_path / "gone.txt"))
    assert missing not in ("", first)                          # a key all the same: the run reports it
    f.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(InputError, match="not UTF-8"):
        load_templates(restoration_path=str(f))


# ----------------------------------------------------------------------------- on_parse_failure, size

PROSE = "Sure! I think the cat should be brought back, it was hidden behind the box earlier."


@pytest.mark.parametrize("restoration", [False, True])
def test_an_unparsable_answer_sends_the_raw_text_under_the_papers_rule(restoration):
    plan = plan_turn(make_history(3), "bring back the cat", ScriptedAnswer(PROSE), restoration)
    assert plan.synthesis_instruction == PROSE and "json_parse_failed" in plan.fallbacks
    assert "parse_failure_used_request" not in plan.fallbacks and plan.meta["on_parse_failure"] == "paper"


@pytest.mark.parametrize("restoration", [False, True])
def test_an_unparsable_answer_sends_the_users_words_under_the_request_rule(restoration):
    plan = plan_turn(make_history(3), "bring back the cat", ScriptedAnswer(PROSE), restoration,
                     PlanOptions(on_parse_failure="request"))
    assert plan.synthesis_instruction == "bring back the cat"
    assert plan.fallbacks[0] == "json_parse_failed" and plan.fallbacks[-1] == "parse_failure_used_request"
    assert plan.raw_text == PROSE and plan.meta["on_parse_failure"] == "request"
    if restoration:    # C.3 still fills the ids of the fallback object
        assert plan.restoration_source_id == 0 and plan.identity_anchor_id == 2


def test_the_request_rule_leaves_a_parsed_answer_alone():
    vlm = ScriptedAnswer('{"reasoning": {"notes": "n"}, "synthesis_instruction": "make the wall pink"}')
    plan = plan_turn(make_history(2), "make it pink", vlm, False, PlanOptions(on_parse_failure="request"))
    assert plan.synthesis_instruction == "make the wall pink" and plan.fallbacks == ()


def test_an_unknown_parse_failure_rule_is_refused():
    with pytest.raises(InputError, match="on_parse_failure must be one of"):
        plan_turn(make_history(2), "make it pink", ScriptedAnswer(PROSE), False, PlanOptions(on_parse_failure="raw"))


def test_a_request_over_16_kib_is_refused_before_any_call():
    vlm = ScriptedAnswer(PROSE)
    with pytest.raises(InputError, match=r"16,385 bytes.*16 KiB"):
        plan_turn(make_history(2), "a" * 16385, vlm, False)
    assert vlm.calls == 0
    plan_turn(make_history(2), "a" * 16384, vlm, False)
    assert vlm.calls == 1
