"""The edit region a request names (respec/pixels/named_region.py, nodes/edit_region_nodes.py): the phrase
Edit Region from Text picks, the rule R = fill_holes(grow(O) & C), and what it changes in the
Drift Guard: re-drawn details outside the named object go back to I_(t-1)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import core
from respec.errors import InputError
from respec.pixels.named_region import edit_region
from respec.post_edit.guard_step import guard_images

S = 128


def _scene(seed=0):
    """A textured picture (the change mask needs texture to align on)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:S, 0:S]
    base = np.stack([xx * 2, yy * 2, (xx + yy)], -1).astype(np.float32)
    base += rng.normal(0, 18, (S, S, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def _sign_edit():
    """I_(t-1), I_t: the "sign" (rows 20-50, cols 20-60) repainted, and a detail far from it (rows
    90-110, cols 80-110, "the eyes") re-drawn by the editor without being asked."""
    prev = _scene()
    edit = prev.copy()
    edit[20:50, 20:60] = [220, 30, 30]
    edit[90:110, 80:110] = np.clip(edit[90:110, 80:110].astype(int) + 90, 0, 255).astype(np.uint8)
    sign = np.zeros((S, S), bool)
    sign[18:52, 18:62] = True
    return prev, edit, sign


@pytest.mark.parametrize("request_, phrase", [
    ("add a red hat on the dog", "a red hat"),                            # add: what is added
    ("add a large bouquet of sunflowers in front of the person", "a large bouquet of sunflowers"),
    ("replace the cup with a vase", "the cup"),                           # replace: what is replaced
    ("swap the cat for a fox", "the cat"),
    ("make the shirt red", "the shirt"),                                  # recolour: what is recoloured
    ("recolor the sofa green", "the sofa"),
    ("remove the flowers", "the flowers"),                                # remove: what goes
    ("delete the red box on the left", "the red box"),
])
def test_edit_region_from_text_names_the_object_the_request_changes(pack, request_, phrase):
    node = pack.NODE_CLASS_MAPPINGS["ReSpecEditRegionFromText"]
    assert node.execute(instruction=request_).result == (phrase,)


@pytest.mark.parametrize("request_", ["make it night", "turn the photo into a watercolor painting",
                                      "change the lighting to golden hour", "make the image darker"])
def test_a_global_request_names_no_object(pack, request_):
    assert pack.NODE_CLASS_MAPPINGS["ReSpecEditRegionFromText"].execute(instruction=request_).result == ("",)


def test_without_an_instruction_the_plans_request_is_read(pack):
    # The node takes the pack's own Plan (the node layer checks the socket's type: nodes/boundary.py).
    Plan = core(pack, "plan").Plan
    plan = Plan(turn=2, user_instruction="remove the flowers", synthesis_instruction="remove them, revealing ...")
    assert pack.NODE_CLASS_MAPPINGS["ReSpecEditRegionFromText"].execute(plan=plan).result == ("the flowers",)


def test_the_region_is_the_change_inside_the_grown_object():
    prev, edit, sign = _sign_edit()
    res = edit_region(prev, edit, "the sign", [sign, sign])
    assert res.record["used"] and res.mask[30, 40] and not res.mask[100, 95]
    assert res.record["change_outside_px"] > 300       # the re-drawn "eyes" are outside it
    grown = np.zeros((S, S), bool)
    grown[18 - res.record["margin_px"]:52 + res.record["margin_px"], 18 - res.record["margin_px"]:62 + res.record["margin_px"]] = True
    assert not (res.mask & ~grown).any()


def test_an_object_found_only_in_the_edit_or_only_before_it_is_enough():
    prev, edit, sign = _sign_edit()
    empty = np.zeros_like(sign)
    added = edit_region(prev, edit, "a red sign", [empty, sign])     # an added object is found in I_t
    removed = edit_region(prev, edit, "the sign", [sign, empty])     # a removed one in I_(t-1)
    assert added.record["used"] and removed.record["used"]
    assert np.array_equal(added.mask, removed.mask)


@pytest.mark.parametrize("phrase, masks, why", [
    ("", "sign", "names no object"),                   # a global request: the guard decides alone
    ("the sign", "none", "was not found"),             # SAM3 found nothing
    ("the tree", "elsewhere", "did not change"),       # found where nothing changed
])
def test_no_usable_object_gives_an_empty_mask_and_says_why(phrase, masks, why):
    prev, edit, sign = _sign_edit()
    elsewhere = np.zeros_like(sign)
    elsewhere[60:75, 0:10] = True
    given = {"sign": [sign, sign], "none": [], "elsewhere": [elsewhere, elsewhere]}[masks]
    res = edit_region(prev, edit, phrase, given)
    assert not res.mask.any() and not res.record["used"] and why in res.record["reason"]


def test_bad_inputs_are_refused():
    prev, edit, sign = _sign_edit()
    with pytest.raises(InputError, match="margin"):
        edit_region(prev, edit, "the sign", [sign], margin_frac=0.9)
    with pytest.raises(InputError, match="2 at most"):
        edit_region(prev, edit, "the sign", [sign, sign, sign])


def test_with_the_region_the_guard_restores_details_the_editor_redrew_elsewhere():
    prev, edit, sign = _sign_edit()
    without = guard_images(prev, edit, request="change the sign's text")
    region = edit_region(prev, edit, "the sign", [sign, sign])
    with_region = guard_images(prev, edit, user_mask=region.mask, request="change the sign's text")
    eyes = (slice(92, 108), slice(82, 108))
    # Without it the change mask keeps the re-drawn "eyes"; with it they are I_(t-1)'s own pixels.
    assert np.abs(without.image[eyes].astype(int) - edit[eyes]).mean() < 5
    assert np.array_equal(with_region.image[eyes], prev[eyes])
    # The asked-for edit is kept either way.
    assert np.abs(with_region.image[25:45, 25:55].astype(int) - edit[25:45, 25:55]).mean() < 5


def test_the_mask_node_gives_the_guard_its_mask_and_a_report(pack):
    prev, edit, sign = _sign_edit()
    node = pack.NODE_CLASS_MAPPINGS["ReSpecEditRegionMask"]
    t = lambda a: torch.from_numpy(a[None].astype(np.float32) / 255.0)   # noqa: E731
    masks = torch.from_numpy(np.stack([sign, sign]).astype(np.float32))
    mask, report = node.execute(t(prev), t(edit), "the sign", 0.03, masks).result
    rec = json.loads(report.split("\n", 1)[1])
    assert mask.shape == (1, S, S) and rec["used"] and mask[0, 30, 40] == 1 and mask[0, 100, 95] == 0
    empty, report = node.execute(t(prev), t(edit), "", 0.03, masks).result
    assert empty.sum() == 0 and "global" in report
