"""Shared prefixes: a scenario's configs compute their identical turns once, and the rows are the
same as when every config runs from scratch."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from respec.bench.prefix import SharedPrefix
from respec.bench.results import ResultsFile
from respec.bench.runner import run_benchmark
from respec.bench.settings import BenchSettings
from respec.bench.shards import comparable, differences
from respec.bench.sim_models import load_sim_models


class CountingEditor:
    name = "counting"

    def __init__(self):
        self.calls = 0
        self.last_run = {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.calls += 1
        self.last_run = {"seed": seed, "call": self.calls}
        value = (seed + len(instruction) + int(np.asarray(images[0]).sum())) % 256
        return Image.new("RGB", output_size, (value, 0, 0))


def test_an_identical_edit_runs_once_and_replays_the_editors_record():
    editor = CountingEditor()
    shared = SharedPrefix().editor(editor)
    img = Image.new("RGB", (8, 8), (1, 2, 3))
    a = shared.edit([img], "add a cat", output_size=(8, 8), seed=3)
    first_record = dict(editor.last_run)
    shared.edit([Image.new("RGB", (8, 8), (9, 9, 9))], "add a cat", output_size=(8, 8), seed=3)
    b = shared.edit([img.copy()], "add a cat", output_size=(8, 8), seed=3)   # same pixels, another object
    assert editor.calls == 2
    assert np.array_equal(np.asarray(a), np.asarray(b))
    assert editor.last_run == first_record
    shared.edit([img], "add a cat", output_size=(8, 8), seed=4)             # another seed is another edit
    assert editor.calls == 3


def test_a_different_reference_image_is_a_different_edit():
    editor = CountingEditor()
    prefix = SharedPrefix()
    shared = prefix.editor(editor)
    cur, ref = Image.new("RGB", (8, 8), (1, 2, 3)), Image.new("RGB", (8, 8), (4, 5, 6))
    shared.edit([cur], "remove it", output_size=(8, 8), seed=1)
    shared.edit([ref, cur], "remove it", output_size=(8, 8), seed=1)
    assert editor.calls == 2 and prefix.counts["edits_shared"] == 0


def test_identical_controller_requests_are_answered_once():
    class Backend:
        name = "b"
        calls = 0

        def chat(self, parts, **kw):
            self.calls += 1
            return f"answer {self.calls}"

    backend = Backend()
    prefix = SharedPrefix()
    shared = prefix.controller(backend)
    parts = ["Image 0:", Image.new("RGB", (4, 4)), "history"]
    assert shared.chat(parts, system="s", max_new_tokens=5) == "answer 1"
    assert shared.chat(list(parts), system="s", max_new_tokens=5) == "answer 1"
    assert shared.chat(parts, system="other", max_new_tokens=5) == "answer 2"
    assert shared.name == "b" and backend.calls == 2
    assert prefix.counts == {"edits_run": 0, "edits_shared": 0, "vlm_calls_run": 2, "vlm_calls_shared": 1,
                             "scores_run": 0, "scores_shared": 0}


def test_identical_final_images_and_masks_share_one_score():
    from respec.eval.masks import TrajectoryMasks
    prefix = SharedPrefix()
    masks = TrajectoryMasks([np.zeros((4, 4), bool)], [np.ones((4, 4), bool)], [{}], "box", [1])
    other = TrajectoryMasks([np.ones((4, 4), bool)], [np.ones((4, 4), bool)], [{}], "box", [1])
    calls = []

    def score():
        calls.append(1)
        return {"S_TC": len(calls)}
    first = prefix.score("final", "ref", masks, "baseline", score)
    again = prefix.score("final", "ref", masks, "pti", score)
    assert first == ({"S_TC": 1}, None) and again == ({"S_TC": 1}, "baseline") and len(calls) == 1
    assert prefix.score("final", "ref", other, "hrs", score) == ({"S_TC": 2}, None), "other masks: scored again"
    assert prefix.score("final2", "ref", masks, "hrs", score)[1] is None
    assert prefix.counts["scores_run"] == 3 and prefix.counts["scores_shared"] == 1


def _run(tmp_path, name, **kw):
    settings = BenchSettings(dataset="occur_sample", out=str(tmp_path / name), configs=["baseline", "hrs", "pti",
                             "respec"], **kw)
    summary = run_benchmark(settings, sim_world=load_sim_models)
    assert not summary.failed, summary.failed
    return summary, {r["key"]: r for r in ResultsFile(tmp_path / name / "results.jsonl").rows()}


@pytest.mark.slow
def test_sharing_prefixes_gives_the_rows_of_separate_runs_in_the_sim_world(tmp_path):
    on, rows_on = _run(tmp_path, "shared", editor="sim", size=128, limit=4, share_prefix=True)
    off, rows_off = _run(tmp_path, "separate", editor="sim", size=128, limit=4, share_prefix=False)
    assert rows_on.keys() == rows_off.keys() and len(rows_on) == 16
    for key in rows_on:
        assert differences(comparable(rows_on[key]), comparable(rows_off[key])) == [], key
    total_edits = sum(r["num_turns"] for r in rows_on.values())
    assert off.work["edits_shared"] == 0
    assert on.work["edits_run"] + on.work["edits_shared"] == total_edits
    # turn 1 is shared by all four configs, so at least 3 edits per scenario are saved
    assert on.work["edits_shared"] >= 3 * 4
    assert on.work["vlm_calls_run"] < on.work["vlm_calls_run"] + on.work["vlm_calls_shared"]
    # rows with the same final image and masks share their score, and say whose it is
    shared = [r for r in rows_on.values() if r.get("scores_shared_with")]
    assert shared and on.work["scores_shared"] == len(shared) and off.work.get("scores_shared", 0) == 0
    assert not any(r.get("scores_shared_with") for r in rows_off.values())
    for r in shared:
        first = rows_on[r["key"].replace(f"|{r['config']}|", f"|{r['scores_shared_with']}|")]
        assert first["S_TC"] == r["S_TC"] and not first.get("scores_shared_with")


@pytest.mark.slow
def test_sharing_prefixes_gives_the_rows_of_separate_runs_with_the_tiny_klein(tmp_path):
    # The real diffusers pipeline and the real Qwen3-VL generate path: deterministic for given
    # inputs and seed, which is what makes a shared turn equal to a recomputed one.
    kw = dict(editor="flux2", smoke=True, size=64, steps=1, scenario_ids=["coffee_3t_move"])
    on, rows_on = _run(tmp_path, "shared", share_prefix=True, **kw)
    _, rows_off = _run(tmp_path, "separate", share_prefix=False, **kw)
    assert rows_on.keys() == rows_off.keys() and len(rows_on) == 4
    for key in rows_on:
        assert differences(comparable(rows_on[key]), comparable(rows_off[key])) == [], key
    assert on.work["edits_shared"] > 0 and on.work["vlm_calls_shared"] > 0
