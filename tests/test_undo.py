"""History first (issue 43): a request that takes back what an earlier turn added is answered from
the history (respec/pixels/undo.py, respec/post_edit/undo_step.py, TurnSwitches.history_first in
respec/turn.py's run_turn), exactly, and the editor is not run."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from respec.controller.provenance_selector import selector_parts
from respec.errors import InputError
from respec.history import History
from respec.pixels.alignment import Alignment, warp_float
from respec.pixels.masks import dilate
from respec.pixels.undo import UNDO_SOURCE, UndoParams, repeat_from_history, undo_from_history
from respec.post_edit.undo_step import added_object_phrase, same_request, takes_back
from respec.turn import TurnParts, TurnSwitches, run_turn
from synthetic_scenes import background, drift, moved, rect_mask, u8

SHAPE = (96, 128)
HAT = (16, 20, 44, 60)          # (y0, x0, y1, x1)
FAR = (60, 90, 86, 120)         # far from the hat
AGAIN = (50, 20, 76, 56)        # the second hat, elsewhere
NEXT_TO_HAT = (46, 24, 56, 56)  # 2 px below the hat: inside its blend margin, outside its change


class ScriptedEditor:
    """Returns the image the test prepared for this turn (`next`), at the asked size; records calls."""

    name = "scripted"

    def __init__(self):
        self.calls, self.next, self.last_run = [], None, {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.calls.append(instruction)
        return Image.fromarray(self.next).resize(output_size) if self.next.shape[1::-1] != output_size \
            else Image.fromarray(self.next)


def paint(box, colour, seed):
    """An edit that paints `box` and drifts the rest a little (noise below the change threshold)."""
    def op(cur):
        out = cur.astype(np.float64) / 255.0
        out[rect_mask(SHAPE, box)] = colour
        return u8(drift(out, gain=(1, 1, 1), bias=(0, 0, 0), noise=0.003, seed=seed))
    return op


def unpaint(scene, box, seed):
    """A removal as an editor makes it: the box re-invented (the scene blurred flat there), drift."""
    def op(cur):
        out = cur.astype(np.float64) / 255.0
        m = rect_mask(SHAPE, box)
        out[m] = scene[m].mean(axis=0)
        return u8(drift(out, gain=(1, 1, 1), bias=(0, 0, 0), noise=0.003, seed=seed))
    return op


def converse(turns, history_first=True, restoring=("remove", "undo")):
    """Run (request, op) turns through run_turn (the provenance planner, no post-edit steps); the
    editor returns op(I_{t-1}). (history, records, editor)."""
    scene = background(3, SHAPE)
    editor = ScriptedEditor()
    planner, selector = selector_parts("provenance")
    parts = TurnParts(editor=editor, planner=planner, selector=selector)
    h, records = History.start(u8(scene)), []
    for t, (request, op) in enumerate(turns, start=1):
        editor.next = op(h.current.image.array)
        record, h = run_turn(h, request, parts, TurnSwitches(history_first=history_first),
                             is_restoration=any(w in request.lower() for w in restoring), seed=t)
        records.append(record)
    return h, records, editor, scene


RED, BLUE, GREEN = (0.85, 0.1, 0.1), (0.1, 0.2, 0.9), (0.1, 0.8, 0.2)


def _undo_entry(record):
    return next(e for e in record.post_edit if e["step"] == "history_undo")


def test_add_then_remove_gives_back_the_image_before_the_addition_exactly_and_the_editor_is_not_run():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Remove the hat", unpaint(scene, HAT, 2))])
    assert np.array_equal(h.image(2).array, h.image(0).array)
    assert editor.calls == ["Add a hat to the person"]          # the removal never reached the editor
    assert records[1].editor_was_run is False and records[1].edited is None
    assert h.current.meta["editor_run"] is False and h.current.meta["editor_image_ids"] == []
    assert UNDO_SOURCE in h.current.masks and _undo_entry(records[1])["applied"] is True


def test_the_record_says_in_words_what_was_taken_back_and_that_the_editor_was_not_run():
    scene = background(3, SHAPE)
    _, records, _, _ = converse([("Put a hat on the person", paint(HAT, RED, 1)),
                                 ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                                 ("Remove the hat", unpaint(scene, HAT, 3))])
    assert _undo_entry(records[2])["words"] == ("taken back from history: the hat added at turn 1; "
                                                "the editor was not run")
    assert "editor_run" not in records[0].meta() and records[2].meta()["editor_run"] is False


def test_only_the_region_the_addition_covered_comes_from_before_it_a_later_edit_elsewhere_stays():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                                      ("Remove the hat", unpaint(scene, HAT, 3))])
    hat, far = rect_mask(SHAPE, HAT), rect_mask(SHAPE, FAR)
    assert len(editor.calls) == 2
    assert np.array_equal(h.image(3).array[hat], h.image(0).array[hat])      # exact, not a composite
    assert np.array_equal(h.image(3).array[far], h.image(2).array[far])      # turn 2's frame is kept
    assert _undo_entry(records[2])["exact"] is True


def test_turn_k_is_taken_back_whole_its_drift_below_the_change_threshold_too():
    scene = background(3, SHAPE)
    h, _, _, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                           ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                           ("Remove the hat", unpaint(scene, HAT, 3))])
    drifted = np.any(h.image(1).array != h.image(0).array, axis=-1)       # what turn 1 changed at all
    elsewhere = drifted & ~dilate(rect_mask(SHAPE, HAT) | rect_mask(SHAPE, FAR), 8)
    assert elsewhere.sum() > 100
    assert np.array_equal(h.image(3).array[elsewhere], h.image(0).array[elsewhere])   # taken back too


def test_add_remove_add_again_remove_takes_back_the_second_addition():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Remove the hat", unpaint(scene, HAT, 2)),
                                      ("Add a blue hat to the person", paint(AGAIN, BLUE, 3)),
                                      ("Add a green frame in the corner", paint(FAR, GREEN, 4)),
                                      ("Remove the hat", unpaint(scene, AGAIN, 5))])
    again, far = rect_mask(SHAPE, AGAIN), rect_mask(SHAPE, FAR)
    assert _undo_entry(records[4])["covering_turn"] == 3 and _undo_entry(records[4])["source_id"] == 2
    assert np.array_equal(h.image(5).array[again], h.image(2).array[again])
    assert np.array_equal(h.image(5).array[far], h.image(4).array[far])
    assert editor.calls == ["Add a hat to the person", "Add a blue hat to the person",
                            "Add a green frame in the corner"]


def test_a_request_asked_again_of_the_same_picture_gets_the_same_answer_and_the_editor_is_not_run():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Remove the hat", unpaint(scene, HAT, 2)),
                                      ("add a hat to the person.", paint(AGAIN, BLUE, 3)),   # case, full stop
                                      ("Remove the hat", unpaint(scene, AGAIN, 4))])
    assert np.array_equal(h.image(2).array, h.image(0).array)         # the exact undo: I_2 is I_0
    assert np.array_equal(h.image(3).array, h.image(1).array)         # turn 1's answer, not a new drawing
    assert editor.calls == ["Add a hat to the person"]
    entry = _undo_entry(records[2])
    assert entry["method"] == "history-repeat-v1" and entry["covering_turn"] == 1 and entry["source_id"] == 1
    assert entry["words"].startswith("repeated from history: turn 1 asked the same of the same picture")
    assert records[2].editor_was_run is False and h.current.meta["editor_run"] is False
    assert h.turns[3].masks[UNDO_SOURCE].info["method"] == "history-repeat-v1"
    # the repeated turn is an addition like any other: its removal is taken back from history
    assert _undo_entry(records[3])["method"] == "history-undo-v1" and _undo_entry(records[3])["covering_turn"] == 3
    assert np.array_equal(h.image(4).array, h.image(0).array)


@pytest.mark.parametrize("third", ["Add a blue hat to the person",     # other words: the editor draws it
                                   "Add a green frame in the corner"])
def test_another_request_on_the_same_picture_goes_to_the_editor(third):
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Remove the hat", unpaint(scene, HAT, 2)),
                                      (third, paint(AGAIN, BLUE, 3))])
    assert editor.calls == ["Add a hat to the person", third]
    assert _undo_entry(records[2])["applied"] is False


def test_the_same_request_on_another_picture_goes_to_the_editor_and_the_switch_off_always_does():
    scene = background(3, SHAPE)
    # turn 2 changed the picture elsewhere: I_2 is not I_0, so turn 1's answer would drop the frame
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                                      ("Add a hat to the person", paint(AGAIN, BLUE, 3))])
    assert len(editor.calls) == 3 and _undo_entry(records[2])["applied"] is False
    _, _, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                ("Remove the hat", unpaint(scene, HAT, 2)),
                                ("Add a hat to the person", paint(AGAIN, BLUE, 3))], history_first=False)
    assert len(editor.calls) == 3


def test_repeat_from_history_refuses_another_picture_and_a_turn_out_of_range():
    scene = background(3, SHAPE)
    h, _, _, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                           ("Add a green frame in the corner", paint(FAR, GREEN, 2))])
    res = repeat_from_history(h, 1)
    assert res.applied is False and "I_2 is not I_0" in res.reason and res.image is None
    with pytest.raises(InputError, match="one of 1..2"):
        repeat_from_history(h, 3)
    assert same_request("Add a hat, please!", "add a hat please") and not same_request("", "")


def test_a_later_turn_that_changed_part_of_the_region_sends_the_turn_to_the_editor_and_says_why():
    scene = background(3, SHAPE)
    overlap = (30, 40, 56, 80)       # a scarf over the hat's lower right part
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Add a scarf to the person", paint(overlap, GREEN, 2)),
                                      ("Remove the hat", unpaint(scene, HAT, 3))])
    entry = _undo_entry(records[2])
    assert editor.calls[-1].startswith("Remove the hat") and records[2].editor_was_run is True
    assert entry["applied"] is False and entry["reason"].startswith("history could not answer")
    assert "turn 2 changed" in entry["reason"] and "2" in entry["touched_by"]
    assert "editor_run" not in h.current.meta


def test_the_region_is_grown_by_the_blend_margin_a_change_just_beside_the_addition_counts():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Add a green scarf to the person", paint(NEXT_TO_HAT, GREEN, 2)),
                                      ("Remove the hat", unpaint(scene, HAT, 3))])
    assert _undo_entry(records[2])["applied"] is False and editor.calls[-1].startswith("Remove the hat")
    # with no margin, the same history would have answered (the scarf does not touch C_1 itself)
    before = h.rewind(2)
    assert undo_from_history(before, 1, UndoParams(margin_frac=0.0, min_margin_px=0)).applied
    assert not undo_from_history(before, 1).applied


def test_the_switch_off_is_todays_turn_the_editor_runs_and_nothing_is_recorded():
    scene = background(3, SHAPE)
    h, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Remove the hat", unpaint(scene, HAT, 2))], history_first=False)
    assert len(editor.calls) == 2 and editor.calls[1].startswith("Remove the hat")
    assert all(e["step"] != "history_undo" for e in records[1].post_edit)
    assert "editor_run" not in h.current.meta and records[1].editor_was_run is True
    assert np.array_equal(h.image(2).array, unpaint(scene, HAT, 2)(h.image(1).array))
    assert set(records[1].seconds) == {"controller", "select", "rewrite", "editor", "provenance"}


def test_a_request_that_adds_or_moves_is_not_taken_back():
    scene = background(3, SHAPE)
    _, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Move the hat to the left", paint(AGAIN, RED, 2))], restoring=("move",))
    assert editor.calls[-1].startswith("Move the hat") and records[1].editor_was_run is True
    assert _undo_entry(records[1])["applied"] is False


def test_when_the_frame_moved_since_the_source_is_warped_into_the_current_frame():
    scene = background(3, SHAPE)
    i0 = u8(scene)

    def add_and_shift(cur):      # the editor adds the hat and shifts the whole picture by (3, 2) px
        out = cur.astype(np.float64) / 255.0
        out[rect_mask(SHAPE, HAT)] = RED
        return u8(moved(out, dx=3.0, dy=2.0))

    h, records, editor, _ = converse([("Add a hat to the person", add_and_shift),
                                      ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                                      ("Remove the hat", unpaint(scene, HAT, 3))])
    entry = _undo_entry(records[2])
    assert entry["applied"] is True and entry["exact"] is False and len(editor.calls) == 2
    a = Alignment.from_record(entry["alignment"])
    assert abs(a.dx - 3.0) < 0.5 and abs(a.dy - 2.0) < 0.5
    hat_now = np.zeros(SHAPE, bool)
    hat_now[HAT[0] + 6:HAT[2] - 2, HAT[1] + 7:HAT[3] - 2] = True      # the hat's interior in the moved frame
    want = np.clip(np.round(warp_float(i0, a, order=3) * 255), 0, 255)
    got = h.image(3).array.astype(np.float64)
    assert np.abs(got[hat_now] - want[hat_now]).max() <= 1.0
    assert np.abs(got[hat_now] - np.asarray(RED) * 255).mean() > 40     # no red left


def test_takes_back_and_the_object_in_its_own_words():
    assert takes_back("undo the hat") and takes_back("take the glasses back") and not takes_back("add a hat")
    scene = background(3, SHAPE)
    h, _, _, _ = converse([("Add a red ball on the floor", paint(HAT, RED, 1))])
    assert added_object_phrase(h, 1) == "red ball"


def test_the_covering_turn_must_be_an_earlier_edit():
    scene = background(3, SHAPE)
    h, _, _, _ = converse([("Add a hat to the person", paint(HAT, RED, 1))])
    with pytest.raises(InputError):
        undo_from_history(h, 2)
    with pytest.raises(InputError):
        UndoParams(margin_frac=-0.1)
    with pytest.raises(InputError):
        TurnSwitches(history_first="yes")


def test_the_benchmark_config_skips_the_edit_counts_it_and_the_report_has_its_own_table(tmp_path):
    from respec.bench.report import build_tables
    from respec.bench.runner import run_benchmark
    from respec.bench.settings import BenchModels, BenchSettings
    from respec.eval.metric_models import build_tiny_scorer
    from respec.sim import SimEditor
    sid = "sim0028_grace_hopper_2turn_remove"      # add, then remove: answered from history
    settings = BenchSettings(dataset="occur_sim", out=str(tmp_path), editor="sim", size=128, scenario_ids=[sid],
                             configs="respec-prov+reveal+guard,respec-prov+undo+reveal+guard", save_images=False)
    models = BenchModels(editor=SimEditor(), backend=None, scorer=build_tiny_scorer(0), masks="oracle",
                         describe={"controller": "none", "masks": "oracle", "scorer": "tiny"})
    rows = []
    run_benchmark(settings, models, on_row=rows.append)
    by = {r["config"]: r for r in rows}
    undo, today = by["respec-prov+undo+reveal+guard"], by["respec-prov+reveal+guard"]
    assert undo["edits_skipped"] == 1 and "edits_skipped" not in today     # old configs' rows keep their keys
    assert undo["turns"][-1]["editor_run"] is False and "editor_run" not in today["turns"][-1]
    assert undo["S_restore"] >= today["S_restore"] - 1e-9 and undo["vlm_calls"] == 0
    tables = {t.name: t for t in build_tables(rows)}
    beyond = tables["table_beyond"]
    assert [r[1] for r in beyond.md_rows] == ["respec-prov+reveal+guard", "respec-prov+undo+reveal+guard"]
    assert beyond.md_rows[1][4] == "1 of 2 turns"
    assert not tables["table2_ablation"].md_rows       # the paper's tables hold the paper's configs only


def test_the_main_job_runs_the_beyond_group_by_default_real_editors_keep_the_papers_four():
    from argparse import Namespace
    from respec.__main__ import _config_spec
    from respec.bench.configs import parse_configs
    sim = Namespace(config=None, editor="sim", selector=None, reveal_composite=False)
    assert parse_configs(_config_spec(sim)) == ["baseline", "hrs", "pti", "respec", "respec-prov+reveal+guard",
                                                "respec-prov+undo+reveal+guard"]
    assert _config_spec(Namespace(config=None, editor="flux2", selector=None, reveal_composite=False)) == "all"
    assert _config_spec(Namespace(config="respec", editor="sim", selector=None, reveal_composite=False)) == "respec"


def test_a_turn_that_added_two_things_or_a_request_that_asks_for_more_goes_to_the_editor():
    scene = background(3, SHAPE)
    # turn 1 added two objects: taking it back whole would remove the frame too
    _, records, editor, _ = converse([("Add a hat to the person and a green frame in the corner",
                                       lambda cur: paint(FAR, GREEN, 9)(paint(HAT, RED, 1)(cur))),
                                      ("Remove the hat", unpaint(scene, HAT, 2))])
    assert records[1].editor_was_run and "did more than add the hat" in _undo_entry(records[1])["reason"]
    # the removal comes with a move: the editor must do the move
    _, records, editor, _ = converse([("Add a hat to the person", paint(HAT, RED, 1)),
                                      ("Add a green frame in the corner", paint(FAR, GREEN, 2)),
                                      ("Remove the hat and make the sky brighter", unpaint(scene, HAT, 3))])
    assert records[2].editor_was_run and "also asks for 'make the sky brighter'" in _undo_entry(records[2])["reason"]


def test_a_warped_answer_refuses_when_the_add_turn_redrew_blocks_beyond_its_edit():
    """A re-rendering editor's add turn (its change record marks blocks it redrew far from the hat)
    that also moved the frame: I_0's blocks warped into the re-rendered rest would leave a block
    patchwork, so the history does not answer (seen on a real Gemini chain); without the redrawn
    blocks the same turn is answered."""
    from respec.history import CHANGE, TurnMask
    from respec.pixels.analysis_cache import CACHE
    i0 = u8(background(3, SHAPE))
    a = Alignment(dx=3.0, dy=2.0)
    hat = rect_mask(SHAPE, HAT)
    i1 = i0.astype(np.float64) / 255.0
    i1[hat] = RED
    i1 = u8(moved(i1, dx=3.0, dy=2.0))
    hat_now = warp_float(hat.astype(np.float64), a, order=0) > 0.5

    def answer(grid):
        info = {"alignment": a.record(), "fraction": float(hat_now.mean()), "unstable_grid": grid}
        h = History.start(i0).append(i1, "Add a hat to the person", meta={"alignment": a.record()},
                                     masks={CHANGE: TurnMask.from_mask(hat_now, info)})
        CACHE.clear()
        return undo_from_history(h, 1, UndoParams(latest_whole=False))

    calm = answer(["0000", "0000", "0000", "0000"])
    assert calm.applied and not calm.exact
    redrawn = answer(["0000", "0000", "0001", "0001"])     # the lower right quarter, far from the hat
    assert not redrawn.applied and "redrew" in redrawn.reason and "block" in redrawn.reason
