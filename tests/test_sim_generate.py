"""Scenario geometry (validated like every other field) and the scenario generator (figures 9-10)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from respec.occur.scenario import REVELATION_TYPES, TEMPLATES, ScenarioError, load_dataset, validate_dataset
from respec.sim.generate import (TWO_TURN_EXTENSION, TWO_TURN_GENERATION, cell_counts, check_vlm_turns,
                                 generate_scenarios, shipped_photo_refs)

ROOT = Path(__file__).resolve().parent.parent


def _raw(**over):
    s = {"id": "g", "image": "skimage:astronaut", "revelation_type": "remove", "occluders": ["crate"],
         "occludee": "mission patch", "reference_turn": 0, "occludee_box": [0.3, 0.45, 0.6, 0.75],
         "turns": [{"instruction": "Add a crate.", "stage": "O",
                    "actions": [{"do": "add", "label": "crate", "box": [0.25, 0.4, 0.65, 0.8]}]},
                   {"instruction": "Remove the crate.", "stage": "R", "actions": [{"do": "remove", "label": "crate"}]}]}
    s.update(over)
    return s


def _fields(raw) -> set[str]:
    with pytest.raises(ScenarioError) as ei:
        validate_dataset({"format": "occur-scenarios", "scenarios": [raw]})
    return {f for _, f, _ in ei.value.problems}


def test_geometry_is_optional_and_round_trips():
    s = validate_dataset({"format": "occur-scenarios", "scenarios": [_raw()]})[0]
    assert s.has_geometry and s.turns[0].actions[0].do == "add"
    again = validate_dataset({"format": "occur-scenarios", "scenarios": [s.to_dict()]})[0]
    assert again == s
    plain = _raw()
    del plain["occludee_box"]
    for t in plain["turns"]:
        del t["actions"]
    assert not validate_dataset({"format": "occur-scenarios", "scenarios": [plain]})[0].has_geometry


def test_geometry_is_all_or_nothing():
    raw = _raw()
    del raw["turns"][1]["actions"]
    assert "turns" in _fields(raw)
    raw = _raw()
    del raw["occludee_box"]
    assert "occludee_box" in _fields(raw)


def test_unknown_action_fields_and_bad_boxes_are_refused():
    raw = _raw()
    raw["turns"][0]["actions"][0]["angle"] = 3
    raw["occludee_box"] = [0.6, 0.4, 0.3, 0.8]
    assert {"turns[0].actions[0].angle", "occludee_box"} <= _fields(raw)


def test_an_occlusion_must_cover_the_occludee_and_a_revelation_must_uncover_it():
    raw = _raw()
    raw["turns"][0]["actions"][0]["box"] = [0.0, 0.0, 0.1, 0.1]
    assert "turns[0].actions" in _fields(raw)
    raw = _raw(revelation_type="resize")
    raw["turns"][1]["actions"] = [{"do": "resize", "label": "crate", "box": [0.25, 0.4, 0.65, 0.79]}]
    assert "turns[1].actions" in _fields(raw)       # barely smaller: nothing of the occludee comes out


def test_actions_must_match_the_stage_the_labels_and_the_revelation_type():
    raw = _raw()
    raw["turns"][1]["actions"] = [{"do": "move", "label": "crate", "box": [0.0, 0.0, 0.4, 0.4]}]
    assert "turns[1].actions" in _fields(raw)          # a 'remove' scenario moves
    raw = _raw()
    raw["turns"].insert(1, {"instruction": "Add a kite.", "stage": "M", "new_objects": ["kite"],
                            "actions": [{"do": "add", "label": "kite", "box": [0.35, 0.5, 0.45, 0.6]}]})
    assert "turns[1].actions" in _fields(raw)          # an intermediate object on the occludee


def test_the_schema_describes_the_geometry_fields():
    schema = json.loads((ROOT / "respec/bench/scenario.schema.json").read_text())
    assert "occludee_box" in schema["$defs"]["scenario"]["properties"]
    assert "actions" in schema["$defs"]["turn"]["properties"]
    assert set(schema["$defs"]["action"]["properties"]) == {"do", "label", "box", "by", "color", "style"}


# ------------------------------------------------------------------------------ the generator

def test_generated_scenarios_validate_and_cover_every_template_and_revelation_type(tmp_path):
    data = generate_scenarios(shipped_photo_refs(), 45, seed=3)
    counts = cell_counts(data["scenarios"])
    assert set(counts) == {(t, r) for t in TEMPLATES for r in REVELATION_TYPES}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    ds = load_dataset(path)
    assert len(ds) == 45 and all(s.has_geometry for s in ds)
    for s in ds:
        assert s.reference_turn == s.occlusion_turn - 1
        assert not any(s.occludee.lower() in t.instruction.lower() for t in s.turns[s.occlusion_turn - 1:])


def test_the_same_seed_gives_the_same_file_and_another_seed_another():
    refs = shipped_photo_refs()
    assert generate_scenarios(refs, 12, seed=1) == generate_scenarios(refs, 12, seed=1)
    assert generate_scenarios(refs, 12, seed=1) != generate_scenarios(refs, 12, seed=2)


def test_the_shipped_sim_set_covers_every_cell_with_reference_distances_2_to_5():
    ds = load_dataset("occur_sim")
    assert len(ds) >= 60
    assert set(cell_counts(ds)) == {(t, r) for t in TEMPLATES for r in REVELATION_TYPES}
    assert {s.reference_distance for s in ds} == {2, 3, 4, 5}


class FakeVLM:
    """A backend at the edge: answers each prompt with canned JSON for the turns the prompt asks
    about (or with `broken` text) and records what it was asked."""

    name = "fake"
    CANNED = [("Add a red kite in the sky.", "kite"), ("Make the lamp on the wall blue.", ""),
              ("Add a small owl on the left.", "owl"), ("Add a cup.", "cup")]

    def __init__(self, broken: str | None = None):
        self.broken = broken
        self.asked = []

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        import re
        self.asked.append(parts)
        if self.broken is not None:
            return self.broken
        a, b = (int(x) for x in re.search(r"turn (\d+) and turn (\d+)", parts[1]).groups())
        first = "edits so far" not in parts[1]
        (i1, o1), (i2, o2) = self.CANNED[0:2] if first else self.CANNED[2:4]
        return json.dumps({f"instruction_turn{a}": i1, f"new_object_turn{a}": o1,
                           f"instruction_turn{b}": i2, f"new_object_turn{b}": o2})


def _five_turn_v1(data):
    return [s for s in data["scenarios"] if s["template"] == "5turn_v1"]


@pytest.mark.slow
def test_the_vlm_writes_valid_intermediate_turns_and_they_get_geometry():
    vlm = FakeVLM()
    data = generate_scenarios(shipped_photo_refs(), 9, seed=5, backend=vlm)
    s = _five_turn_v1(data)[0]
    texts = [t["instruction"] for t in s["turns"]]
    assert "Add a red kite in the sky." in texts and "Add a small owl on the left." in texts
    kite = next(t for t in s["turns"] if t["instruction"].startswith("Add a red kite"))
    assert kite["new_objects"] == ["kite"] and kite["actions"][0]["do"] == "add"
    prompts = [p[1] for p in vlm.asked]
    assert any("turn 2" in p and "occluder" in p for p in prompts)       # generation (figure 9)
    assert any("edits so far" in p for p in prompts)                     # extension (figure 10)
    assert hasattr(vlm.asked[0][0], "size")                              # shown the image with the occluder


@pytest.mark.parametrize("answer,why", [
    ("not json", "no JSON"),
    (json.dumps({"instruction_turn2": "Remove the crate.", "instruction_turn3": "Add a hat."}), "place, size or shape"),
    (json.dumps({"instruction_turn2": "Restore the patch.", "instruction_turn3": "Add a hat."}), "asks for something back"),
    (json.dumps({"instruction_turn2": "Paint the mission patch gold.", "instruction_turn3": "Add a hat."}), "names the occludee"),
])
def test_invalid_vlm_answers_are_refused_with_the_reason(answer, why):
    ok, reasons = check_vlm_turns(answer, (2, 3), "crate", "mission patch")
    assert any(why in r for r in reasons)


@pytest.mark.slow
def test_a_failed_vlm_answer_falls_back_to_word_lists_and_the_notes_say_why():
    data = generate_scenarios(shipped_photo_refs(), 9, seed=5, backend=FakeVLM(broken="no json here"))
    notes = " ".join(s["notes"] for s in data["scenarios"])
    assert "no JSON object" in notes and "word lists instead" in notes


def test_the_prompts_follow_figures_9_and_10():
    for p in (TWO_TURN_GENERATION, TWO_TURN_EXTENSION):
        assert "occluder" in p and "JSON" in p and "position, size or shape" in p
        assert "Adding" not in p   # our own wording, not the paper's text


@pytest.mark.slow
def test_the_tiny_qwen3_vl_runs_the_vlm_path(tmp_path):
    from respec.controller import load_backend
    from respec.tiny.vlm import build_tiny_qwen3vl
    folder = build_tiny_qwen3vl(tmp_path / "qwen")
    backend = load_backend("qwen3-vl", str(folder), max_new_tokens=16)
    data = generate_scenarios(shipped_photo_refs(), 2, seed=0, backend=backend)
    assert len(data["scenarios"]) == 2 and "VLM" in data["description"] or "instructions" in data["description"]


@pytest.mark.slow
def test_the_cli_generates_from_a_photo_folder_and_validate_accepts_it(tmp_path):
    from PIL import Image
    import numpy as np
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)).save(photos / f"p{i}.png")
    out = tmp_path / "set" / "gen.json"
    run = lambda *a: subprocess.run([sys.executable, "-m", "respec", *a], cwd=ROOT, capture_output=True,  # noqa: E731
                                    text=True, timeout=300)
    r = run("scenarios", "generate", "--photos", str(photos), "--count", "10", "--out", str(out), "--seed", "4")
    assert r.returncode == 0, r.stderr
    assert "| 2turn |" in r.stdout
    v = run("validate", str(out))
    assert v.returncode == 0 and "10 valid scenarios" in v.stdout
    data = json.loads(out.read_text())
    assert all(s["image"].startswith("../photos/") for s in data["scenarios"])


def test_regenerating_the_shipped_sim_set_gives_a_relocatable_file_equal_to_the_shipped_one(tmp_path, capsys):
    from respec.__main__ import main
    out = tmp_path / "elsewhere" / "occur_sim.json"
    assert main(["scenarios", "generate", "--count", "63", "--seed", "0", "--name", "occur_sim",
                 "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    # no path of this machine: neither the checkout, nor the output folder, nor any absolute path
    assert str(ROOT) not in text and str(tmp_path) not in text and '"/' not in text
    data = json.loads(text)
    assert {s["image"] for s in data["scenarios"]} <= {f"sample:{p.name}" for p in
                                                       (ROOT / "respec/bench/samples/photos").iterdir()}
    assert set(data["sources"]) == {s["image"] for s in data["scenarios"]}
    shipped = json.loads((ROOT / "respec/bench/samples/occur_sim.json").read_text(encoding="utf-8"))
    assert data == shipped   # the shipped file is this command's output (docs/sim.md); regenerate it on drift
    moved = tmp_path / "moved" / "again.json"     # the file still loads, images included, once moved
    moved.parent.mkdir()
    out.rename(moved)
    ds = load_dataset(moved)
    assert len(ds) == 63 and ds.scenarios[0].load_image().size[0] > 0


@pytest.mark.parametrize("ref", ["sample:../occur_sim.json", "sample:nope.png", "sample:photos/astronaut.png",
                                 "sample:/etc/passwd"])
def test_a_sample_reference_names_only_a_shipped_photo(ref):
    raw = {"format": "occur-scenarios", "scenarios": [_raw(image=ref)]}
    with pytest.raises(ScenarioError, match="shipped photo"):
        validate_dataset(raw)


def test_the_shipped_conversation_set_is_the_generators_output_and_repeats_itself(tmp_path):
    from respec.__main__ import main
    out = tmp_path / "occur_conversation.json"
    assert main(["scenarios", "generate", "--kind", "conversation", "--count", "12", "--seed", "0",
                 "--name", "occur_conversation", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data == json.loads((ROOT / "respec/bench/samples/occur_conversation.json").read_text(encoding="utf-8"))
    ds = load_dataset("occur_conversation")
    readd = [s for s in ds if s.id.endswith("_readd")]
    two = [s for s in ds if s.id.endswith("_two_objects")]
    assert len(readd) == len(two) == 6
    for s in readd:     # added off the occludee, removed, added again over it, removed: I_ref is I_2
        assert [t.stage for t in s.turns] == list("MMOR") and s.reference_turn == 2
        assert [a.do for t in s.turns for a in t.actions] == ["add", "remove", "add", "remove"]
    for s in two:       # two objects of one kind, the request names the occluder by its material
        assert s.turns[-1].instruction.startswith("Remove the wooden")


def test_an_intermediate_turn_removes_only_an_object_an_intermediate_turn_added():
    from respec.occur.geometry import parse_actions, validate_geometry
    box, occ = (0.1, 0.1, 0.4, 0.4), (0.6, 0.6, 0.9, 0.9)
    acts = [parse_actions([{"do": "add", "label": "kite", "box": list(box)}], "a", []),
            parse_actions([{"do": "remove", "label": "kite"}], "a", []),
            parse_actions([{"do": "add", "label": "crate", "box": [0.55, 0.55, 0.95, 0.95]}], "a", []),
            parse_actions([{"do": "remove", "label": "crate"}], "a", [])]
    assert validate_geometry(occ, "MMOR", acts, [("kite",), (), (), ()], ("crate",), "remove") == []
    bad = [acts[2], parse_actions([{"do": "remove", "label": "crate"}], "a", []), acts[3]]
    problems = validate_geometry(occ, "OMR", bad, [(), (), ()], ("crate",), "remove")
    assert any("an occluder" in m for _, m in problems)
