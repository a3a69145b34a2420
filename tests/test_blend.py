"""The multi-band blend (respec/pixels/blend.py): exact away from the seam, a smooth colour transition,
texture that does not ghost."""
import numpy as np
import pytest
from scipy import ndimage

from respec.errors import InputError
from respec.pixels.blend import levels_for, multiband_blend


def _texture(seed: int, shape=(96, 128)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(ndimage.gaussian_filter(rng.random(shape + (3,)), (1, 1, 0)) * 1.6 - 0.3, 0, 1).astype(np.float32)


def _disc(shape=(96, 128), r=30) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    return ((yy - shape[0] / 2) ** 2 + (xx - shape[1] / 2) ** 2) <= r * r


def test_a_weight_of_one_everywhere_gives_the_top_image_and_zero_the_base():
    a, b = _texture(0), _texture(1)
    ones = np.ones(a.shape[:2], np.float32)
    assert np.array_equal(multiband_blend(a, b, ones, 4), b)
    assert np.array_equal(multiband_blend(a, b, ones * 0, 4), a)


def test_far_from_the_seam_the_top_image_is_kept_exactly_inside_and_the_base_outside():
    shape = (256, 320)
    a, b = _texture(2, shape), _texture(3, shape)
    m = _disc(shape, r=90)
    levels = 3
    out = multiband_blend(a, b, m.astype(np.float32), levels)
    reach = 8 * 2 ** levels        # the filters of every level together reach less than this
    deep_in = ndimage.binary_erosion(m, iterations=reach)
    far_out = ndimage.binary_erosion(~m, iterations=reach, border_value=1)
    assert deep_in.sum() > 50 and far_out.sum() > 1000
    assert np.abs(out[deep_in] - b[deep_in]).max() < 1e-4
    assert np.abs(out[far_out] - a[far_out]).max() < 1e-4


def test_a_colour_step_is_spread_over_the_coarse_bands_width_instead_of_left_at_the_seam():
    a = np.full((96, 128, 3), 0.3, np.float32)
    b = np.full((96, 128, 3), 0.6, np.float32)
    m = _disc().astype(np.float32)
    hard = multiband_blend(a, b, m, 0)
    soft = multiband_blend(a, b, m, 4)
    step = lambda x: max(np.abs(np.diff(x[..., 0], axis=0)).max(), np.abs(np.diff(x[..., 0], axis=1)).max())
    assert step(hard) == pytest.approx(0.3, abs=1e-6)
    assert step(soft) < 0.1


def test_fine_texture_changes_within_a_few_pixels_of_the_seam_instead_of_ghosting():
    # The top image is the base plus a fine pattern: a linear feather as wide as the coarse band
    # would show half the pattern far into the base; the multi-band blend keeps it near the edge.
    base = np.full((96, 128, 3), 0.5, np.float32)
    yy, xx = np.mgrid[:96, :128]
    pattern = (0.2 * np.sign(np.sin(xx * np.pi / 2) * np.sin(yy * np.pi / 2)))[..., None].astype(np.float32)
    top = base + pattern
    m = _disc()
    out = multiband_blend(base, top, m.astype(np.float32), 4)
    outside_ring = ndimage.binary_dilation(m, iterations=12) & ~ndimage.binary_dilation(m, iterations=4)
    inside_ring = ndimage.binary_erosion(m, iterations=4) & ~ndimage.binary_erosion(m, iterations=12)
    ghost = np.abs(out[outside_ring] - base[outside_ring]).mean()
    kept = np.abs(out[inside_ring] - top[inside_ring]).mean()
    assert ghost < 0.02 and kept < 0.02


def test_levels_follow_the_transition_and_stop_at_a_few_pixels_for_small_images():
    assert levels_for(16, (1024, 1024)) == 4
    assert levels_for(1, (1024, 1024)) == 1
    assert levels_for(256, (20, 40)) == 2     # 20 px -> 10 -> 5: two levels keep >= 4 px a side


def test_images_of_other_shapes_are_refused_with_the_shapes_named():
    a = np.zeros((10, 12, 3), np.float32)
    with pytest.raises(InputError, match=r"\(10, 12, 3\), \(10, 11, 3\)"):
        multiband_blend(a, np.zeros((10, 11, 3), np.float32), np.zeros((10, 12)), 2)
    with pytest.raises(InputError, match="levels"):
        multiband_blend(a, a, np.zeros((10, 12)), -1)


def test_odd_sizes_and_a_level_count_beyond_the_image_still_reconstruct_exactly():
    a, b = _texture(4, (37, 51)), _texture(5, (37, 51))
    w = np.zeros((37, 51), np.float32)
    w[10:25, 12:40] = 0.5
    out = multiband_blend(a, b, w, 9)
    # equal inputs must come back unchanged whatever the weight: the pyramid is exact
    assert np.abs(multiband_blend(a, a, w, 9) - a).max() < 1e-5
    assert out.shape == a.shape and np.isfinite(out).all()
