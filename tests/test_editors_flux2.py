"""FLUX.2 [klein] editor rules, on a tiny random klein built in code (CPU, offline)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import core


def _image(seed: int, h: int, w: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (h, w, 3), dtype=np.uint8)


def _comfy(*arrays) -> torch.Tensor:
    return torch.from_numpy(np.stack(arrays).astype(np.float32) / 255.0)


@pytest.fixture(scope="module")
def tiny_pipe(pack):
    return core(pack, "tiny.klein").build_tiny_klein_pipeline(seed=0)


@pytest.fixture
def editor(pack, tiny_pipe):
    return core(pack, "editors").Flux2Editor(tiny_pipe, name="flux2-klein-tiny")


@pytest.fixture
def edit_node(pack):
    return pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Edit"]


@pytest.fixture
def transformer_calls(tiny_pipe):
    calls = []
    handle = tiny_pipe.transformer.register_forward_hook(lambda *a: calls.append(1))
    yield calls
    handle.remove()


def test_node_edits_current_image_with_two_references_and_returns_current_size(editor, edit_node):
    # current image 72x88 is not a multiple of 16: generated at 64x80, returned at 72x88
    current = _image(0, 72, 88)
    refs = _comfy(_image(1, 72, 88), current)  # [restoration source, identity anchor]
    image, info = edit_node.execute(editor, refs, _comfy(current), "remove the cup, revealing the book from the "
                                    "first image", seed=3, steps=2, guidance=4.0).result
    assert tuple(image.shape) == (1, 72, 88, 3)
    assert image.dtype == torch.float32 and 0.0 <= float(image.min()) and float(image.max()) <= 1.0
    assert '"generation_size": [80, 64]' in info and '"seed": 3' in info


def test_same_seed_gives_the_same_image_and_another_seed_a_different_one(editor):
    refs = [_image(1, 64, 64), _image(2, 64, 64)]
    a = np.asarray(editor.edit(refs, "make it red", output_size=(64, 64), seed=7, steps=2))
    b = np.asarray(editor.edit(refs, "make it red", output_size=(64, 64), seed=7, steps=2))
    c = np.asarray(editor.edit(refs, "make it red", output_size=(64, 64), seed=8, steps=2))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_reference_order_is_kept(editor):
    # the paper's instruction speaks of "the first image": swapping the references must matter
    src, anchor = _image(1, 64, 64), _image(2, 64, 64)
    a = np.asarray(editor.edit([src, anchor], "restore", output_size=(64, 64), seed=1, steps=1))
    b = np.asarray(editor.edit([anchor, src], "restore", output_size=(64, 64), seed=1, steps=1))
    assert not np.array_equal(a, b)


def test_progress_reports_every_denoising_step(pack, editor):
    comfy = core(pack, "comfy")
    seen = []
    remove = comfy.add_listener(lambda name, data: seen.append((name, data["step"], data["total"])))
    try:
        editor.edit([_image(1, 64, 64)], "add a hat", output_size=(64, 64), seed=0, steps=3)
    finally:
        remove()
    assert seen == [("respec.editor_step", 1, 3), ("respec.editor_step", 2, 3), ("respec.editor_step", 3, 3)]
    assert editor.last_run["steps"] == 3


def test_interrupt_after_first_step_stops_the_run(pack, editor, transformer_calls):
    comfy = core(pack, "comfy")
    errors = core(pack, "errors")

    def cancel_after_step_1(name, data):
        if name == "respec.editor_step" and data["step"] == 1:
            comfy.request_interrupt()

    remove = comfy.add_listener(cancel_after_step_1)
    try:
        with pytest.raises(errors.Interrupted):
            editor.edit([_image(1, 64, 64)], "add a hat", output_size=(64, 64), seed=0, steps=5)
    finally:
        remove()
        comfy.clear_interrupt()
    assert len(transformer_calls) == 2  # one step of klein base: conditional + unconditional pass


def test_klein_base_runs_real_cfg_and_distilled_klein_one_pass(pack, tiny_pipe, transformer_calls):
    editors = core(pack, "editors")
    base = editors.Flux2Editor(tiny_pipe)
    base.edit([_image(1, 64, 64)], "x", output_size=(64, 64), seed=0, steps=2, guidance=4.0)
    assert len(transformer_calls) == 4
    distilled_pipe = core(pack, "tiny.klein").build_tiny_klein_pipeline(is_distilled=True)
    distilled = editors.Flux2Editor(distilled_pipe)
    calls = []
    handle = distilled_pipe.transformer.register_forward_hook(lambda *a: calls.append(1))
    try:
        distilled.edit([_image(1, 64, 64)], "x", output_size=(64, 64), seed=0, steps=2, guidance=4.0)
    finally:
        handle.remove()
    assert len(calls) == 2 and distilled.default_steps == 4 and base.default_steps == 30


def test_the_empty_negative_prompt_is_encoded_once_per_loaded_text_encoder(pack, tiny_pipe):
    editors = core(pack, "editors")
    calls = []
    handle = tiny_pipe.text_encoder.register_forward_hook(lambda *a: calls.append(1))
    refs = [_image(1, 64, 64)]
    try:
        kept = editors.Flux2Editor(tiny_pipe)
        first = np.asarray(kept.edit(refs, "make it red", output_size=(64, 64), seed=5, steps=2, guidance=4.0))
        assert len(calls) == 2                        # the instruction and the empty negative
        again = [np.asarray(kept.edit(refs, text, output_size=(64, 64), seed=5, steps=2, guidance=4.0))
                 for text in ("make it blue", "make it red")]
        assert len(calls) == 4                        # one encoding per edit from now on
        fresh = editors.Flux2Editor(tiny_pipe)        # nothing cached: encodes "" again
        blue = np.asarray(fresh.edit(refs, "make it blue", output_size=(64, 64), seed=5, steps=2, guidance=4.0))
    finally:
        handle.remove()
    assert np.array_equal(again[0], blue) and np.array_equal(again[1], first)
    assert not np.array_equal(first, blue)


def test_mixed_size_references_are_resized_not_refused(editor):
    refs = [_image(1, 64, 64), _image(2, 130, 100), _image(3, 96, 200)]
    out = editor.edit(refs, "restore the book", output_size=(80, 64), seed=0, steps=1)
    assert out.size == (80, 64)
    # each reference is brought to about the generation's 80x64 pixels, aspect kept, sides on 16, >= 64
    assert editor.last_run["reference_sizes"] == [[64, 64], [64, 80], [96, 64]]


def test_image_smaller_than_the_model_minimum_is_refused_clearly(pack, editor, edit_node):
    errors = core(pack, "errors")
    with pytest.raises(errors.InputError, match="at least 64 pixels"):
        editor.edit([_image(1, 48, 64)], "x", output_size=(64, 64), seed=0, steps=1)
    small = _comfy(_image(1, 32, 32))
    with pytest.raises(errors.InputError, match="32x32 pixels"):
        edit_node.execute(editor, small, small, "x", seed=0, steps=1, guidance=4.0)


def test_output_size_override_returns_that_size(editor, edit_node):
    current = _comfy(_image(0, 64, 64))
    image, _ = edit_node.execute(editor, current, current, "x", seed=0, steps=1, guidance=1.0, width=96,
                                 height=80).result
    assert tuple(image.shape) == (1, 80, 96, 3)
