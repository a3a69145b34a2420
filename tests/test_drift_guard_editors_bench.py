"""scripts/bench/drift_guard_editors.py's measures (the real pairs themselves are not in the
repository): a re-drawn texture inside the box is a change at the pixel scale, not at the content
scale; a new object is a change at both; far changes are counted outside the grown box; a guard
that stepped aside (the editor's own size) is measured at the input's size."""
from __future__ import annotations

import numpy as np
from PIL import Image
from scipy import ndimage

from conftest import load_script


def _editors():
    return load_script("scripts/bench/drift_guard_editors.py")


def _glints(shape, seed, density=0.01):
    """Water's glints: 3 px bright dots on a dark ground, where the seed puts them."""
    dots = ndimage.binary_dilation(np.random.default_rng(seed).random(shape) < density, iterations=1)
    return np.where(dots, 0.95, 0.3)


def _scene():
    """A 512² picture of glinting water; the editor re-draws the glints in the box's lower half (the
    water re-rendered) and adds a red square in its upper half; box = (0.25, 0.25, 0.75, 0.75)."""
    shape = (512, 512)
    a = np.repeat(_glints(shape, 1)[..., None], 3, axis=2)
    b = a.copy()
    b[260:380, 140:370] = _glints(shape, 2)[260:380, 140:370, None]
    b[150:230, 200:300] = (0.9, 0.1, 0.1)
    return (a * 255).round().astype(np.uint8), (b * 255).round().astype(np.uint8)


def test_a_redrawn_texture_is_a_change_at_the_pixel_scale_only():
    ed = _editors()
    a, b = _scene()
    box = (0.25, 0.25, 0.75, 0.75)
    guard = a.copy()
    guard[150:230, 200:300] = b[150:230, 200:300]              # keeps the square, restores the texture
    m = ed.measure(a, b, guard, box)
    assert m["edit_kept"] >= 0.99 and m["clear_px"] <= 1.02 * 80 * 100   # the content change: the square
    assert m["edit_kept_pixel"] < 0.85                         # the re-drawn glints count at the pixel scale
    assert m["clear_px_pixel"] > 1.15 * 80 * 100 and m["far_changed"] == 0.0
    assert ed.measure(a, b, b, box)["edit_kept"] == 1.0        # the editor's own output keeps everything


def test_far_changes_and_a_stepped_aside_output_of_another_size():
    ed = _editors()
    a = np.full((512, 512, 3), 128, np.uint8)
    b = a.copy()
    b[150:230, 200:300] = (230, 25, 25)
    far = b.copy()
    far[10:60, 10:60] = 255                                    # a change far outside the box
    m = ed.measure(a, b, far, (0.25, 0.25, 0.75, 0.75))
    outside = ~ndimage.binary_dilation(ed.box_mask(a.shape[:2], (0.25, 0.25, 0.75, 0.75)), iterations=ed.FAR_GROW_PX)
    assert abs(m["far_changed"] - 2500 / outside.sum()) < 1e-3
    bigger = np.asarray(Image.fromarray(far).resize((1024, 1024), Image.NEAREST))  # the editor's own size
    assert abs(ed.measure(a, b, bigger, (0.25, 0.25, 0.75, 0.75))["far_changed"] - m["far_changed"]) < 2e-3
