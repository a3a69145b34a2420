"""The controller's history images (respec/controller/history_images.py, prompts.build_parts):
paper mode shows every image, bounded mode at most max_history_images, chosen with provenance,
with their true ids."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from respec.controller import PlanOptions, plan_turn
from respec.controller.history_images import BOUNDED, PAPER, shown_images
from respec.controller.prompts import build_parts, downscaled
from respec.errors import InputError
from respec.history import CHANGE, History
from respec.pixels.change_mask import change_for

from synthetic_scenes import background, draw_rect, u8

SHAPE = (48, 64)
COVER = (10, 10, 22, 22)


def _conversation(turns: int) -> History:
    """Turn 2 adds a box over COVER; turn 7 paints over part of it; the other turns add small
    squares elsewhere (never touching COVER's blocks)."""
    scene = background(5, SHAPE)
    img = scene
    h = History.start(u8(img))
    for t in range(1, turns + 1):
        if t == 2:
            img, text = draw_rect(img, COVER, (0.9, 0.1, 0.1)), "add a red crate"
        elif t == 7:
            img, text = draw_rect(img, (14, 14, 20, 20), (0.1, 0.9, 0.1)), "paint a green spot on the crate"
        else:
            x = 30 + (t * 5) % 28
            img, text = draw_rect(img, (30, x, 36, x + 5), (0.1, 0.1, (t * 20 % 200) / 255.0 + 0.2)), f"add a pebble{t}"
        arr = u8(img)
        h = h.append(arr, text, masks={CHANGE: change_for(h, arr)})
    return h


class Recorder:
    name = "recorder"
    max_pixels = 32 * 32

    def __init__(self):
        self.parts = None

    def chat(self, parts, system=None, max_new_tokens=None, json_schema=None):
        self.parts = parts
        last = json_schema["properties"]["identity_anchor_id"]["maximum"]
        return json.dumps({"reasoning": {}, "identity_anchor_id": last, "restoration_source_id": 1,
                           "restoration_region": "r", "image_ids": [1, last], "synthesis_instruction": "s"})


def test_paper_mode_shows_every_image():
    h = _conversation(12)
    shown = shown_images(h, "remove the red crate", True, PAPER)
    assert shown.ids == tuple(range(13)) and shown.all_shown


def test_bounded_mode_shows_the_original_the_covering_turn_and_the_latest():
    h = _conversation(12)
    shown = shown_images(h, "remove the red crate", True, BOUNDED, 6)
    assert len(shown.ids) == 6 and list(shown.ids) == sorted(shown.ids)
    assert {0, 1, 2, 12} <= set(shown.ids), "I_0, the image before the covering turn, the covering turn, the latest"
    assert {6, 7} <= set(shown.ids), "turn 7 changed the covered region: it and the image before it"


def test_bounded_mode_fills_a_non_restoration_turn_with_the_latest_images():
    h = _conversation(12)
    assert shown_images(h, "add a cloud", False, BOUNDED, 4).ids == (0, 10, 11, 12)
    assert shown_images(_conversation(3), "add a cloud", False, BOUNDED, 6).ids == (0, 1, 2, 3)


def test_unknown_mode_or_too_small_a_budget_is_refused():
    h = _conversation(3)
    with pytest.raises(InputError, match="history mode"):
        shown_images(h, "x", False, "some")
    with pytest.raises(InputError, match="at least 2"):
        shown_images(h, "x", False, BOUNDED, 1)


def test_the_prompt_keeps_true_ids_and_lists_every_turn():
    h = _conversation(12)
    parts = build_parts(h, "remove the red crate", 32 * 32, shown=(0, 1, 2, 12))
    labels = [p for p in parts[:-1] if isinstance(p, str)]
    assert labels == ["Image 0:", "Image 1:", "Image 2:", "Image 12:"]
    text = parts[-1]
    assert "Images 0, 1, 2 and 12 are shown above" in text
    assert all(f"Turn {k} (Image {k - 1} -> Image {k})" in text for k in range(1, 13))
    paper = build_parts(h, "remove the red crate", 32 * 32)
    assert sum(isinstance(p, Image.Image) for p in paper) == 13 and "Images 0 to 12 are shown above" in paper[-1]


def test_plan_turn_in_bounded_mode_sends_the_chosen_images_and_records_them():
    h = _conversation(12)
    rec = Recorder()
    plan = plan_turn(h, "remove the red crate", rec, True, PlanOptions(history_mode=BOUNDED, max_history_images=6))
    assert sum(isinstance(p, Image.Image) for p in rec.parts) == 6
    assert plan.meta["images_shown"] == plan.meta["history_images"]["ids"]
    assert plan.meta["history_images"]["mode"] == BOUNDED
    assert plan.restoration_source_id == 1, "the controller's ids are history ids"
    paper = plan_turn(h, "remove the red crate", rec, True)
    assert sum(isinstance(p, Image.Image) for p in rec.parts) == 13
    assert "history_images" not in paper.meta and paper.meta["images_shown"] == list(range(13))


def test_downscaled_copies_are_made_once_per_image_and_budget():
    h = _conversation(2)
    a = downscaled(h.image(1), 16 * 16)
    assert a is downscaled(h.image(1), 16 * 16)
    assert a.size[0] * a.size[1] <= 256
    assert downscaled(h.image(1), 32 * 32) is not a
    assert np.array_equal(np.asarray(downscaled(h.image(0), 10 ** 6)), h.image(0).array[:, :, :3])


def test_the_textgen_prompt_attaches_the_same_bounded_images():
    from respec.controller.textgen import controller_call
    h = _conversation(12)
    call = controller_call(h, "remove the red crate", True, history_mode=BOUNDED, max_history_images=6)
    ids = shown_images(h, "remove the red crate", True, BOUNDED, 6).ids
    assert len(call.images) == 6 and call.meta["images_shown"] == list(ids)
    assert f"Image {', Image '.join(map(str, ids))}." in call.prompt
    assert "Turn 12 (Image 11 -> Image 12)" in call.prompt
    paper = controller_call(h, "remove the red crate", True)
    assert len(paper.images) == 13 and "images_shown" not in paper.meta
