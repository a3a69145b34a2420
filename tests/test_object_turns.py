"""Object turns (respec/controller/object_turns.py) and the covering turn they give
(respec/controller/covering.py): a conversation that adds, removes and adds again the same object
undoes the latest addition still in the picture."""
from __future__ import annotations

import numpy as np

from respec.controller.covering import locate_covering_turn
from respec.controller.object_turns import object_turns
from respec.controller.provenance_selector import provenance_plan
from respec.history import CHANGE, History
from respec.pixels.change_mask import change_for
from synthetic_scenes import background, drift, rect_mask, u8

SHAPE = (96, 128)
A = (20, 20, 50, 60)        # (y0, x0, y1, x1)
B = (40, 70, 80, 110)       # overlaps nothing of A
INSIDE_A = (26, 28, 44, 52)


def chain(*turns):
    """I_0 (a textured scene) and one turn per (instruction, op, box, colour): op "add" paints the
    box, "remove" puts the scene's own pixels back there, "recolour" paints the box (inside an
    object). Each output carries a little drift, as an editor's would."""
    scene = background(7, SHAPE)
    img = scene.copy()
    h = History.start(u8(scene))
    for i, (text, op, box, colour) in enumerate(turns):
        m = rect_mask(SHAPE, box)
        img = img.copy()
        img[m] = scene[m] if op == "remove" else colour
        arr = u8(drift(img, gain=(1.0, 1.0, 1.0), bias=(0, 0, 0), noise=0.004, seed=30 + i))
        h = h.append(arr, text, masks={CHANGE: change_for(h, arr)})
    return h


RED, BLUE, GREEN = (0.85, 0.1, 0.1), (0.1, 0.2, 0.9), (0.1, 0.8, 0.2)


def test_a_later_removal_undoes_the_latest_addition_still_in_the_picture():
    h = chain(("Add glasses on the face", "add", A, RED),
              ("Remove the glasses", "remove", A, None),
              ("Add glasses on the face", "add", B, BLUE))
    found = locate_covering_turn(h, "Remove the glasses.")
    # turn 1's glasses are gone (turn 2 removed them): turn 3 is undone, from I_2
    assert (found.turn, found.source_id, found.evidence, found.ambiguous) == (3, 2, "request+provenance", False)
    assert "turn 3" in found.reason and "turn 1's were removed at turn 2" in found.reason
    assert [(o["turn"], o["consumed_by"]) for o in found.objects] == [(1, 2), (3, None)]


def test_the_first_removal_still_undoes_the_first_addition():
    h = chain(("Add glasses on the face", "add", A, RED))
    assert locate_covering_turn(h, "Remove the glasses").turn == 1


def test_two_objects_added_one_removed_the_named_one():
    h = chain(("Add a red ball on the left", "add", A, RED), ("Add a hat on the right", "add", B, BLUE))
    assert locate_covering_turn(h, "Remove the ball").turn == 1
    assert locate_covering_turn(h, "Remove the hat").turn == 2


def test_a_ball_re_added_elsewhere_is_the_one_a_later_removal_undoes():
    h = chain(("Add a red ball on the left", "add", A, RED), ("Remove the ball", "remove", A, None),
              ("Add a red ball on the right", "add", B, RED), ("Add a blue hat at the top", "add", (2, 2, 12, 30), BLUE))
    found = locate_covering_turn(h, "Remove the ball")
    assert found.turn == 3 and found.source_id == 2


def test_a_recolour_read_as_an_addition_modifies_the_object_and_adds_nothing():
    # 'stack' is an adding verb: "make the stack of books blue" names the books, and its change
    # lies inside them: the books were added at turn 1, the recolour is no new addition
    h = chain(("Add a large stack of books in the middle", "add", A, RED),
              ("Make the stack of books blue", "recolour", INSIDE_A, BLUE))
    turns = object_turns(h)
    assert [a.turn for a in turns.additions] == [1]
    assert locate_covering_turn(h, "Remove the stack of books").turn == 1


def test_adding_the_same_object_elsewhere_while_it_is_there_is_a_new_addition():
    h = chain(("Add a red ball on the left", "add", A, RED), ("Add a red ball on the right", "add", B, RED))
    turns = object_turns(h)
    assert [a.turn for a in turns.live()] == [1, 2]
    found = locate_covering_turn(h, "Remove the ball")
    assert found.turn == 2 and found.ambiguous and found.candidates == (1, 2)


def test_a_request_naming_nothing_takes_the_live_addition_its_own_change_overlaps():
    h = chain(("Add a red ball on the left", "add", A, RED), ("Add a hat on the right", "add", B, BLUE))
    assert locate_covering_turn(h, "Clear that area").turn == 2          # before the edit: the latest
    found = locate_covering_turn(h, "Clear that area", change=rect_mask(SHAPE, A))
    assert found.turn == 1 and found.evidence == "provenance"


def test_a_move_consumes_the_addition_and_adds_the_object_at_its_new_place():
    h = chain(("Add a lamp on the left", "add", A, GREEN),
              ("Move the lamp so it stands on the right", "add", B, GREEN))
    turns = object_turns(h)
    (first, moved) = turns.additions
    assert (first.consumed_by, first.consumed_how) == (2, "moved") and (moved.turn, moved.how) == (2, "moved")
    # removing it now undoes the move's arrival: I_1 shows the background where the lamp stands now
    assert locate_covering_turn(h, "Remove the lamp").turn == 2


def test_a_replace_consumes_the_old_object_and_adds_the_new_one_and_a_shrink_consumes_nothing():
    h = chain(("Add a wooden crate in the middle", "add", A, RED),
              ("Replace the crate with a small lamp", "recolour", INSIDE_A, GREEN),
              ("Add a blue hat on the right", "add", B, BLUE),
              ("Make the hat smaller", "remove", (60, 90, 80, 110), None))
    turns = object_turns(h)
    by_turn = {a.turn: a for a in turns.additions}
    assert by_turn[1].consumed_how == "replaced" and by_turn[2].words == frozenset({"lamp"})
    assert by_turn[3].live                      # shrunk, still there
    assert locate_covering_turn(h, "Remove the lamp").turn == 2


def test_each_clause_of_a_request_is_read_on_its_own():
    h = chain(("Add a hat on the left", "add", A, RED), ("Add a lamp on the right", "add", B, GREEN),
              ("Remove the hat and move the lamp to the top", "remove", A, None))
    turns = object_turns(h)
    assert {a.turn: a.consumed_how for a in turns.additions if not a.live} == {1: "removed", 2: "moved"}


def test_the_plan_records_which_turn_was_undone_and_why():
    h = chain(("Add glasses on the face", "add", A, RED), ("Remove the glasses", "remove", A, None),
              ("Add glasses on the face", "add", B, BLUE))
    plan = provenance_plan(h, "Remove the glasses", True)
    assert plan.restoration_source_id == 2 and plan.image_ids == (2, 3)
    rec = plan.provenance.to_dict()
    assert rec["turn"] == 3 and "removed at turn 2" in rec["reason"]
    assert rec["objects"][0]["consumed_how"] == "removed" and rec["objects"][1]["consumed_by"] is None


def test_object_turns_are_kept_by_content_and_extended_by_the_new_turns_only():
    h = chain(("Add glasses on the face", "add", A, RED), ("Remove the glasses", "remove", A, None))
    first = object_turns(h)
    arr = u8(drift(background(7, SHAPE), noise=0.004, seed=99))
    longer = h.append(arr, "Add a hat on the right", masks={CHANGE: change_for(h, arr)})
    again = object_turns(longer)
    assert again.additions[: len(first.additions)] == first.additions
    assert again.turns == 3 and np.isclose(again.additions[-1].share, longer.turns[3].masks[CHANGE].mask.mean())


def test_of_two_objects_of_one_kind_the_one_the_request_names_best_is_undone():
    h = chain(("Add a large wooden crate in the middle", "add", A, RED), ("Add a small crate on the right", "add", B, BLUE))
    assert locate_covering_turn(h, "Remove the wooden crate").turn == 1       # not the later small crate
    assert locate_covering_turn(h, "Remove the small crate").turn == 2
    h = chain(("Add a red ball on the left", "add", A, RED), ("Add a blue ball on the right", "add", B, BLUE))
    assert locate_covering_turn(h, "Remove the red ball").turn == 1           # colours tell them apart
    found = locate_covering_turn(h, "Remove the ball")
    assert found.turn == 2 and found.ambiguous                                 # naming neither: the latest
    turns = object_turns(chain(("Add a red ball on the left", "add", A, RED),
                               ("Add a blue ball on the right", "add", B, BLUE),
                               ("Remove the red ball", "remove", A, None)))
    assert [(a.turn, a.consumed_by) for a in turns.additions] == [(1, 3), (2, None)]


def test_what_replaces_an_object_of_the_photo_is_an_addition_a_later_removal_undoes():
    h = chain(("Replace the beaver with a fox", "add", A, RED), ("Add a hat on the right", "add", B, BLUE))
    turns = object_turns(h)
    assert (turns.additions[0].turn, turns.additions[0].how, turns.additions[0].words) == (1, "replaced", frozenset({"fox"}))
    assert locate_covering_turn(h, "Remove the fox").turn == 1
