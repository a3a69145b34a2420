"""Reference Selector (appendix C.3 image ordering) and Instruction Rewriter (PTI), and the
paper's table 2 ablation rows."""
from __future__ import annotations

import pytest

from controller_helpers import make_history
from respec.controller import rewrite_instruction, select_references
from respec.errors import InputError
from respec.plan import Plan

H = make_history(4)  # I_0..I_3: turn 4


def restoration(ids, **kw) -> Plan:
    return Plan(turn=4, user_instruction="remove the box", is_restoration=True, image_ids=tuple(ids),
                synthesis_instruction="Remove the box, revealing the patch from the first image.", **kw)


def test_selector_keeps_the_plan_order_source_then_anchor():
    chosen = select_references(H, restoration([1, 3]))
    assert chosen.ids == [1, 3]
    assert chosen.images == [H.images[1], H.images[3]]
    assert chosen.current == H.images[3]
    assert chosen.fallbacks == [] and chosen.uses_history_reference


def test_selector_keeps_an_order_the_model_chose_even_anchor_first():
    assert select_references(H, restoration([3, 0])).ids == [3, 0]


def test_selector_drops_ids_that_are_not_in_the_history():
    chosen = select_references(H, restoration([7, 1, -1, 3]))
    assert chosen.ids == [1, 3]
    assert chosen.dropped_ids == [7, -1]
    assert chosen.fallbacks == ["image_id_not_in_history_dropped"]


def test_selector_falls_back_to_the_latest_image_when_no_id_exists():
    chosen = select_references(H, restoration([9, 4]))
    assert chosen.ids == [3] and chosen.images == [H.images[3]]
    assert chosen.fallbacks == ["image_id_not_in_history_dropped", "no_valid_image_id_latest_image"]


def test_selector_uses_the_latest_image_when_a_plan_has_no_image_ids():
    # the parser always fills image_ids on restoration turns (C.3); a plan built elsewhere may not
    chosen = select_references(H, restoration([]))
    assert chosen.ids == [3]
    assert chosen.fallbacks == ["no_valid_image_id_latest_image"]


def test_selector_gives_the_current_image_alone_on_non_restoration_turns():
    plan = Plan(turn=4, user_instruction="make it pink", synthesis_instruction="Make the sky pink.")
    chosen = select_references(H, plan, use_history_reference=True)
    assert chosen.ids == [3] and chosen.images == [H.images[3]] and chosen.fallbacks == []
    assert not chosen.uses_history_reference


def test_selector_gives_the_current_image_alone_with_hrs_off():
    chosen = select_references(H, restoration([0, 3]), use_history_reference=False)
    assert chosen.ids == [3] and chosen.images == [H.images[3]]


def test_selector_refuses_a_plan_made_for_another_turn():
    with pytest.raises(InputError, match="turn 4"):
        select_references(make_history(3), restoration([0, 2]))


def test_selector_shares_the_history_images_without_copying():
    chosen = select_references(H, restoration([0, 3]))
    assert chosen.images[0] is H.turns[0].image and chosen.images[0].array is H.turns[0].image.array


def test_rewriter_with_pti_gives_the_synthesis_instruction():
    assert rewrite_instruction(restoration([0, 3]), use_pti=True) == \
        "Remove the box, revealing the patch from the first image."


def test_rewriter_without_pti_gives_the_user_request():
    assert rewrite_instruction(restoration([0, 3]), use_pti=False) == "remove the box"


@pytest.mark.parametrize("row,pti,hrs,text,ids", [
    ("base", False, False, "remove the box", [3]),
    ("+HRS", False, True, "remove the box", [0, 3]),
    ("+PTI", True, False, "Remove the box, revealing the patch from the first image.", [3]),
    ("+PTI+HRS", True, True, "Remove the box, revealing the patch from the first image.", [0, 3]),
])
def test_ablation_rows_of_table_2(row, pti, hrs, text, ids):
    plan = restoration([0, 3])
    assert rewrite_instruction(plan, use_pti=pti) == text
    assert select_references(H, plan, use_history_reference=hrs).ids == ids
