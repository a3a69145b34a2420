"""Occluder masks on ComfyUI's SAM3 (respec/eval/sam3_masks.py and its nodes): appendix B.1's query
chain and acceptance around SAM3_Detect's outputs. No SAM3 here: its outputs are written by hand
in SAM3_Detect's format (individual masks stacked over the batch, one list of box dicts per image)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from respec.errors import InputError
from respec.eval.masks import ACCEPT_CONF
from respec.eval.sam3_masks import accept_detections, sam3_prompt, sam3_queries, split_per_image

W, H = 40, 30


def _box(x, y, w, h, score):
    return {"x": x, "y": y, "width": w, "height": h, "score": score}


def _mask(x0, y0, x1, y1):
    m = np.zeros((H, W), np.float32)
    m[y0:y1, x0:x1] = 1.0
    return m


def test_the_prompt_is_the_b1_query_chain_one_sam3_part_per_query():
    # label -> last word -> its singular; SAM3 splits its prompt at commas and detects each part alone
    assert sam3_prompt("bouquet of flowers") == "bouquet of flowers, flowers, flower"
    assert sam3_prompt("cat") == "cat"                       # duplicates dropped
    assert [s for s, _, _ in sam3_queries("red boxes")] == [0, 1, 2]


def test_commas_colons_and_brackets_in_a_label_cannot_split_or_count_the_prompt():
    # SAM3's tokenizer splits at commas, drops brackets and reads "x:2" as "up to 2 objects"
    label = "cake, with icing (big):2"
    prompt = sam3_prompt(label)
    assert prompt.split(", ")[0] == "cake with icing big 2"       # the whole label stays one query
    assert prompt.count(",") == len(sam3_queries(label)) - 1 and ":" not in prompt and "(" not in prompt


def test_an_empty_label_is_refused_with_what_to_give():
    with pytest.raises(InputError, match="nothing to detect"):
        sam3_prompt("  ")


def test_the_first_query_of_the_chain_that_reaches_the_threshold_gives_the_mask():
    # label at 0.1 (rejected), last word at 0.3 (accepted), singular at 0.9: B.1 stops at the first accepted
    masks = [_mask(0, 0, 5, 5), _mask(10, 10, 20, 20), _mask(30, 0, 40, 10)]
    boxes = [_box(0, 0, 5, 5, 0.1), _box(10, 10, 10, 10, 0.3), _box(30, 0, 10, 10, 0.9)]
    res = accept_detections("bouquet of flowers", masks, boxes, (W, H))
    assert res.record["accepted_prompt"] == "flowers" and res.record["fallback_stage"] == 1
    assert res.record["confidence"] == pytest.approx(0.3)
    assert res.mask.sum() == 100 and res.mask[15, 15]
    assert [a["best_confidence"] for a in res.record["attempts"]] == [0.1, 0.3, 0.9]


def test_no_query_reaching_the_threshold_gives_an_all_zero_mask_with_every_score():
    masks = [_mask(0, 0, 5, 5)] * 3
    boxes = [_box(0, 0, 5, 5, s) for s in (0.05, 0.19, 0.1)]
    res = accept_detections("bouquet of flowers", masks, boxes, (W, H))
    assert not res.mask.any() and res.record["status"] == "no_detection"
    assert "0.19" in res.record["reason"] and res.record["accept_threshold"] == ACCEPT_CONF


def test_the_threshold_is_the_one_given():
    boxes = [_box(0, 0, 5, 5, 0.3)]
    assert accept_detections("cat", [_mask(0, 0, 5, 5)], boxes, (W, H), accept=0.5).record["status"] == "no_detection"
    assert accept_detections("cat", [_mask(0, 0, 5, 5)], boxes, (W, H), accept=0.25).mask.any()


def test_fewer_objects_than_queries_are_used_but_their_query_is_not_guessed():
    res = accept_detections("bouquet of flowers", [_mask(0, 0, 5, 5)], [_box(0, 0, 5, 5, 0.6)], (W, H))
    assert res.mask.any() and res.record["fallback_stage"] is None and "unknown" in res.record["note"]


def test_a_batch_is_split_by_each_images_box_list():
    stack = np.stack([_mask(0, 0, 5, 5), _mask(0, 0, 6, 6), _mask(0, 0, 7, 7)])
    per = split_per_image(stack, [[_box(0, 0, 5, 5, 0.5)], [], [_box(0, 0, 6, 6, 0.4), _box(0, 0, 7, 7, 0.3)]], 3)
    assert [len(m) for m, _ in per] == [1, 0, 2] and per[2][0][1].sum() == 49
    with pytest.raises(InputError, match="individual_masks"):
        split_per_image(stack[:2], [[_box(0, 0, 5, 5, 0.5)], [], [_box(0, 0, 6, 6, 0.4), _box(0, 0, 7, 7, 0.3)]], 3)
    with pytest.raises(InputError, match="same image batch"):
        split_per_image(stack, [[_box(0, 0, 5, 5, 0.5)]], 3)


def test_the_node_masks_each_image_of_a_batch_and_records_why(pack):
    node = pack.NODE_CLASS_MAPPINGS["ReSpecSam3OccluderMask"]
    query = pack.NODE_CLASS_MAPPINGS["ReSpecSam3Query"]
    prompt, label = query.execute("red boxes").result
    assert prompt == "red boxes, boxes, box" and label == "red boxes"
    images = torch.zeros((2, H, W, 3))
    masks = torch.from_numpy(np.stack([_mask(0, 0, 5, 5), _mask(1, 1, 4, 4), _mask(2, 2, 9, 9),
                                       _mask(0, 0, 1, 1), _mask(0, 0, 2, 2), _mask(0, 0, 3, 3)]))
    boxes = [[_box(0, 0, 5, 5, 0.1), _box(1, 1, 3, 3, 0.1), _box(2, 2, 7, 7, 0.7)],
             [_box(0, 0, 1, 1, 0.0), _box(0, 0, 2, 2, 0.0), _box(0, 0, 3, 3, 0.1)]]
    res = node.execute(images, masks, boxes, label, 0.2)
    out, record = res.result
    rec = json.loads(record)
    assert json.loads(res.ui["respec_masks"][0]) == rec     # in the prompt's /history too
    assert out.shape == (2, H, W) and out[0].sum() == 49 and out[1].sum() == 0
    assert rec[0]["accepted_prompt"] == "box" and rec[1]["status"] == "no_detection"
