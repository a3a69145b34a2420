"""The benchmark nodes as ComfyUI calls them: scenario loader, turn, turn switch, scenario masks,
results writer."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import core


@pytest.fixture()
def nodes(pack):
    import importlib
    return importlib.import_module(f"{pack.__name__}.nodes.bench_nodes")


@pytest.fixture(scope="module")
def masker(pack):
    """One tiny YOLO-World + SAM for the module: building it takes seconds."""
    return core(pack, "eval.masks").build_tiny_masker(0, imgsz=64)


def _load(nodes, index=0, dataset="occur_sample", max_side=96):
    return nodes.ReSpecScenarioLoader.execute(dataset, index, max_side).result


def test_the_loader_gives_the_scenario_its_image_and_annotations(pack, nodes):
    scen_mod = core(pack, "occur.scenario")
    ds = scen_mod.load_dataset("occur_sample")
    idx = [s.id for s in ds].index("coffee_5t_v3_replace")
    scenario, image, n, occluder, ref, labels, info = _load(nodes, idx)
    assert isinstance(scenario, scen_mod.Scenario) and scenario.id == "coffee_5t_v3_replace"
    assert tuple(image.shape) == (1, 64, 96, 3) and float(image.max()) <= 1.0
    assert (n, occluder, ref) == (5, "napkin", 2)
    assert labels.splitlines() == ["cookie", "-", "-", "vase", "fork"]
    data = json.loads(info)
    assert data["reference_distance"] == 3 and data["template"] == "5turn_v3" and data["index"] == idx


def test_the_loader_joins_several_occluders(nodes, pack):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    idx = [s.id for s in ds].index("chelsea_2t_multi")
    assert _load(nodes, idx)[3] == "rubber duck, mug"


def test_an_index_past_the_last_scenario_is_an_error_that_says_how_many_there_are(pack, nodes):
    n = len(core(pack, "occur.scenario").load_dataset("occur_sample"))
    with pytest.raises(core(pack, "errors").InputError, match=f"{n} scenarios"):
        _load(nodes, n)


def _datasets_dir(pack):
    d = core(pack, "paths").datasets_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_the_loader_reruns_when_the_dataset_file_changes(nodes, pack):
    p = _datasets_dir(pack) / "set.json"
    data = json.loads(core_sample_text())
    p.write_text(json.dumps(data))
    before = nodes.ReSpecScenarioLoader.fingerprint_inputs("set.json", 0, 96)
    data["scenarios"][0]["notes"] = "edited"
    p.write_text(json.dumps(data))
    assert nodes.ReSpecScenarioLoader.fingerprint_inputs("set.json", 0, 96) != before
    assert nodes.ReSpecScenarioLoader.fingerprint_inputs("set.json", 1, 96) != nodes.ReSpecScenarioLoader.fingerprint_inputs("set.json", 0, 96)


def _one_scenario_set(image_ref: str) -> str:
    data = json.loads(core_sample_text())
    data["scenarios"] = [dict(data["scenarios"][0], image=image_ref)]
    return json.dumps(data)


def test_the_loader_reads_a_dataset_and_its_image_from_the_datasets_folder(nodes, pack):
    from PIL import Image
    d = _datasets_dir(pack)
    (d / "mine").mkdir()
    Image.new("RGB", (80, 64), (10, 200, 30)).save(d / "mine" / "photo.png")
    (d / "mine" / "set.json").write_text(_one_scenario_set("photo.png"))
    for name in ("mine/set.json", str(d / "mine" / "set.json")):
        _, image, *_ = _load(nodes, 0, dataset=name)
        assert tuple(image.shape) == (1, 80, 96, 3)  # longer side 96, multiples of 16
        assert abs(float(image[0, 10, 10, 1]) - 200 / 255) < 0.02


@pytest.mark.parametrize("outside", ["../elsewhere.json", "/etc/passwd", "sub/../../elsewhere.json", "link.json"])
def test_the_loader_refuses_a_dataset_outside_the_datasets_folder(nodes, pack, tmp_path, outside):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(core_sample_text())
    (_datasets_dir(pack) / "link.json").symlink_to(elsewhere)
    with pytest.raises(core(pack, "errors").InputError, match="outside"):
        _load(nodes, 0, dataset=outside)


@pytest.mark.parametrize("absolute", [False, True])
def test_the_loader_refuses_a_scenario_image_outside_the_datasets_folder(nodes, pack, tmp_path, absolute):
    from PIL import Image
    secret = tmp_path / "secret.png"
    Image.new("RGB", (64, 64)).save(secret)
    d = _datasets_dir(pack)
    ref = str(secret) if absolute else "../" * len(d.relative_to(tmp_path).parts) + "secret.png"
    (d / "set.json").write_text(_one_scenario_set(ref))
    with pytest.raises(core(pack, "errors").InputError, match="image .*outside"):
        _load(nodes, 0, dataset="set.json")


def core_sample_text() -> str:
    from pathlib import Path
    return (Path(__file__).resolve().parent.parent / "respec/bench/samples/occur_sample.json").read_text()


def test_a_turn_gives_its_instruction_and_ground_truth_flags(nodes):
    scenario = _load(nodes, 0)[0]
    turn = nodes.ReSpecScenarioTurn
    assert turn.execute(scenario, 1).result == (scenario.turns[0].instruction, False, True, "", "O")
    assert turn.execute(scenario, 2).result == (scenario.turns[1].instruction, True, True, "", "R")


def test_a_turn_beyond_the_scenario_does_not_exist(nodes):
    scenario = _load(nodes, 0)[0]
    assert scenario.num_turns == 2
    assert nodes.ReSpecScenarioTurn.execute(scenario, 3).result == ("", False, False, "", "")


def test_the_turn_switch_never_asks_for_a_missing_turns_chain(pack, nodes):
    History = core(pack, "history").History
    before = History.start(np.zeros((8, 8, 3), np.uint8))
    after = before.append(np.ones((8, 8, 3), np.uint8), "x")
    sw = nodes.ReSpecTurnSwitch
    assert sw.check_lazy_status(False, before, None) == []
    assert sw.execute(False, before, None).result == (before,)
    assert sw.check_lazy_status(True, before, None) == ["history_after"]
    assert sw.check_lazy_status(True, before, after) == []
    assert sw.execute(True, before, after).result == (after,)
    assert nodes.ReSpecTurnSwitch.INPUT_TYPES()["required"]["history_after"][1]["lazy"] is True


def _history_for(pack, scenario, chosen=None, hrs=True):
    """A generated history made as a benchmark graph makes it: each turn's Reference Selector
    image_ids go into History Append's editor_image_ids (turn 1 here has no plan: its slot
    records [0] in the meta, as the baseline graph does)."""
    import importlib
    selector = importlib.import_module(f"{pack.__name__}.nodes.controller_nodes").ReSpecReferenceSelector()
    append = importlib.import_module(f"{pack.__name__}.nodes.history_nodes").ReSpecHistoryAppend
    to_comfy = importlib.import_module(f"{pack.__name__}.nodes.common").images_to_comfy
    History = core(pack, "history").History
    Plan = core(pack, "plan").Plan
    rng = np.random.default_rng(0)
    h = History.start(rng.integers(0, 256, (64, 96, 3), dtype=np.uint8))
    for t, turn in enumerate(scenario.turns, start=1):
        image = to_comfy([rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)])
        if t == 1:
            h, _ = append.execute(h, image, turn.instruction,
                                  meta=json.dumps({"seed": 5, "editor_image_ids": [0]})).result
            continue
        plan = Plan(turn=t, user_instruction=turn.instruction, synthesis_instruction="rewritten " + turn.instruction,
                    is_restoration=scenario.is_restoration(t), vlm_called=True, controller="qwen3-vl:test",
                    restoration_source_id=chosen if scenario.is_restoration(t) else None,
                    image_ids=(chosen, t - 1) if scenario.is_restoration(t) and chosen is not None else (),
                    vlm_calls=1)
        ids = selector.execute(h, plan, hrs).result[2]
        h, _ = append.execute(h, image, turn.instruction, plan.synthesis_instruction, plan, '{"seed": 5}', ids).result
    return h


@pytest.mark.slow
def test_the_scenario_masks_node_masks_every_turn_with_each_occluder(pack, nodes, masker):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("chelsea_2t_multi")
    tm, occ, new, records = nodes.ReSpecScenarioMasks.execute(masker, _history_for(pack, scenario), scenario).result
    assert len(tm.occ) == 2 and tuple(occ.shape) == (2, 64, 96) and tuple(new.shape) == (2, 64, 96)
    assert "other_occluders" in json.loads(records)["records"][0]


@pytest.mark.slow
def test_the_scenario_masks_node_refuses_a_history_of_another_length(pack, nodes, masker):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    with pytest.raises(core(pack, "errors").InputError, match="2 turns"):
        nodes.ReSpecScenarioMasks.execute(masker, _history_for(pack, ds.by_id("coffee_3t_move")),
                                          ds.by_id("chelsea_2t_multi"))


SCORE = {"S_restore": 0.4, "S_preserve": 0.6, "S_TC": 0.5, "restore": {"psnr_db": 20.0}, "preserve": {},
         "whole_image": {}, "areas": {"R_restore": 0.12, "R_preserve": 0.7}, "reasons": []}


def _writer(nodes, unique_id):
    """The Results Writer as ComfyUI calls it: a class clone holding the call's hidden unique_id."""
    return nodes.ReSpecResultsWriter.PREPARE_CLASS_CLONE({"hidden_inputs": {nodes.io.Hidden.unique_id: unique_id}})


def test_the_results_writer_appends_one_row_in_the_output_folder(pack, nodes):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("coffee_3t_move")
    hist = _history_for(pack, scenario, chosen=0)
    events = []
    remove = core(pack, "comfy").add_listener(lambda name, data: events.append((name, data)))
    try:
        out = _writer(nodes, "7").execute(scenario, hist, json.dumps(SCORE), "respec", "flux2",
                                          "bench/results.jsonl", "")
    finally:
        remove()
    assert [d["node"] for n, d in events if n == "respec.bench.row"] == ["7"]
    row = json.loads(out.ui["respec_results"][0])
    path = core(pack, "comfy").output_dir() / "bench" / "results.jsonl"
    assert out.result[1] == str(path) and path.is_file()
    assert row["written"] is True and row["S_TC"] == 0.5 and row["restore_area_ratio"] == 0.12
    assert row["reference_chosen"] == 0 and row["reference_correct"] is True
    assert row["vlm_calls"] == 2 and row["controller"] == "qwen3-vl:test" and row["config"] == "respec"
    assert row["editor_reference_ids"] == [0, 2] and row["reference_distance"] == 3
    again = _writer(nodes, "7").execute(scenario, hist, json.dumps(SCORE), "respec", "flux2",
                                        "bench/results.jsonl", "")
    assert json.loads(again.result[0])["written"] is False
    assert len(path.read_text().splitlines()) == 1


def test_the_results_writer_averages_per_turn_judge_records(pack, nodes):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("coffee_3t_move")
    judges = json.dumps([{"S_IF": 1.0, "score": 3}, {"S_IF": 1 / 3, "score": 1}, {"S_IF": None, "score": None}])
    out = nodes.ReSpecResultsWriter.execute(scenario, _history_for(pack, scenario, chosen=1), json.dumps(SCORE),
                                            "baseline", "flux2", "b/r.jsonl", judges)
    row = json.loads(out.result[0])
    assert row["S_IF"] == pytest.approx(2 / 3) and row["S_IF_turns"][2] is None and row["judge_calls"] == 3


def test_the_results_writer_only_writes_inside_the_output_folder(pack, nodes, tmp_path):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds[0]
    hist = _history_for(pack, scenario)
    InputError = core(pack, "errors").InputError
    out = core(pack, "paths").results_dir()
    out.mkdir(parents=True)
    (tmp_path / "target").mkdir()
    (out / "link").symlink_to(tmp_path / "target")
    for bad in ("/tmp/x.jsonl", "../x.jsonl", "bench/results.txt", "link/r.jsonl"):
        with pytest.raises(InputError, match="inside|outside"):
            nodes.ReSpecResultsWriter.execute(scenario, hist, json.dumps(SCORE), "respec", "flux2", bad, "")
    assert list((tmp_path / "target").iterdir()) == []


def test_the_results_writer_refuses_an_incomplete_history(pack, nodes):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("coffee_3t_move")
    short = _history_for(pack, ds.by_id("chelsea_2t_multi"))
    with pytest.raises(core(pack, "errors").InputError, match="3 turns"):
        nodes.ReSpecResultsWriter.execute(scenario, short, json.dumps(SCORE), "respec", "flux2",
                                          "bench/results.jsonl", "")


def test_the_results_writer_reports_what_the_editor_got_under_each_config(pack, nodes):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("coffee_3t_move")
    ids = {}
    for config, hrs in (("respec", True), ("pti", False)):
        hist = _history_for(pack, scenario, chosen=0, hrs=hrs)
        out = nodes.ReSpecResultsWriter.execute(scenario, hist, json.dumps(SCORE), config, "flux2",
                                                f"b/{config}.jsonl", "")
        row = json.loads(out.result[0])
        ids[config] = row["editor_reference_ids"]
        assert [t["is_restoration"] for t in row["turns"]] == [False, False, True]
        assert [t["stage"] for t in row["turns"]] == ["O", "M", "R"]
    assert ids == {"respec": [0, 2], "pti": [2]}


def test_the_results_writer_says_none_where_a_history_did_not_record_the_editors_images(pack, nodes):
    ds = core(pack, "occur.scenario").load_dataset("occur_sample")
    scenario = ds.by_id("coffee_3t_move")
    History = core(pack, "history").History
    h = History.start(np.zeros((64, 96, 3), np.uint8))
    for turn in scenario.turns:       # appended without the selector's ids: nothing is guessed
        h = h.append(np.ones((64, 96, 3), np.uint8), turn.instruction)
    row = json.loads(nodes.ReSpecResultsWriter.execute(scenario, h, json.dumps(SCORE), "respec", "flux2",
                                                       "b/none.jsonl", "").result[0])
    assert row["editor_reference_ids"] is None and [t["editor_image_ids"] for t in row["turns"]] == [None] * 3
