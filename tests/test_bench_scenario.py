"""The OCCUR scenario format: validation rules (errors name file, scenario and field), the
derived facts, image references, and the shipped sample set."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from respec.occur import scenario as sc
from respec.occur.scenario import (REVELATION_TYPES, TEMPLATES, ScenarioError, load_dataset, validate_dataset)

ROOT = Path(__file__).resolve().parent.parent


def _scenario(**over):
    s = {"id": "s1", "image": "skimage:astronaut", "revelation_type": "remove", "occluders": ["box"],
         "occludee": "mission patch", "reference_turn": 0,
         "turns": [{"instruction": "Add a big box on the left.", "stage": "O"},
                   {"instruction": "Remove the box.", "stage": "R"}]}
    s.update(over)
    return s


def _dataset(*scenarios, **over):
    d = {"format": "occur-scenarios", "version": 1, "name": "t", "scenarios": list(scenarios) or [_scenario()]}
    d.update(over)
    return d


def _write(tmp_path, data, name="set.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def _problems(tmp_path, data) -> tuple[ScenarioError, Path]:
    p = _write(tmp_path, data)
    with pytest.raises(ScenarioError) as ei:
        load_dataset(p)
    return ei.value, p


def test_an_error_names_the_file_the_scenario_and_the_field(tmp_path):
    bad = _scenario(id="astro-1")
    bad["turns"][1]["stage"] = "X"
    err, path = _problems(tmp_path, _dataset(bad))
    msg = str(err)
    assert str(path) in msg and "'astro-1'" in msg and "turns[1].stage" in msg
    assert ("astro-1", "turns[1].stage") in [(s, f) for s, f, _ in err.problems]


def test_unknown_fields_are_refused_at_every_level(tmp_path):
    s = _scenario(colour="red")
    s["turns"][0]["mask"] = "x"
    err, _ = _problems(tmp_path, _dataset(s, extra=1))
    fields = {f for _, f, _ in err.problems}
    assert {"extra", "colour", "turns[0].mask"} <= fields


def test_every_problem_is_reported_not_only_the_first(tmp_path):
    a = _scenario(id="a", revelation_type="explode")
    b = _scenario(id="b", reference_turn=5)
    err, _ = _problems(tmp_path, _dataset(a, b))
    assert {("a", "revelation_type"), ("b", "reference_turn")} <= {(s, f) for s, f, _ in err.problems}


def test_required_fields_are_required(tmp_path):
    s = _scenario()
    del s["occluders"], s["reference_turn"]
    err, _ = _problems(tmp_path, _dataset(s))
    assert {"occluders", "reference_turn"} <= {f for _, f, _ in err.problems}


def test_scenario_ids_are_unique(tmp_path):
    err, _ = _problems(tmp_path, _dataset(_scenario(), _scenario()))
    assert any(f == "id" and "unique" in m for _, f, m in err.problems)


def test_a_scenario_has_one_occlusion_before_one_final_revelation(tmp_path):
    for stages in (["O", "O", "R"], ["O", "R", "M"], ["R", "O"], ["M", "R"]):
        s = _scenario(turns=[{"instruction": f"Edit {i}.", "stage": st} for i, st in enumerate(stages)])
        err, _ = _problems(tmp_path, _dataset(s))
        assert any(f == "turns" for _, f, _ in err.problems), stages


def test_the_template_is_derived_from_the_stages_and_a_wrong_one_is_refused(tmp_path):
    ds = validate_dataset(_dataset(), "mem")
    assert ds[0].template == "2turn"
    err, _ = _problems(tmp_path, _dataset(_scenario(template="3turn")))
    assert any(f == "template" and "'OMR'" in m for _, f, m in err.problems)


def test_every_table_3_template_is_accepted():
    for name, stages in TEMPLATES.items():
        occ = stages.index("O")
        turns = [{"instruction": f"Do thing {i}.", "stage": st} for i, st in enumerate(stages)]
        ref = 1 if stages.startswith("S") else occ  # latest image before the occlusion
        ds = validate_dataset(_dataset(_scenario(id=name, template=name, turns=turns, reference_turn=ref)), "mem")
        assert ds[0].template == name and ds[0].stages == stages


def test_instructions_never_ask_for_restoration(tmp_path):
    s = _scenario()
    s["turns"][1]["instruction"] = "Remove the box and restore what was behind it."
    err, _ = _problems(tmp_path, _dataset(s))
    assert any(f == "turns[1].instruction" and "restor" in m for _, f, m in err.problems)


def test_instructions_from_the_occlusion_on_never_name_the_occludee(tmp_path):
    s = _scenario()
    s["turns"][0]["instruction"] = "Add a big box over the mission patch."
    err, _ = _problems(tmp_path, _dataset(s))
    assert any(f == "turns[0].instruction" and "occludee" in m for _, f, m in err.problems)


def test_a_turn_before_the_occlusion_may_edit_the_occludee():
    s = _scenario(reference_turn=1, turns=[
        {"instruction": "Make the mission patch green.", "stage": "M"},
        {"instruction": "Add a big box on the left.", "stage": "O"},
        {"instruction": "Add a cat.", "stage": "M", "new_objects": ["cat"]},
        {"instruction": "Remove the box.", "stage": "R"}], template="custom")
    ds = validate_dataset(_dataset(s), "mem")
    assert ds[0].template == "custom" and ds[0].reference_turn == 1


def test_the_reference_lies_before_the_occlusion(tmp_path):
    err, _ = _problems(tmp_path, _dataset(_scenario(reference_turn=1)))
    assert any(f == "reference_turn" and "before the occlusion" in m for _, f, m in err.problems)


def test_a_style_turn_invalidates_earlier_references(tmp_path):
    turns = [{"instruction": "Make it a watercolor.", "stage": "S"},
             {"instruction": "Add a big box.", "stage": "O"},
             {"instruction": "Add a cat.", "stage": "M"},
             {"instruction": "Remove the box.", "stage": "R"}]
    err, _ = _problems(tmp_path, _dataset(_scenario(turns=turns, reference_turn=0)))
    assert any(f == "reference_turn" and "restyles" in m for _, f, m in err.problems)


def test_multi_needs_several_occluders_and_the_others_exactly_one(tmp_path):
    err, _ = _problems(tmp_path, _dataset(_scenario(id="m", revelation_type="multi"),
                                          _scenario(id="r", occluders=["a", "b"])))
    got = {(s, f) for s, f, _ in err.problems}
    assert ("m", "occluders") in got and ("r", "occluders") in got


def test_a_replace_revelation_names_its_replacement_object(tmp_path):
    s = _scenario(revelation_type="replace")
    s["turns"][1]["instruction"] = "Replace the box with a lamp."
    err, _ = _problems(tmp_path, _dataset(s))
    assert any(f == "turns[1].new_objects" for _, f, _ in err.problems)
    s["turns"][1]["new_objects"] = ["lamp"]
    assert validate_dataset(_dataset(s), "mem")[0].revelation_type == "replace"


def test_an_occluder_is_not_also_a_new_object(tmp_path):
    s = _scenario()
    s["turns"][0]["new_objects"] = ["box"]
    err, _ = _problems(tmp_path, _dataset(s))
    assert any(f == "turns[0].new_objects" for _, f, _ in err.problems)


def test_an_unknown_packaged_image_or_a_missing_file_is_refused(tmp_path):
    err, _ = _problems(tmp_path, _dataset(_scenario(id="a", image="skimage:nope"),
                                          _scenario(id="b", image="photos/missing.png")))
    got = {(s, f) for s, f, _ in err.problems}
    assert ("a", "image") in got and ("b", "image") in got


def test_derived_facts_follow_the_paper():
    turns = [{"instruction": "Make the shirt red.", "stage": "M"},
             {"instruction": "Add a big box.", "stage": "O"},
             {"instruction": "Add a hat.", "stage": "M", "new_objects": ["hat"]},
             {"instruction": "Add a cat.", "stage": "M", "new_objects": ["cat"]},
             {"instruction": "Remove the box.", "stage": "R"}]
    s = validate_dataset(_dataset(_scenario(turns=turns, reference_turn=1)), "mem")[0]
    assert s.num_turns == 5 and s.template == "5turn_v2"
    assert s.occlusion_turn == 2 and s.restoration_turn == 5
    assert s.reference_distance == 4            # D.2: turns between I_ref and the revelation
    assert [s.is_restoration(t) for t in range(1, 7)] == [False, False, False, False, True, False]
    assert s.new_labels_per_turn() == [[], [], ["hat"], ["hat", "cat"], ["hat", "cat"]]


def test_relative_image_paths_resolve_against_the_dataset_file(tmp_path):
    (tmp_path / "img").mkdir()
    Image.fromarray(np.full((40, 70, 3), 200, np.uint8)).save(tmp_path / "img" / "a.png")
    p = _write(tmp_path, _dataset(_scenario(image="img/a.png")))
    s = load_dataset(p)[0]
    im = s.load_image(max_side=128)
    assert im.mode == "RGB" and im.size == (128, 80)   # 128 x 73 rounded to multiples of 16


def test_packaged_images_load_without_download_and_greyscale_becomes_rgb():
    for ref in ("skimage:camera", "skimage:coffee", "matplotlib:grace_hopper.jpg"):
        im = sc.load_image_ref(ref)
        assert im.mode == "RGB" and min(im.size) > 100


def test_sizes_are_multiples_of_16_and_at_least_64():
    assert sc.fit_size((451, 300), 96) == (96, 64)
    assert sc.fit_size((600, 400), 0) == (608, 400)
    assert sc.fit_size((100, 20), 128) == (128, 64)


def test_a_packaged_set_is_found_by_name_and_an_unknown_name_is_explained():
    assert sc.resolve_dataset("occur_sample").name == "occur_sample.json"
    with pytest.raises(sc.InputError, match="occur_sample"):
        sc.resolve_dataset("no_such_set")


def test_the_sample_set_validates_and_covers_every_template_and_revelation_type():
    ds = load_dataset("occur_sample")
    assert len(ds) >= 12
    assert {s.template for s in ds} == set(TEMPLATES)
    assert {s.revelation_type for s in ds} == set(REVELATION_TYPES)
    assert {s.num_turns for s in ds} == {2, 3, 4, 5}


def test_every_sample_reference_is_the_latest_image_before_the_occlusion():
    """A.4: I_ref is the latest image where the occludee is visible and valid; in the sample set every
    turn before the occlusion either restyles the picture or edits the occludee, so that is k - 1."""
    for s in load_dataset("occur_sample"):
        assert s.reference_turn == s.occlusion_turn - 1, s.id
        if s.reference_turn:
            assert s.turns[s.reference_turn - 1].stage in ("S", "M"), s.id


def test_every_sample_photo_has_a_recorded_source_and_licence():
    ds = load_dataset("occur_sample")
    for s in ds:
        assert s.image in ds.sources, s.id
        assert ds.sources[s.image]["licence"]


def test_every_sample_image_loads():
    for s in load_dataset("occur_sample"):
        assert s.load_image(64).size[0] >= 64


def test_the_json_schema_file_describes_the_same_fields_as_the_validator():
    schema = json.loads((ROOT / "respec/bench/scenario.schema.json").read_text())
    assert set(schema["properties"]) == sc.DATASET_FIELDS
    assert schema["additionalProperties"] is False
    defs = schema["$defs"]
    assert set(defs["scenario"]["properties"]) == sc.SCENARIO_FIELDS
    assert set(defs["turn"]["properties"]) == sc.TURN_FIELDS
    assert set(schema["properties"]["sources"]["additionalProperties"]["properties"]) == sc.SOURCE_FIELDS
    assert defs["scenario"]["properties"]["revelation_type"]["enum"] == list(REVELATION_TYPES)
    assert defs["turn"]["properties"]["stage"]["enum"] == list(sc.STAGES)
    assert set(defs["scenario"]["properties"]["template"]["enum"]) == set(TEMPLATES) | {"custom"}


def test_a_file_that_is_not_json_names_the_file(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(ScenarioError, match="broken.json"):
        load_dataset(p)


def test_a_scenario_round_trips_through_to_dict():
    ds = load_dataset("occur_sample")
    data = {"format": "occur-scenarios", "version": 1, "name": ds.name, "sources": ds.sources,
            "scenarios": [s.to_dict() for s in ds]}
    again = validate_dataset(copy.deepcopy(data), "mem", Path(ds.path).parent)
    assert [s.to_dict() for s in again] == [s.to_dict() for s in ds]
