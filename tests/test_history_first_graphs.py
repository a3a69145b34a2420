"""History first in the shipped chat graphs (issue 43): on a turn the history answers, ComfyUI must run
none of the editor's branch. It runs every output node and, upstream of it, every input link except
a lazy input that its node's check_lazy_status does not ask for; the Drift Guard asks for neither
`edited`, `mask` nor `reveal` on such a turn, and History Append not for `reveal`
(tests/test_history_first_nodes.py). So no output node may hang on the editor's branch."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
API_DIR = ROOT / "workflows" / "api"
CORE = json.loads((ROOT / "scripts" / "workflows" / "comfy_core_nodes.json").read_text(encoding="utf-8"))["nodes"]
INDEX = json.loads((API_DIR / "index.json").read_text(encoding="utf-8"))["workflows"]
CHATS = sorted(k for k in INDEX if k.startswith("conversational_"))
# What an edit runs: the samplers, the pack's own editors, the decode, and Reveal Composite after them.
SAMPLING = {"SamplerCustomAdvanced", "KSampler", "ReSpecFlux2Edit", "ReSpecOmniGen2Edit", "VAEDecode",
            "ReSpecRevealComposite"}
# The lazy inputs not asked for on a turn history first answered: (node class, input).
UNASKED = {("ReSpecDriftGuard", "edited"), ("ReSpecDriftGuard", "mask"), ("ReSpecDriftGuard", "reveal"),
           ("ReSpecHistoryAppend", "reveal")}


def _api(key: str) -> dict:
    return json.loads((API_DIR / INDEX[key]["api"]).read_text(encoding="utf-8"))


def _links(node: dict):
    return [(name, v[0]) for name, v in node["inputs"].items()
            if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)]


def _is_output(cls: str, pack) -> bool:
    if cls in pack.NODE_CLASS_MAPPINGS:
        return bool(getattr(pack.NODE_CLASS_MAPPINGS[cls], "OUTPUT_NODE", False))
    return bool(CORE[cls].get("output_node"))


def ran_on_an_answered_turn(wf: dict, pack) -> set[str]:
    """The nodes ComfyUI runs for `wf` on a turn history first answers: the output nodes and, upstream,
    every link but the UNASKED lazy inputs."""
    todo = [nid for nid, n in wf.items() if _is_output(n["class_type"], pack)]
    seen: set[str] = set()
    while todo:
        nid = todo.pop()
        if nid in seen:
            continue
        seen.add(nid)
        todo += [src for name, src in _links(wf[nid]) if (wf[nid]["class_type"], name) not in UNASKED]
    return seen


def _upstream(wf: dict, nid: str) -> set[str]:
    todo, seen = [nid], set()
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += [src for _, src in _links(wf[n])]
    return seen


def test_the_inputs_left_unasked_are_declared_lazy(pack):
    for cls, name in UNASKED:
        inputs = pack.NODE_CLASS_MAPPINGS[cls].INPUT_TYPES()
        entry = {**inputs["required"], **inputs.get("optional", {})}[name]
        assert entry[1].get("lazy") is True, (cls, name)


@pytest.mark.parametrize("key", CHATS)
def test_every_chat_graph_turns_history_first_on_with_the_history_and_the_plan(key):
    wf = _api(key)
    (guard,) = [n for n in wf.values() if n["class_type"] == "ReSpecDriftGuard"]
    assert guard["inputs"]["history_first"] is True
    store = next(nid for nid, n in wf.items() if n["class_type"] == "ReSpecHistoryStore")
    assert guard["inputs"]["history"] == [store, 0]
    assert wf[guard["inputs"]["plan"][0]]["class_type"] in ("ReSpecPreservationTarget", "ReSpecPlanFromText",
                                                             "ReSpecProvenanceSelector")


@pytest.mark.parametrize("key", CHATS)
def test_on_a_turn_the_history_answers_no_chat_graph_runs_its_editor(key, pack):
    wf = _api(key)
    (gid,) = [nid for nid, n in wf.items() if n["class_type"] == "ReSpecDriftGuard"]
    branch = _upstream(wf, wf[gid]["inputs"]["edited"][0])
    sampling = {nid for nid in branch if wf[nid]["class_type"] in SAMPLING}
    assert sampling, "the editor's branch holds the sampling"
    ran = ran_on_an_answered_turn(wf, pack)
    assert not sampling & ran, sorted(wf[n]["class_type"] for n in sampling & ran)
    # what the answer needs still runs: the history, the plan, the guard, the append and its save
    assert {wf[n]["class_type"] for n in ran} >= {"ReSpecHistoryStore", "ReSpecDriftGuard", "ReSpecHistoryAppend",
                                                   "SaveImage"}


def test_an_output_node_on_the_editors_branch_would_run_it(pack):
    """The check above catches what it is for: a Preview Image of the editor's own picture makes ComfyUI
    run the sampler on every turn."""
    wf = copy.deepcopy(_api("conversational_flux2"))
    decoded = next(nid for nid, n in wf.items() if n["class_type"] == "VAEDecode")
    wf["9999"] = {"class_type": "PreviewImage", "inputs": {"images": [decoded, 0]}}
    ran = ran_on_an_answered_turn(wf, pack)
    assert "SamplerCustomAdvanced" in {wf[n]["class_type"] for n in ran}
