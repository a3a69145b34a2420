"""Appendix C.2 (parsing) and C.3 (fallbacks): one test per rule, each with the exact plan.

The model's answer text is given (ScriptedAnswer); everything after it - plan_turn, the parser,
the fallbacks, D_t - is the real code. Every test that reads an answer through restoration_plan /
midturn_plan runs on both controller routes: `vlm` (Preservation Target's plan_turn) and
`textgen` (Controller Prompt -> ComfyUI's TextGenerate -> Plan from Text, with on_parse_failure
"paper"), so the two apply the same rules.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from controller_helpers import ScriptedAnswer, make_history
from respec.controller import parse_midturn, parse_restoration, parsing, plan_turn
from respec.controller.textgen import controller_call, plan_from_text
from respec.plan import Plan
from respec.store import SessionStore

ROOT = Path(__file__).resolve().parent.parent
REQUEST = "remove the large cardboard box"
HISTORY = make_history(4)   # I_0..I_3, so this is turn t = 4 and t-1 = 3

REASONING = {"occluder": "cardboard box", "uncovered_region": "the man's chest",
             "target_evidence": "the NASA patch on the chest", "add_into_region_turn": 1,
             "per_turn_classification": {"T1": "ADD-INTO-REGION", "T2": "UNRELATED", "T3": "MODIFY-IN-REGION"},
             "notes": "the box covers the patch"}
FULL = {"reasoning": REASONING, "identity_anchor_id": 3, "restoration_source_id": 0,
        "restoration_region": "centre of the chest", "image_ids": [0, 3],
        "synthesis_instruction": "Remove the large cardboard box, revealing the NASA patch from the first image."}


ROUTES = ("vlm", "textgen")
_route = ["vlm"]


@pytest.fixture(autouse=True)
def answer_route(request):
    """The controller route restoration_plan / midturn_plan take (parametrised below)."""
    _route[0] = getattr(request, "param", "vlm")
    yield _route[0]
    _route[0] = "vlm"


def pytest_generate_tests(metafunc):
    # Every test that reads an answer through the two helpers runs on both routes.
    if {"restoration_plan", "midturn_plan"} & set(metafunc.function.__code__.co_names):
        metafunc.parametrize("answer_route", ROUTES, indirect=True)


def _plan(request: str, answer: str, restoration: bool) -> Plan:
    if _route[0] == "textgen":
        return plan_from_text(controller_call(HISTORY, request, restoration), answer, on_parse_failure="paper")
    return plan_turn(HISTORY, request, ScriptedAnswer(answer), restoration)


def restoration_plan(answer: str) -> Plan:
    return _plan(REQUEST, answer, True)


def midturn_plan(answer: str) -> Plan:
    return _plan("make the sky pink", answer, False)


def fields(plan: Plan) -> dict:
    d = plan.to_dict()
    return {k: d[k] for k in ("turn", "user_instruction", "synthesis_instruction", "is_restoration",
                              "preservation_target", "restoration_source_id", "identity_anchor_id",
                              "restoration_region", "image_ids", "reasoning", "fallbacks", "vlm_called")}


def expected(**changes) -> dict:
    base = {"turn": 4, "user_instruction": REQUEST, "synthesis_instruction": FULL["synthesis_instruction"],
            "is_restoration": True, "preservation_target": "the NASA patch on the chest",
            "restoration_source_id": 0, "identity_anchor_id": 3, "restoration_region": "centre of the chest",
            "image_ids": [0, 3], "reasoning": REASONING, "fallbacks": [], "vlm_called": True}
    base.update(changes)
    return base


def fenced(obj) -> str:
    return "Here is the plan.\n```json\n" + json.dumps(obj, indent=2) + "\n```\nDone."


PARSE_FAILED_C3 = ("json_parse_failed", "identity_anchor_id_missing", "restoration_source_id_missing",
                   "restoration_region_empty", "image_ids_missing")


def without(key: str) -> dict:
    return {k: v for k, v in FULL.items() if k != key}


# ----------------------------------------------------------------------------- C.2 parsing

def test_complete_answer_fires_no_rule():
    plan = restoration_plan(fenced(FULL))
    assert fields(plan) == expected()
    assert plan.meta["parse"] == "fenced_json_block"
    assert plan.meta["preservation_target_from"] == "reasoning.target_evidence"
    assert plan.raw_text == fenced(FULL)


def test_fenced_json_block_is_read_first():
    decoy = json.dumps({**FULL, "synthesis_instruction": "decoy", "image_ids": [1, 2]})
    plan = restoration_plan(f"Draft: {decoy}\nFinal:\n```json\n{json.dumps(FULL)}\n```")
    assert fields(plan) == expected()
    assert plan.meta["parse"] == "fenced_json_block"


def test_first_json_object_is_read_without_a_fence():
    plan = restoration_plan("Sure! " + json.dumps(FULL) + " Hope this helps.")
    assert fields(plan) == expected()
    assert plan.meta["parse"] == "first_json_object"


def test_fenced_block_that_is_not_json_falls_through_to_the_first_json_object():
    plan = restoration_plan("```json\n" + json.dumps(FULL) + ",\n```")  # trailing comma inside the fence
    assert fields(plan) == expected()
    assert plan.meta["parse"] == "first_json_object"


def test_cut_off_answer_is_a_parse_failure_not_its_inner_object():
    # the token cap cut the answer inside "image_ids": "reasoning" alone is complete JSON
    cut = json.dumps(FULL)[: json.dumps(FULL).index('"image_ids"') + 16]
    plan = restoration_plan(cut)
    assert plan.fallbacks == PARSE_FAILED_C3 and plan.image_ids == (0, 3) and plan.reasoning is None
    assert plan.synthesis_instruction == cut


def test_first_of_two_objects_is_read():
    second = {**FULL, "synthesis_instruction": "second"}
    plan = restoration_plan(json.dumps(FULL) + "\n" + json.dumps(second))
    assert plan.synthesis_instruction == FULL["synthesis_instruction"]


def test_control_characters_inside_strings_are_accepted():
    text = json.dumps(FULL).replace("Remove the", "Remove\tthe")
    plan = restoration_plan(text)
    assert plan.synthesis_instruction.startswith("Remove\tthe")
    assert plan.fallbacks == ()


def test_parse_failure_on_restoration_turn_keeps_the_raw_text_and_applies_the_c3_id_rules():
    # C.2 builds the fallback object (ids None, image_ids []), then C.3 fills it like any other
    # incomplete answer: anchor t-1, source 0, image_ids [source, anchor]; each rule is recorded.
    raw = "I think image 0 shows the patch best; remove the box and bring the patch back."
    plan = restoration_plan(raw)
    assert fields(plan) == expected(synthesis_instruction=raw, preservation_target=None, restoration_source_id=0,
                                    identity_anchor_id=3, restoration_region=None, image_ids=[0, 3],
                                    reasoning=None, fallbacks=list(PARSE_FAILED_C3))
    assert plan.meta["parse"] == "no_json"


def test_parse_failure_and_a_non_object_answer_get_the_same_ids():
    failed = restoration_plan("no JSON here")
    for not_an_object in ("null", "[1, 2]", '"text"'):
        other = restoration_plan(not_an_object)
        assert (other.restoration_source_id, other.identity_anchor_id, other.image_ids) == \
               (failed.restoration_source_id, failed.identity_anchor_id, failed.image_ids) == (0, 3, (0, 3))


def test_parse_failure_on_mid_turn_uses_the_raw_text():
    raw = "Make the sky a soft pink at sunset."
    plan = midturn_plan(raw)
    assert fields(plan) == {"turn": 4, "user_instruction": "make the sky pink", "synthesis_instruction": raw,
                            "is_restoration": False, "preservation_target": None, "restoration_source_id": None,
                            "identity_anchor_id": None, "restoration_region": None, "image_ids": [],
                            "reasoning": None, "fallbacks": ["json_parse_failed"], "vlm_called": True}


def test_parse_failure_with_an_empty_answer_uses_the_user_request():
    plan = restoration_plan("   \n")
    assert fields(plan) == expected(synthesis_instruction=REQUEST, preservation_target=None,
                                    restoration_source_id=0, identity_anchor_id=3, restoration_region=None,
                                    image_ids=[0, 3], reasoning=None,
                                    fallbacks=["json_parse_failed", "synthesis_instruction_missing",
                                               *PARSE_FAILED_C3[1:]])


def test_result_that_is_not_a_dict_uses_the_user_request():
    plan = restoration_plan('```json\n["remove the box", 0, 3]\n```')
    assert fields(plan) == expected(synthesis_instruction=REQUEST, preservation_target=None,
                                    restoration_region=None, reasoning=None,
                                    fallbacks=["result_not_a_dict", "synthesis_instruction_missing",
                                               "identity_anchor_id_missing", "restoration_source_id_missing",
                                               "restoration_region_empty", "image_ids_missing"])
    mid = midturn_plan('```json\n"make it pink"\n```')
    assert mid.synthesis_instruction == "make the sky pink"
    assert mid.fallbacks == ("result_not_a_dict", "synthesis_instruction_missing")


def test_missing_synthesis_instruction_uses_the_user_request():
    plan = restoration_plan(fenced(without("synthesis_instruction")))
    assert fields(plan) == expected(synthesis_instruction=REQUEST, fallbacks=["synthesis_instruction_missing"])
    mid = midturn_plan(fenced({"reasoning": {"action_type": "Modify", "notes": "sky"}}))
    assert mid.synthesis_instruction == "make the sky pink"
    assert mid.fallbacks == ("synthesis_instruction_missing",)
    assert mid.reasoning == {"action_type": "Modify", "notes": "sky"}


def test_synthesis_instruction_is_passed_as_is_not_merged_with_the_request():
    plan = midturn_plan(fenced({"reasoning": {"action_type": "Modify", "notes": "n"},
                                "synthesis_instruction": "Paint the whole sky pastel pink."}))
    assert plan.synthesis_instruction == "Paint the whole sky pastel pink."
    assert plan.fallbacks == ()


# ----------------------------------------------------------------------------- C.3 fallbacks

def test_missing_identity_anchor_id_becomes_t_minus_1():
    plan = restoration_plan(fenced({**without("identity_anchor_id"), "image_ids": [0, 3]}))
    assert fields(plan) == expected(fallbacks=["identity_anchor_id_missing"])
    null = restoration_plan(fenced({**FULL, "identity_anchor_id": None}))
    assert fields(null) == expected(fallbacks=["identity_anchor_id_missing"])


def test_missing_restoration_source_id_becomes_0():
    answer = {**FULL, "identity_anchor_id": 2, "image_ids": [1, 2]}
    del answer["restoration_source_id"]
    plan = restoration_plan(fenced(answer))
    assert fields(plan) == expected(identity_anchor_id=2, image_ids=[1, 2], fallbacks=["restoration_source_id_missing"])
    null = restoration_plan(fenced({**answer, "restoration_source_id": None}))
    assert null.restoration_source_id == 0 and null.fallbacks == ("restoration_source_id_missing",)


def test_empty_restoration_region_is_left_as_none():
    for value in ("", "   ", None):
        plan = restoration_plan(fenced({**FULL, "restoration_region": value}))
        assert fields(plan) == expected(restoration_region=None, fallbacks=["restoration_region_empty"])


def test_missing_image_ids_become_source_then_anchor():
    answer = {**FULL, "restoration_source_id": 1, "identity_anchor_id": 3}
    for ids in (None, []):
        a = dict(answer)
        if ids is None:
            del a["image_ids"]
        else:
            a["image_ids"] = ids
        plan = restoration_plan(fenced(a))
        assert fields(plan) == expected(restoration_source_id=1, image_ids=[1, 3], fallbacks=["image_ids_missing"])


def test_missing_ids_everywhere_give_original_and_latest_image():
    answer = {"reasoning": REASONING, "synthesis_instruction": FULL["synthesis_instruction"]}
    plan = restoration_plan(fenced(answer))
    assert fields(plan) == expected(restoration_region=None, image_ids=[0, 3],
                                    fallbacks=["identity_anchor_id_missing", "restoration_source_id_missing",
                                               "restoration_region_empty", "image_ids_missing"])


def test_out_of_range_ids_are_not_clamped_when_parsing():
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": 7, "identity_anchor_id": -1,
                                    "image_ids": [7, -1, 2]}))
    assert fields(plan) == expected(restoration_source_id=7, identity_anchor_id=-1, image_ids=[7, -1, 2])


def test_ids_written_as_text_are_read_as_ids():
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": "Image 1", "identity_anchor_id": "3",
                                    "image_ids": ["1", 3.0]}))
    assert fields(plan) == expected(restoration_source_id=1, image_ids=[1, 3])


def test_unreadable_image_ids_entries_are_dropped():
    plan = restoration_plan(fenced({**FULL, "image_ids": ["the first one", 3]}))
    assert fields(plan) == expected(image_ids=[3], fallbacks=["image_ids_entry_unreadable"])
    none_left = restoration_plan(fenced({**FULL, "image_ids": ["first", True]}))
    assert fields(none_left) == expected(fallbacks=["image_ids_entry_unreadable", "image_ids_missing"])


def test_preservation_target_comes_from_reasoning_then_region():
    no_evidence = {**REASONING, "target_evidence": ""}
    plan = restoration_plan(fenced({**FULL, "reasoning": no_evidence}))
    assert plan.preservation_target == "the man's chest"
    assert plan.meta["preservation_target_from"] == "reasoning.uncovered_region"
    plan = restoration_plan(fenced({**FULL, "reasoning": "box over the chest"}))
    assert plan.preservation_target == "centre of the chest"
    assert plan.meta["preservation_target_from"] == "restoration_region"
    plan = restoration_plan(fenced({**FULL, "reasoning": None, "restoration_region": ""}))
    assert plan.preservation_target is None and "preservation_target_from" not in plan.meta


def test_mid_turn_plan_never_carries_reference_ids():
    answer = {**FULL, "reasoning": {"action_type": "Modify", "notes": "n"}}
    plan = midturn_plan(fenced(answer))
    assert plan.image_ids == () and plan.restoration_source_id is None and plan.identity_anchor_id is None
    assert plan.synthesis_instruction == FULL["synthesis_instruction"]


# ----------------------------------------------------------------------------- property

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20)
plan_keys = st.sampled_from(["reasoning", "identity_anchor_id", "restoration_source_id", "restoration_region",
                             "image_ids", "synthesis_instruction"])
plan_like = st.dictionaries(plan_keys, json_values, max_size=6)


def _answers():
    return st.one_of(
        st.text(max_size=400),
        st.text(alphabet="{}[]\":,0123456789 `json\n\\tnulrue", max_size=200),
        json_values.map(lambda v: json.dumps(v)),
        plan_like.map(lambda d: fenced(d)),
        st.tuples(st.text(max_size=40), plan_like, st.text(max_size=40)).map(lambda t: t[0] + json.dumps(t[1]) + t[2]),
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=_answers(), restoration=st.booleans())
def test_any_answer_text_gives_a_valid_plan(answer, restoration):
    plan = plan_turn(HISTORY, REQUEST, ScriptedAnswer(answer), restoration)
    assert isinstance(plan, Plan)
    assert isinstance(plan.synthesis_instruction, str) and plan.synthesis_instruction.strip()
    assert all(isinstance(i, int) and not isinstance(i, bool) for i in plan.image_ids)
    for v in (plan.restoration_source_id, plan.identity_anchor_id):
        assert v is None or (isinstance(v, int) and not isinstance(v, bool))
    assert plan.restoration_region is None or (isinstance(plan.restoration_region, str) and plan.restoration_region)
    assert set(plan.fallbacks) <= {"json_parse_failed", "result_not_a_dict", "synthesis_instruction_missing",
                                   "identity_anchor_id_missing", "restoration_source_id_missing",
                                   "restoration_region_empty", "image_ids_missing", "image_ids_entry_unreadable"}
    if restoration:  # C.3 applies to every restoration answer, a parse failure included
        assert len(plan.image_ids) >= 1 and plan.identity_anchor_id is not None
        assert plan.restoration_source_id is not None
    if not restoration:
        assert plan.image_ids == ()
    # the plan survives its own JSON round trip (it is saved with the history)
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))).to_dict() == json.loads(json.dumps(plan.to_dict()))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), turn=st.integers(min_value=2, max_value=8))
def test_parser_functions_never_raise(text, turn):
    r = parse_restoration(text, turn, "do it")
    m = parse_midturn(text, "do it")
    assert r.synthesis_instruction and m.synthesis_instruction


# ----------------------------------------------------------------------------- hostile answers

@pytest.mark.timeout(60)
def test_unbalanced_braces_are_searched_in_linear_time():
    # was a backtracking regex: 32 s for 40 kB, ~17 minutes for 1 MB (the timeout fails it)
    for raw in ("{" * 1_000_000, "x{" * 500_000, "}" * 100 + "{" * 500_000, "```json\n" * 120_000,
                "{" + "a" * 500_000 + "}" * 10 + "{" * 300_000):
        plan = restoration_plan(raw)
        assert plan.image_ids == (0, 3) and "json_parse_failed" in plan.fallbacks


def test_first_brace_to_last_brace_is_the_object_read():
    inner = json.dumps(FULL)
    plan = restoration_plan("note {not json} then " + inner + " and }")
    # first "{" .. last "}" is not JSON; the object at the first brace is not either: parse failure
    assert "json_parse_failed" in plan.fallbacks
    plan = restoration_plan("Sure: " + inner + " (done)")
    assert fields(plan) == expected()


def _nested(depth: int) -> dict:
    return json.loads('{"a": ' * depth + "1" + "}" * depth)


def test_deeply_nested_reasoning_is_kept_as_a_capped_string_and_the_plan_serialises():
    answer = json.dumps({**FULL, "reasoning": {"notes": "deep"}}).replace(
        '{"notes": "deep"}', '{"a": ' * 600 + "1" + "}" * 600)
    plan = restoration_plan(answer)
    d = plan.to_dict()          # raised RecursionError (dataclasses.asdict) at ~500 levels
    text = json.dumps(d)
    assert isinstance(plan.reasoning, str) and len(plan.reasoning) <= parsing.MAX_REASONING_CHARS
    assert "reasoning" in plan.meta["truncated"]
    assert plan.image_ids == (0, 3) and plan.fallbacks == ()
    assert Plan.from_dict(json.loads(text)).reasoning == plan.reasoning


def test_modest_reasoning_objects_are_kept_as_objects():
    plan = restoration_plan(fenced(FULL))
    assert plan.reasoning == REASONING and "truncated" not in plan.meta


def test_huge_strings_are_capped_and_recorded():
    big = "word " * 400_000   # 2 MB
    plan = restoration_plan(fenced({**FULL, "synthesis_instruction": big, "restoration_region": big,
                                    "reasoning": {"notes": big}}))
    assert len(plan.synthesis_instruction) <= parsing.MAX_INSTRUCTION_CHARS
    assert len(plan.restoration_region) <= parsing.MAX_FIELD_CHARS
    assert isinstance(plan.reasoning, str) and len(plan.reasoning) <= parsing.MAX_REASONING_CHARS
    assert len(plan.raw_text) <= parsing.MAX_RAW_CHARS
    assert set(plan.meta["truncated"]) >= {"synthesis_instruction", "restoration_region", "reasoning", "raw_text"}


def test_lone_surrogates_are_replaced_at_the_parse_boundary(tmp_path):
    answer = json.dumps({**FULL, "synthesis_instruction": "remove the box \ud800 now",
                         "reasoning": {"notes\udfff": "x\ud83d"}})
    assert "\\ud800" in answer
    plan = restoration_plan(answer + "\udc80")
    for text in (plan.synthesis_instruction, json.dumps(plan.to_dict(), ensure_ascii=False), plan.raw_text):
        text.encode("utf-8")    # raised UnicodeEncodeError in the store and the results writer
    assert plan.synthesis_instruction == "remove the box \ufffd now"
    store = SessionStore(tmp_path / "store")
    store.create("s", HISTORY.images[0].array)
    for k in range(1, 4):
        store.append("s", HISTORY.images[k].array, f"edit {k}")
    store.append("s", HISTORY.images[0].array, REQUEST, plan.synthesis_instruction, plan=plan)
    assert SessionStore(tmp_path / "store").load("s").turns[-1].plan.to_dict() == plan.to_dict()


def test_huge_integer_ids_are_kept_as_the_capped_out_of_range_marker():
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": 10 ** 40, "image_ids": [10 ** 40, 3]}))
    assert plan.restoration_source_id == parsing.ID_CAP and plan.image_ids == (parsing.ID_CAP, 3)
    assert plan.fallbacks == ()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(answer=st.one_of(
    st.text(max_size=300), _answers(),
    st.binary(min_size=1, max_size=300).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.lists(st.sampled_from(['{"synthesis_instruction": "', '{"reasoning": ', '"restoration_region": "',
                              "\\ud800", "\udc80", "\\udfff", '", ', '"}', "[", "]", "}", "x"]),
             min_size=1, max_size=30).map("".join)),
       restoration=st.booleans())
@pytest.mark.slow
def test_any_answer_gives_a_plan_that_serialises_stores_and_reloads(tmp_path_factory, answer, restoration):
    plan = plan_turn(HISTORY, REQUEST, ScriptedAnswer(answer), restoration)
    text = json.dumps(plan.to_dict(), ensure_ascii=False)
    text.encode("utf-8")
    store = _property_store(tmp_path_factory)
    hist = store.append("p", HISTORY.images[0].array, REQUEST, plan.synthesis_instruction, plan=plan)
    again = SessionStore(store.root).load("p").turns[-1]
    assert again.plan.to_dict() == json.loads(text) == hist.turns[-1].plan.to_dict()
    store.rewind("p", 3)


_STORES: dict = {}


def _property_store(factory) -> SessionStore:
    if "s" not in _STORES:
        store = SessionStore(factory.mktemp("property") / "store")
        store.create("p", HISTORY.images[0].array)
        for k in range(1, 4):
            store.append("p", HISTORY.images[k].array, f"edit {k}")
        _STORES["s"] = store
    return _STORES["s"]


@pytest.mark.slow
def test_fuzzed_answers_pass_through_the_whole_turn_path_without_an_exception(tmp_path):
    # a CI-size run of scripts/dev/fuzz_controller.py (the benchmark runs 10,000 cases and times them)
    spec = importlib.util.spec_from_file_location("fuzz_controller", ROOT / "scripts" / "dev" / "fuzz_controller.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    res = fuzz.run(count=60, seed=13, workdir=tmp_path)
    assert res["exceptions"] == 0, res["errors"]
    assert sum(v["cases"] for v in res["by_kind"].values()) == 60 and len(res["by_kind"]) >= 8


@pytest.mark.parametrize("huge", [2 ** 64, -(2 ** 70), 10 ** 30, 1e300, "123456789012345678901234567890"])
def test_an_id_too_large_for_64_bits_is_kept_out_of_range_not_treated_as_missing(huge):
    """Beyond C.3: a huge id is not 'missing' (which would make it 0 or t-1); it stays an
    out-of-range id (capped so it can be stored) and the ordering rule drops it."""
    from respec.controller.selection import select_references
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": huge, "identity_anchor_id": huge,
                                    "image_ids": [huge, 3]}))
    cap = parsing.ID_CAP if (huge > 0 if not isinstance(huge, str) else True) else -parsing.ID_CAP
    assert fields(plan) == expected(restoration_source_id=cap, identity_anchor_id=cap, image_ids=[cap, 3])
    assert "restoration_source_id_missing" not in plan.fallbacks
    assert {"identity_anchor_id", "restoration_source_id", "image_ids"} <= set(plan.meta["truncated"])
    chosen = select_references(HISTORY, plan)
    assert chosen.ids == [3] and chosen.dropped_ids == [cap]
    json.dumps(plan.to_dict(), allow_nan=False)


def test_a_capped_id_survives_the_store(tmp_path):
    from respec.history import History
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": 2 ** 64}))
    store = SessionStore(tmp_path / "s")
    h = store.create("s1", HISTORY.image(0).array)
    store.append("s1", HISTORY.image(1).array, REQUEST, plan=Plan.from_dict({**plan.to_dict(), "turn": 1}))
    again = SessionStore(tmp_path / "s").load("s1")
    assert again.turns[1].plan.restoration_source_id == parsing.ID_CAP
    assert isinstance(h, History)


def test_ids_of_ordinary_size_are_not_capped():
    plan = restoration_plan(fenced({**FULL, "restoration_source_id": 2 ** 31 - 2, "image_ids": [12345678901, 3]}))
    assert plan.restoration_source_id == 2 ** 31 - 2 and plan.image_ids == (parsing.ID_CAP, 3)
