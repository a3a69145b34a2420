"""scripts/bench/bench_harm.py's core on a tiny synthetic conversation built here (the real pairs and
chains are not in the repository): a row per turn saying which step changed the editor's picture, a
step that stepped aside because its verification failed is flagged with its check and counted per
editor, the undo figure on removal turns, the --before comparison, and clear errors for a wrong
folder or an earlier run that is not one."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from PIL import Image

from conftest import load_script
from respec.errors import InputError
from synthetic_scenes import background, drift, rect_mask, u8

SHAPE = (96, 128)
HAT = (16, 20, 44, 60)          # (y0, x0, y1, x1)


def _harm():
    return load_script("scripts/bench/bench_harm.py")


def _conversation(harm, folder):
    """I_0, "add a hat" (a red box, the rest drifting a little), "remove the hat" (the box re-invented
    flat, drift): a ConvergeBench-like chain whose removal's answer is I_0."""
    scene = background(3, SHAPE)
    added = scene.copy()
    added[rect_mask(SHAPE, HAT)] = (0.85, 0.1, 0.1)
    added = drift(added, gain=(1, 1, 1), bias=(0, 0, 0), noise=0.003, seed=1)
    removed = added.copy()
    m = rect_mask(SHAPE, HAT)
    removed[m] = scene[m].mean(axis=0)
    removed = drift(removed, gain=(1, 1, 1), bias=(0, 0, 0), noise=0.003, seed=2)
    paths = []
    for i, img in enumerate((scene, added, removed)):
        paths.append(folder / f"t{i}.png")
        Image.fromarray(u8(img)).save(paths[-1])
    return harm.Conversation("Synthetic", "convergebench_synthetic_hat", "chain", paths[0], tuple(paths[1:]),
                             ("Add a hat to the person", "Remove the hat from the person"), convergebench=True)


def test_a_row_per_turn_says_the_undo_changed_the_removal_and_its_figure_against_i0(tmp_path):
    harm = _harm()
    conv = _conversation(harm, tmp_path)
    (tmp_path / "out" / "sheets").mkdir(parents=True)
    (tmp_path / "out" / "kept").mkdir()
    rows, flags = harm.run([conv], tmp_path / "out", history_first=True)
    assert [r["turn"] for r in rows] == [1, 2] and flags == []
    removal = rows[1]
    assert removal["changed_by"] == "undo" and removal["undo"] == "applied" and removal["editor_called"] == 0
    assert removal["reveal"] == "-" and removal["guard"] == "-"              # not run after an undo
    assert float(removal["kept_db"]) == 100.0 and float(removal["editor_db"]) < 60.0
    assert rows[0]["kept_db"] == ""                                          # turn 1 is not a removal
    sheet = Image.open(tmp_path / "out" / removal["sheet"])
    assert sheet.width > 4 * SHAPE[1] and sheet.height > SHAPE[0]            # four labelled panels
    kept = np.asarray(Image.open(tmp_path / "out" / "kept" / "convergebench_synthetic_hat_t2.png"))
    assert np.array_equal(kept, np.asarray(Image.open(conv.source)))


def test_the_add_asked_again_after_the_undo_is_counted_as_a_repeat_and_keeps_turn_1s_picture(tmp_path):
    harm = _harm()
    conv = _conversation(harm, tmp_path)
    again = tmp_path / "t3.png"
    Image.open(conv.outputs[0]).save(again)          # the editor's recorded add, once more
    conv = harm.Conversation(conv.editor, conv.name, conv.kind, conv.source, conv.outputs + (again,),
                             conv.instructions + (conv.instructions[0],), convergebench=True)
    rows, _ = harm.run([conv], None, history_first=True)
    assert [r["changed_by"] for r in rows][1:] == ["undo", "repeat"] and rows[2]["editor_called"] == 0
    assert "repeat" in harm.editor_counts(rows)[0]


def test_history_first_off_sends_the_removal_to_the_editor(tmp_path):
    harm = _harm()
    rows, _ = harm.run([_conversation(harm, tmp_path)], None, history_first=False)
    assert rows[1]["undo"] == "-" and rows[1]["editor_called"] == 1 and rows[1]["changed_by"] != "undo"


def test_a_step_that_stepped_aside_for_its_verification_is_flagged_with_its_check_per_editor(tmp_path):
    harm = _harm()
    conv = _conversation(harm, tmp_path)
    import chat_replay
    turns = list(chat_replay.replay(Image.open(conv.source).convert("RGB"),
                                    [Image.open(p).convert("RGB") for p in conv.outputs], list(conv.instructions),
                                    history_first=False))
    guard = next(e for e in turns[0].record.post_edit if e["step"] == "drift_guard")
    failed = [{"check": "frame_border", "detail": "old pixels outside the frame"}]
    guard.update(applied=False, verify={"passed": False, "mended": False, "failed": failed})
    reveal = next(e for e in turns[1].record.post_edit if e["step"] == "reveal_composite")
    reveal["verify"] = {"passed": True, "mended": True,      # Reveal's record spreads its checks: verify on top
                        "failed": [{"check": "islands", "detail": "a sliver joined the edit"}]}
    i0 = np.asarray(Image.open(conv.source).convert("RGB"))
    (row1, flags1), (row2, flags2) = (harm.turn_row(conv, rt, i0, f"sheets/t{rt.t}.png") for rt in turns)
    assert row1["guard"] == "aside" and row1["failed_checks"] == "guard:frame_border"
    assert flags1 == [{"editor": "Synthetic", "sequence": conv.name, "turn": 1, "step": "guard",
                       "check": "frame_border", "detail": "old pixels outside the frame", "sheet": "sheets/t1.png"}]
    assert flags2 == [] and row2["mended"] == "reveal"          # a mend that passed is not a step aside
    table = "\n".join(harm.editor_counts([row1, row2]))
    assert "| Synthetic | 2 |" in table and "| 1 | frame_border 1 |" in table and "islands" not in table
    text = harm.summary([row1, row2], flags1, True, 1.0)
    assert "(1 turns, 1 failed checks)" in text
    assert "turn 1: guard stepped aside: frame_border (old pixels outside the frame) -> sheets/t1.png" in text


def test_before_counts_the_convergebench_turns_the_pack_still_changes():
    harm = _harm()
    before = [{"sequence": "convergebench_a", "turn": "1", "changed_by": "guard"},
              {"sequence": "convergebench_a", "turn": "2", "changed_by": "undo"},
              {"sequence": "convergebench_a", "turn": "3", "changed_by": "none"},
              {"sequence": "mcedit_x", "turn": "1", "changed_by": "guard"}]
    now = [{"sequence": "convergebench_a", "turn": 1, "changed_by": "none", "failed_checks": "guard:seams",
            "guard": "aside", "guard_reason": "the result failed its verification", "reveal_reason": ""},
           {"sequence": "convergebench_a", "turn": 2, "changed_by": "undo", "failed_checks": "",
            "guard_reason": "", "reveal_reason": ""},
           {"sequence": "convergebench_a", "turn": 3, "changed_by": "guard", "failed_checks": "",
            "guard_reason": "", "reveal_reason": ""},
           {"sequence": "mcedit_x", "turn": 1, "changed_by": "none", "failed_checks": "",
            "guard_reason": "", "reveal_reason": ""}]
    text = harm.compare(before, now)
    assert text.splitlines()[0] == ("of the 2 ConvergeBench turns where the pack changed the editor's picture "
                                    "before, 1 still change it (50.0 %)")
    assert "convergebench_a turn 1 (was guard; now guard aside: failed seams)" in text


def test_a_wrong_folder_or_an_earlier_run_that_is_not_one_is_a_clear_error(tmp_path, capsys):
    harm = _harm()
    with pytest.raises(InputError, match="realdata"):
        harm.conversations(tmp_path / "nowhere")
    with pytest.raises(InputError, match="chains/index.json"):
        harm.conversations(tmp_path)
    bad = tmp_path / "x.csv"
    with bad.open("w", newline="") as fh:
        csv.writer(fh).writerows([["a", "b"], ["1", "2"]])
    with pytest.raises(InputError, match="turns.csv"):
        harm.read_csv(bad)
    assert harm.main(["--realdata", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "chains/index.json" in capsys.readouterr().err and not (tmp_path / "o").exists()
    assert harm.main(["--realdata", str(tmp_path), "--out", str(harm.ROOT / "docs" / "harm_out")]) == 2
    assert "outside the checkout" in capsys.readouterr().err and not (harm.ROOT / "docs" / "harm_out").exists()
    assert harm.main(["--realdata", str(tmp_path), "--out", str(tmp_path / "o"), "--limit", "0"]) == 2


def test_the_cost_benchmark_times_the_removal_turns_history_answered(tmp_path):
    # scripts/bench/bench_cost.py's third figure replays the chains through chat_replay and times each
    # turn's run_turn: it broke unseen when the replay moved out of bench_undo_chains.py
    import json

    harm = _harm()
    conv = _conversation(harm, tmp_path)
    turns = [{"file": p.name, "instruction": text} for p, text in
             zip((conv.source, *conv.outputs), ("(source)", *conv.instructions))]
    (tmp_path / "index.json").write_text(json.dumps({"chains": [{"chain_id": conv.name, "turns": turns}]}))
    cost = load_script("scripts/bench/bench_cost.py")
    rows = cost.undo_turns(tmp_path, "")
    assert [r["turn"] for r in rows] == [2] and rows[0]["answered"] and not rows[0]["editor_called"]
    assert rows[0]["cpu_s"] > 0.0 and rows[0]["kept_db"] == 100.0
