"""The seam check of the verification (issue 43, respec/pixels/verify/seams.py): a composite has no
edge along its boundary that neither source has."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from respec.errors import InputError
from respec.pixels.verify import Composite, verify
from respec.pixels.verify.run import CHECKS
from respec.pixels.verify.seams import NAME, SEAM_MIN_CELLS, check_seams
from synthetic_scenes import background, u8

SHAPE = (256, 320)


def _disk(shape=SHAPE, r=70) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    return (yy - shape[0] // 2) ** 2 + (xx - shape[1] // 2) ** 2 < r * r


def _pair(shape=SHAPE, step=(0.0, 0.0, 0.0), seed=2):
    """(old, fallback): one scene, the fallback with the editor's pixel noise, old brightened by `step`."""
    scene = background(seed, shape)
    rng = np.random.default_rng(seed)
    fallback = u8(np.clip(scene + rng.normal(0, 0.004, scene.shape), 0, 1))
    old = u8(np.clip(scene + np.asarray(step), 0, 1))
    return old, fallback


def _composite(old, fallback, written, step="reveal", old_valid=None) -> Composite:
    w = written.astype(np.float32)
    kept = np.clip(np.round(w[..., None] * old + (1 - w[..., None]) * fallback), 0, 255).astype(np.uint8)
    return Composite(step, kept, fallback, old, w, old_valid)


def test_a_brightness_step_along_the_boundary_is_a_seam():
    old, fallback = _pair(step=(0.1, 0.1, 0.1))         # 25/255 brighter: a hard-edged disk of it
    read = check_seams(_composite(old, fallback, _disk()))
    assert read.finding is not None and read.finding.check == NAME
    assert read.measured["longest"] >= SEAM_MIN_CELLS


def test_a_colour_step_along_the_boundary_is_a_seam():
    old, fallback = _pair(step=(0.12, -0.04, -0.1))     # a warm tint, not a brightness change
    assert check_seams(_composite(old, fallback, _disk())).finding is not None


def test_a_clean_composite_has_no_seam():
    old, fallback = _pair()
    read = check_seams(_composite(old, fallback, _disk()))
    assert read.finding is None
    assert read.measured["band_cells"] > 0 and read.measured["seam_cells"] < SEAM_MIN_CELLS


def test_a_step_spread_over_a_wide_blend_is_no_line():
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    soft = np.clip(ndimage.gaussian_filter(_disk().astype(np.float32), 10), 0, 1)
    assert check_seams(_composite(old, fallback, soft)).finding is None


def test_an_edge_both_sources_have_is_no_seam():
    # the boundary runs along an object's edge that old and the fallback both show
    old, fallback = _pair()
    disk = _disk()
    old[disk] = (200, 40, 40)
    fallback[disk] = (200, 40, 40)
    assert check_seams(_composite(old, fallback, disk)).finding is None


def test_a_short_step_is_not_a_line():
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    small = _disk(r=5)
    assert check_seams(_composite(old, fallback, small)).finding is None


def test_old_outside_its_valid_frame_does_not_excuse_a_seam():
    # old's warped frame ends at the boundary (black beyond it): that frame edge is no edge of the
    # scene, so it cannot excuse the step kept shows there
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    disk = _disk()
    old[~disk] = 0
    assert check_seams(_composite(old, fallback, disk)).finding is None      # the frame edge hides it...
    read = check_seams(_composite(old, fallback, disk, old_valid=disk))
    assert read.finding is not None                                           # ...unless old_valid says so


def test_a_seam_makes_the_step_step_aside_and_names_the_check():
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    c = _composite(old, fallback, _disk())
    verdict = verify(c, checks=tuple((n, f) for n, f in CHECKS if n == NAME))
    assert not verdict.passed and verdict.failed_check == NAME
    assert np.array_equal(verdict.image, fallback)
    assert "seam" in verdict.reason()


def test_the_seam_check_is_registered():
    assert NAME in dict(CHECKS)


@pytest.mark.parametrize("written", [np.zeros(SHAPE, np.float32), np.ones(SHAPE, np.float32)])
def test_nothing_written_or_everything_written_finds_no_seam(written):
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    c = Composite("guard", fallback.copy(), fallback, old, written)
    read = check_seams(c)
    assert read.finding is None and read.measured["seam_cells"] == 0


def test_nan_weights_are_refused_before_the_seam_is_read():
    old, fallback = _pair(step=(0.1, 0.1, 0.1))
    with pytest.raises(InputError, match="written"):
        Composite("guard", fallback.copy(), fallback, old, np.full(SHAPE, np.nan, np.float32))


def test_tiny_and_odd_sized_pictures_are_read():
    for shape in ((1, 1), (3, 7), (37, 301)):
        old, fallback = _pair(shape=shape, step=(0.1, 0.1, 0.1))
        w = np.zeros(shape, np.float32)
        w[: shape[0] // 2] = 1.0
        assert check_seams(_composite(old, fallback, w)).measured["block"] >= 1


def test_hostile_composites_get_a_clear_error():
    old, fallback = _pair()
    with pytest.raises(InputError, match="written"):
        Composite("reveal", fallback, fallback, old, np.ones((3, 3), np.float32))
    with pytest.raises(InputError, match="uint8"):
        Composite("reveal", fallback.astype(np.float32), fallback, old, np.ones(SHAPE, np.float32))
