"""The node layer's checks (nodes/boundary.py): every node that hands a history or a plan to the core
checks the socket's value first and says which node to connect; the core takes typed values and
never names a node."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from conftest import core


def _t(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr).float()[None] / 255.0


def _picture(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (32, 48, 3), np.uint8)


@pytest.fixture
def m(pack):
    return pack.NODE_CLASS_MAPPINGS


@pytest.fixture
def history(m):
    hist, *_ = m["ReSpecHistoryStore"].execute("in-graph", "s", -1, "", "", image=_t(_picture(0))).result
    hist, _ = m["ReSpecHistoryAppend"].execute(hist, _t(_picture(1)), "add a hat").result
    return hist


def _plan(pack, turn: int):
    Plan = core(pack, "plan").Plan
    return Plan(turn=turn, user_instruction="remove the hat", synthesis_instruction="remove the hat",
                is_restoration=True, restoration_source_id=0, identity_anchor_id=turn - 1, image_ids=(0,))


# Each node that takes a history, called with something else in its place.
_HISTORY_CALLS = {
    "ReSpecPreservationTarget": lambda n, bad: n.execute(bad, "remove the hat", None, "auto", False, "(built-in)",
                                                      "(built-in)"),
    "ReSpecControllerPrompt": lambda n, bad: n.execute(bad, "remove the hat", "auto", False, 262144, "(built-in)",
                                                     "(built-in)"),
    "ReSpecProvenanceSelector": lambda n, bad: n.execute(bad, "remove the hat", "auto", True),
    "ReSpecRevealComposite": lambda n, bad: n.execute(bad, _t(_picture(2)), "remove the hat", True, "auto"),
    "ReSpecHistoryAppend": lambda n, bad: n.execute(bad, _t(_picture(2)), "remove the hat"),
    "ReSpecHistoryToImages": lambda n, bad: n.execute(bad, 0, -1, "pad"),
}


@pytest.mark.parametrize("node", sorted(_HISTORY_CALLS))
@pytest.mark.parametrize("bad", ["my-session", {"turns": []}, 3])
def test_a_node_refuses_a_history_that_no_history_node_made_and_names_them(pack, m, node, bad):
    with pytest.raises(core(pack, "errors").InputError, match="must come from a History Store or Append node"):
        _HISTORY_CALLS[node](m[node](), bad)


def test_the_reference_selector_refuses_a_history_before_it_reads_the_plan(pack, m):
    with pytest.raises(core(pack, "errors").InputError, match="History Store or Append node"):
        m["ReSpecReferenceSelector"].execute("my-session", _plan(pack, 2), True)


@pytest.mark.parametrize("bad", ["remove the hat", {"turn": 2}, 1.5])
def test_a_node_refuses_a_plan_that_no_controller_node_made_and_names_them(pack, m, history, bad):
    errors = core(pack, "errors")
    calls = [lambda: m["ReSpecReferenceSelector"].execute(history, bad, True),
             lambda: m["ReSpecInstructionRewriter"].execute(bad, True),
             lambda: m["ReSpecHistoryAppend"].execute(history, _t(_picture(2)), "remove the hat", plan=bad).result,
             lambda: m["ReSpecRevealComposite"].execute(history, _t(_picture(2)), "remove the hat", True, "auto",
                                                            plan=bad),
             lambda: m["ReSpecDriftGuard"].execute(_t(_picture(1)), _t(_picture(2)), True, plan=bad).result,
             lambda: m["ReSpecEditRegionFromText"].execute(plan=bad)]
    for call in calls:
        with pytest.raises(errors.InputError, match=r"must come from a controller node \(RESPEC_PLAN"):
            call()


def test_a_plan_made_for_another_turn_is_refused_naming_what_to_connect(pack, m, history):
    errors = core(pack, "errors")
    with pytest.raises(errors.InputError, match="made for turn 5.*next turn is 2.*Reference Selector"):
        m["ReSpecReferenceSelector"].execute(history, _plan(pack, 5), True)
    with pytest.raises(errors.InputError, match="made for turn 5.*next turn is 2.*provenance Reference Selector"):
        m["ReSpecProvenanceSelector"].execute(history, "remove the hat", "auto", True, plan=_plan(pack, 5))


def test_a_turn_that_calls_the_controller_without_one_names_the_loader_nodes(pack, m, history):
    with pytest.raises(core(pack, "errors").InputError, match="turn 2 needs a controller: connect a VLM"):
        m["ReSpecPreservationTarget"].execute(history, "make it pink", None, "not restoration", False, "(built-in)",
                                              "(built-in)")


def test_plan_from_text_names_controller_prompt_when_its_call_is_missing(pack, m):
    with pytest.raises(core(pack, "errors").InputError, match="connect Controller Prompt"):
        m["ReSpecPlanFromText"].execute(None, "{}", "request")


def test_the_core_takes_typed_values_and_its_messages_name_no_node(pack, history):
    """The turn rule stays in the core (a plan belongs to its history's next turn), in the core's words."""
    errors = core(pack, "errors")
    select = importlib.import_module(f"{pack.__name__}.respec.controller.selection").select_references
    with pytest.raises(errors.InputError) as got:
        select(history, _plan(pack, 5))
    assert "made for turn 5" in str(got.value) and "connect" not in str(got.value) and "node" not in str(got.value)
