"""Restoration-turn decision without ground truth (auto mode), manual override, ground truth."""
from __future__ import annotations

import pytest

from controller_helpers import picture
from respec.controller import decide_restoration, detect_restoration
from respec.errors import InputError
from respec.history import History


def history(*instructions: str) -> History:
    h = History.start(picture(0))
    for k, instr in enumerate(instructions, start=1):
        h = h.append(picture(k), instr)
    return h


@pytest.mark.parametrize("request_text", [
    "Remove the large cardboard box",
    "delete the box",
    "take away the box please",
    "get rid of the cardboard box",
    "move the box to the left edge",
    "shrink the box to half its size",
    "make the box much smaller",
    "replace the box with a small cat",
    "change the box into a potted plant",
])
def test_revealing_verb_on_an_object_an_earlier_turn_added_is_restoration(request_text):
    h = history("Add a large cardboard box in front of the astronaut's chest", "make the sky purple")
    flag, reason = detect_restoration(h, request_text)
    assert flag is True, reason
    assert "box" in reason and "turn 1" in reason


def test_plural_and_singular_names_match():
    h = history("Add flowers in front of the emblem")
    assert detect_restoration(h, "Change the flowers to a single flower")[0] is True
    h = history("put sunglasses on the man")
    assert detect_restoration(h, "remove the sunglasses")[0] is True


def test_cover_with_adds_what_comes_after_with():
    h = history("cover the logo with a red sticker")
    assert detect_restoration(h, "remove the sticker")[0] is True
    assert detect_restoration(h, "remove the logo")[0] is False


def test_removing_something_that_was_in_the_original_is_not_restoration():
    h = history("add a red hat on the man's head")
    flag, reason = detect_restoration(h, "remove the tree in the background")
    assert flag is False and "does not name" in reason


def test_colour_and_size_words_alone_do_not_match():
    h = history("add a large red hat on the man's head")
    assert detect_restoration(h, "remove the large red car")[0] is False
    assert detect_restoration(h, "remove the hat")[0] is True


def test_placement_words_of_the_earlier_request_do_not_count():
    # the box was added in front of the leg; the leg itself was not added
    h = history("add a box in front of the snowboarder's leg")
    assert detect_restoration(h, "move the snowboarder's leg")[0] is False


def test_request_without_a_revealing_verb_is_not_restoration():
    h = history("add a box in front of the chest")
    flag, reason = detect_restoration(h, "make the box blue")
    assert flag is False and "no revealing verb" in reason


def test_attribute_change_is_not_restoration():
    h = history("add a hat on the man's head")
    assert detect_restoration(h, "change the hat to red")[0] is False
    assert detect_restoration(h, "turn the hat into gold")[0] is False


def test_first_turn_is_never_restoration():
    flag, reason = detect_restoration(history(), "remove the box")
    assert flag is False and "turn 1" in reason


def test_nothing_added_earlier_means_not_restoration():
    h = history("make the sky purple")
    flag, reason = detect_restoration(h, "remove the clouds")
    assert flag is False and "no earlier turn added" in reason


def test_ground_truth_flag_wins_over_every_mode():
    h = history("add a box")
    assert decide_restoration("not restoration", h, "remove the box", ground_truth=True) == \
        (True, {"restoration_decided_by": "ground_truth"})
    assert decide_restoration("auto", h, "remove the box", ground_truth=False)[0] is False


def test_manual_modes_override_the_rule():
    h = history("add a box")
    assert decide_restoration("restoration", h, "make the sky pink") == (True, {"restoration_decided_by": "manual"})
    assert decide_restoration("not restoration", h, "remove the box") == (False, {"restoration_decided_by": "manual"})


def test_auto_mode_records_its_reason():
    flag, meta = decide_restoration("auto", history("add a box"), "remove the box")
    assert flag is True
    assert meta["restoration_decided_by"] == "auto" and "box" in meta["restoration_reason"]


def test_unknown_mode_is_refused():
    with pytest.raises(InputError, match="restoration mode"):
        decide_restoration("maybe", history("add a box"), "remove the box")


def test_a_preservation_clause_is_not_read_as_a_revealing_verb():
    h = history("add a box in front of the chest")
    assert detect_restoration(h, "move the box to the left")[0] is True
    flag, reason = detect_restoration(h, "don't move the box, make the sky purple")
    assert flag is False and "no revealing verb" in reason
    # a name in a clause that says what stays is not what the request acts on
    assert detect_restoration(h, "remove the cat but keep the box")[0] is False
