"""The benchmark loop in the simulated world: oracle masks in the loop, configs that differ for
the reasons the sim defines, reference accuracy against the recorded I_ref."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from respec.bench.runner import run_benchmark
from respec.bench.settings import BenchModels, BenchSettings
from respec.errors import InputError
from respec.sim import SimEditor

ROOT = Path(__file__).resolve().parent.parent
# A 5turn_v2 'remove' scenario whose first turn repaints the occludee (I_ref = I_1, I_0 is wrong),
# and a 2turn one (I_ref = I_0).
SCENARIOS = ["sim0019_camera_5turn_v2_remove", "sim0003_coffee_2turn_resize"]


class ChoosingController:
    """A controller at the edge: on restoration turns it names `pick(t)` as the restoration source."""

    name = "choosing-fake"

    def __init__(self, pick):
        self.pick = pick
        self.calls = 0

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        self.calls += 1
        t = sum(1 for p in parts if hasattr(p, "size"))      # images I_0..I_{t-1}
        if "restoration_source_id" in (system or ""):
            src = self.pick(t)
            return json.dumps({"restoration_source_id": src, "identity_anchor_id": t - 1,
                               "image_ids": [src, t - 1], "restoration_region": "the freed area",
                               "synthesis_instruction": "Do the edit, recovering the hidden content from the first image."})
        return json.dumps({"synthesis_instruction": "Do exactly the requested edit."})


@pytest.fixture(scope="module")
def scorer():
    from respec.eval.metric_models import build_tiny_scorer
    return build_tiny_scorer(0)


def _run(tmp_path, scorer, controller, configs="all"):
    settings = BenchSettings(dataset="occur_sim", out=str(tmp_path), configs=configs, editor="sim", size=128,
                             scenario_ids=SCENARIOS, save_images=False)
    models = BenchModels(editor=SimEditor(), backend=controller, scorer=scorer, masks="oracle",
                         describe={"controller": controller.name, "masks": "oracle: the sim editor's recorded layers",
                                   "scorer": "tiny"})
    rows = []
    run_benchmark(settings, models, on_row=rows.append)
    return {(r["scenario_id"], r["config"]): r for r in rows}


@pytest.mark.slow
def test_oracle_masks_hrs_copies_and_reference_accuracy_uses_the_recorded_reference(tmp_path, scorer):
    truth = {SCENARIOS[0]: 1, SCENARIOS[1]: 0}
    rows = _run(tmp_path, scorer, ChoosingController(lambda t: _TRUTH[t]))
    for sid in SCENARIOS:
        base, hrs, pti, full = (rows[(sid, c)] for c in ("baseline", "hrs", "pti", "respec"))
        assert base["masks_source"].startswith("oracle") and base["reference_truth"].startswith("sim world")
        assert hrs["S_restore"] > base["S_restore"]                    # copied vs re-invented
        assert pti["S_restore"] == base["S_restore"]                   # the sim reads no instruction text
        assert full["S_restore"] == hrs["S_restore"]
        assert hrs["reference_chosen"] == truth[sid] and hrs["reference_correct"] is True
        assert base["reference_correct"] is None


_TRUTH = {5: 1, 2: 0}   # the revelation turn t -> the true I_ref of that scenario (5 turns; 2 turns)


@pytest.mark.slow
def test_the_wrong_reference_is_counted_wrong_and_scores_lower(tmp_path, scorer):
    right = _run(tmp_path / "right", scorer, ChoosingController(lambda t: _TRUTH[t]), configs="hrs")
    wrong = _run(tmp_path / "wrong", scorer, ChoosingController(lambda t: 0), configs="hrs")
    key = (SCENARIOS[0], "hrs")
    assert wrong[key]["reference_chosen"] == 0 and wrong[key]["reference_correct"] is False
    assert wrong[key]["S_restore"] < right[key]["S_restore"]


def test_oracle_masks_need_the_sim_editor(tmp_path):
    with pytest.raises(InputError, match="--editor sim"):
        run_benchmark(BenchSettings(dataset="occur_sample", out=str(tmp_path), editor="flux2", masks="oracle",
                                    configs="baseline"))


@pytest.mark.slow
def test_the_report_says_which_masks_scorer_and_controller(tmp_path, scorer):
    from respec.bench.report import write_report
    _run(tmp_path, scorer, ChoosingController(lambda t: _TRUTH[t]), configs="baseline,hrs")
    text = Path(write_report(tmp_path / "results.jsonl", tmp_path / "report")["report"]).read_text()
    assert "Simulated editor" in text and "oracle: the sim editor's recorded layers" in text
    assert "References chosen by (controller): `choosing-fake`" in text
    assert "sim world (recorded I_ref)" in text


def test_table_7b_pairs_right_and_wrong_references_on_the_same_scenarios(tmp_path, scorer):
    from respec.bench.report import build_tables
    rows = list(_run(tmp_path, scorer, ChoosingController(lambda t: 0), configs="baseline,hrs").values())
    t7b = next(t for t in build_tables(rows) if t.name == "table7b_reference_right_wrong")
    by_group = {r[0]: r for r in t7b.csv_rows}
    # I_0 is right for the 2-turn scenario (I_ref = I_0), wrong for the 5-turn one (I_ref = I_1).
    right, wrong = by_group["reference right"], by_group["reference wrong"]
    assert right[2] == right[5] == 1 and wrong[2] == wrong[5] == 1          # one scenario each, both configs
    assert right[4] > right[1]                  # + HRS with the right reference beats the baseline


@pytest.mark.slow
def test_the_cli_runs_the_sim_world_with_detected_masks_and_the_tiny_models(tmp_path):
    r = subprocess.run([sys.executable, "-m", "respec", "bench", "--editor", "sim", "--masks", "detect", "--smoke",
                        "--size", "96", "--config", "baseline,hrs", "--scenario", SCENARIOS[1], "--out",
                        str(tmp_path), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {row["config"] for row in rows} == {"baseline", "hrs"}
    assert all(row["masks_source"].startswith("detect") for row in rows)
    assert all(row["controller"] in ("", "qwen3-vl (tiny, random weights)") for row in rows)
    assert re.search(r"masks detect", r.stdout)


def test_each_scenarios_image_is_read_once_and_images_shared_by_configs_are_saved_once(tmp_path, scorer,
                                                                                      monkeypatch):
    from respec.occur.scenario import Scenario
    reads = []
    real = Scenario.load_image
    monkeypatch.setattr(Scenario, "load_image", lambda self, *a, **kw: reads.append(self.id) or real(self, *a, **kw))
    settings = BenchSettings(dataset="occur_sim", out=str(tmp_path), configs="baseline,pti,hrs", editor="sim",
                             size=128, scenario_ids=SCENARIOS)
    models = BenchModels(editor=SimEditor(), backend=ChoosingController(lambda t: _TRUTH[t]), scorer=scorer,
                         masks="oracle", describe={"controller": "fake", "masks": "oracle", "scorer": "tiny"})
    rows = {}
    run_benchmark(settings, models, on_row=lambda r: rows.__setitem__((r["scenario_id"], r["config"]), r))
    assert sorted(reads) == sorted(SCENARIOS)                        # I_0 read and resized once per scenario
    for sid in SCENARIOS:
        base, pti, hrs = (rows[(sid, c)]["images"] for c in ("baseline", "pti", "hrs"))
        assert base == pti                     # the sim reads no instruction: the same images, the same files
        assert base[0] == hrs[0] and base[-1] != hrs[-1]            # I_0 shared; the copied reveal differs
        files = sorted(p.name for p in (tmp_path / "images" / sid).iterdir())
        assert files == sorted({Path(p).name for p in base + hrs})   # each distinct image written once
        assert all((tmp_path / p).is_file() for p in base + hrs)


def test_the_provenance_configs_pick_the_recorded_reference_with_no_vlm_call_and_reveal_restores(tmp_path, scorer):
    # The controller would pick I_0 (wrong for the 5-turn scenario): provenance does not ask it.
    vlm = ChoosingController(lambda t: 0)
    rows = _run(tmp_path, scorer, vlm, configs="respec,respec-prov,respec-prov+reveal,respec+reveal")
    for sid in SCENARIOS:
        prov, rev = rows[(sid, "respec-prov")], rows[(sid, "respec-prov+reveal")]
        assert prov["vlm_calls"] == rev["vlm_calls"] == 0
        assert prov["reference_correct"] is True and rev["reference_correct"] is True
        step = rev["turns"][-1]["post_edit"][0]
        assert step["step"] == "reveal_composite" and step["applied"], step
        assert rev["S_restore"] > prov["S_restore"]                      # I_{k-1}'s own pixels beat the copy
        # Reveal Composite after the VLM's (wrong for sim0019) reference still pastes I_{k-1}
        assert rows[(sid, "respec+reveal")]["turns"][-1]["post_edit"][0]["source_id"] == _TRUTH[
            len(rows[(sid, "respec")]["turns"])]
    assert rows[(SCENARIOS[0], "respec")]["reference_correct"] is False
    # Each row counts the controller calls its config made; respec and respec+reveal ask the same
    # questions (the reveal step only changes the last turn's image), so with shared prefixes
    # (respec.bench.prefix) the controller itself answers each question once.
    per_config = {c: sum(r["vlm_calls"] for (_, cc), r in rows.items() if cc == c) for c in ("respec", "respec+reveal")}
    assert per_config["respec"] == per_config["respec+reveal"] == vlm.calls > 0


def test_config_groups_and_variants():
    from respec.bench.configs import config_variant, parse_configs
    assert parse_configs("all") == ["baseline", "hrs", "pti", "respec"]
    assert parse_configs("prov") == ["respec-prov", "respec-prov+reveal", "respec-hybrid", "respec-hybrid+reveal"]
    assert parse_configs("reveal,baseline") == ["baseline", "hrs+reveal", "pti+reveal", "respec+reveal"]
    assert config_variant("respec", "provenance", True) == "respec-prov+reveal"
    assert config_variant("hrs", None, True) == "hrs+reveal"
    with pytest.raises(InputError, match="no config 'pti' with selector 'provenance'"):
        config_variant("pti", "provenance")
    with pytest.raises(InputError, match="unknown benchmark config 'turbo'"):
        parse_configs("turbo")



def test_the_sim_editors_measurements_reach_the_rows_through_its_hooks(tmp_path, scorer, monkeypatch):
    """The runner imports nothing of respec/sim: the untouched PSNR (every row) and the edit's
    fidelity after the Drift Guard (guard configs only) come from the SimEditor it was given."""
    import numpy as np
    import respec.bench.runner as runner
    from respec.occur.scenario import load_dataset
    from respec.sim.measures import untouched_psnr, untouched_region
    scenario = next(s for s in load_dataset("occur_sim") if s.id == SCENARIOS[1])
    settings = BenchSettings(dataset="occur_sim", out=str(tmp_path), configs="baseline,baseline+guard", editor="sim",
                             size=128, scenario_ids=[scenario.id], save_images=False)
    models = BenchModels(editor=SimEditor(), backend=ChoosingController(lambda t: _TRUTH[t]), scorer=scorer,
                         masks="oracle", describe={"controller": "fake", "masks": "oracle", "scorer": "tiny"})
    finals, rows = {}, {}
    real_run_turns = runner.run_turns

    def run_turns(sc, config, *a, **kw):    # keeps each config's history to measure it here
        finals[config.name] = history = real_run_turns(sc, config, *a, **kw)
        return history
    monkeypatch.setattr(runner, "run_turns", run_turns)
    run_benchmark(settings, models, on_row=lambda r: rows.__setitem__(r["config"], r))
    assert set(rows) == {"baseline", "baseline+guard"}
    for cname, row in rows.items():
        i0 = np.asarray(finals[cname].image(0).array)
        region = untouched_region(scenario, (i0.shape[1], i0.shape[0]))
        assert row["untouched_psnr"] is not None
        assert row["untouched_psnr"] == untouched_psnr(i0, finals[cname].current.image.array, region)
    fidelity = [p for t in rows["baseline+guard"]["turns"] for p in t["post_edit"] if p["step"] == "sim_edit_fidelity"]
    assert len(fidelity) == scenario.num_turns
    assert not any(p["step"] == "sim_edit_fidelity" for t in rows["baseline"]["turns"] for p in t["post_edit"])
