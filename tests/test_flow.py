"""The local motion field (respec/pixels/flow.py): a dense, smooth, sub-pixel field after the
global alignment, forward-backward checked; what Reveal Composite and the Drift Guard warp by."""
import numpy as np
import pytest
from scipy import ndimage

from respec.errors import InputError
from respec.pixels.alignment import Alignment, warp_float
from respec.pixels.flow import MAX_FLOW_PX, estimate_flow, warp_by_flow


def texture(side: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = ndimage.gaussian_filter(rng.random((side, side, 3)).astype(np.float32), (1.5, 1.5, 0))
    return (x - x.min()) / (x.max() - x.min())


def smooth_field(side: int, peak: float, seed: int) -> np.ndarray:
    """A smooth random displacement (correlation a quarter of the side) whose largest value is `peak` px."""
    f = ndimage.gaussian_filter(np.random.default_rng(seed).normal(0, 1, (side, side)), side / 4, mode="wrap")
    return f / np.abs(f).max() * peak


def displace(img: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """img sampled at p + (dx, dy): the target whose flow against img is (dx, dy)."""
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    return np.stack([ndimage.map_coordinates(img[..., c], [yy + dy, xx + dx], order=3, mode="nearest")
                     for c in range(img.shape[2])], axis=2).astype(np.float32)


def inside(a: np.ndarray, m: int = 12) -> np.ndarray:
    return a[m:-m, m:-m]


def test_a_smooth_local_warp_of_up_to_1_5_px_is_measured_to_a_tenth_of_a_pixel():
    ref = texture(192)
    dx, dy = smooth_field(192, 1.5, 1), smooth_field(192, 1.5, 2)
    cur = displace(ref, dy, dx)
    flow = estimate_flow(ref, cur)
    err = np.hypot(flow.dx - dx, flow.dy - dy)
    assert np.median(inside(err)) < 0.05 and np.percentile(inside(err), 95) < 0.15
    ok, why = flow.usable()
    assert ok, why
    assert flow.stats["consistent_share"] > 0.9
    assert flow.stats["residual_after"] < 0.3 * flow.stats["residual_before"]
    moved = warp_by_flow(ref, flow, order=3)
    assert np.abs(inside(moved - cur)).mean() < 0.25 * np.abs(inside(ref - cur)).mean()


def test_no_motion_gives_a_field_near_zero_through_noise_and_a_colour_drift():
    ref = texture(128, 3)
    rng = np.random.default_rng(4)
    y = np.linspace(0, 1, 128, dtype=np.float32)[:, None, None]
    cur = ref * np.float32(1.06) + np.float32(0.03) + 0.04 * y + rng.normal(0, 0.004, ref.shape).astype(np.float32)
    flow = estimate_flow(ref, cur)
    assert flow.usable()[0]
    assert flow.stats["p95_px"] < 0.1


def test_a_rerender_has_no_consistent_field_and_is_not_usable():
    flow = estimate_flow(texture(128, 5), texture(128, 6))
    ok, why = flow.usable()
    assert not ok and "consistent" in why and "re-render" in why
    assert flow.stats["consistent_share"] < 0.7


def test_a_motion_beyond_the_limit_is_not_usable_and_says_how_far():
    ref = texture(160, 7)
    cur = displace(ref, np.full((160, 160), 1.5), np.full((160, 160), 3.0))   # |d| = 3.35 px
    ok, why = estimate_flow(ref, cur).usable(max_px=MAX_FLOW_PX)
    assert not ok and "px" in why and "limit 2.0 px" in why


def test_pixels_without_evidence_get_the_field_of_their_surroundings():
    # A new object in the middle (cur shows something else there): left out by `valid`, the field
    # there is carried from around it, and none of it counts as evidence.
    ref = texture(160, 8)
    dx, dy = smooth_field(160, 1.0, 9), smooth_field(160, 1.0, 10)
    cur = displace(ref, dy, dx)
    hole = np.zeros((160, 160), bool)
    hole[60:100, 60:100] = True
    cur[hole] = texture(160, 11)[hole]
    flow = estimate_flow(ref, cur, valid=~hole)
    err = np.hypot(flow.dx - dx, flow.dy - dy)
    assert np.median(err[hole]) < 0.2
    assert not flow.evidence[hole].any()
    assert flow.usable()[0]


def test_the_field_on_a_box_and_the_warp_composed_with_the_global_alignment():
    # The reference sits in an earlier frame moved by a global alignment A; the field is measured
    # on A(ref) and warp_by_flow(ref, flow, A) resamples ref once into cur's geometry.
    side = 192
    orig = texture(side, 12)
    a = Alignment(2.0, -1.0, 0.99)
    aligned = warp_float(orig, a)
    dx, dy = smooth_field(side, 1.2, 13), smooth_field(side, 1.2, 14)
    cur = displace(aligned, dy, dx)
    box = (40, 150, 30, 160)
    flow = estimate_flow(aligned, cur, box=box)
    assert flow.box == box and flow.dx.shape == (110, 130)
    out = warp_by_flow(orig, flow, alignment=a, order=3)
    assert out.shape == (110, 130, 3)
    region = cur[40:150, 30:160]
    assert np.abs(inside(out - region)).mean() < 0.2 * np.abs(inside(aligned[40:150, 30:160] - region)).mean()
    # beyond its box the field is extended by its edge values, not zero
    dxx, _ = flow.crop((0, 10, 0, 10))
    assert dxx.shape == (10, 10) and np.allclose(dxx, flow.dx[0, 0])


def test_the_field_scaled_to_a_larger_image_doubles_its_motion():
    ref = texture(96, 15)
    cur = displace(ref, np.full((96, 96), 0.5), np.full((96, 96), -0.75))
    flow = estimate_flow(ref, cur, box=(20, 80, 20, 80))
    big = flow.scaled(2.0, (192, 192))
    assert big.box == (40, 160, 40, 160) and big.dx.shape == (120, 120)
    assert abs(float(np.median(big.dx)) + 1.5) < 0.1 and abs(float(np.median(big.dy)) - 1.0) < 0.1


def test_bad_inputs_are_refused_with_what_to_do():
    with pytest.raises(InputError, match="one size"):
        estimate_flow(np.zeros((32, 32)), np.zeros((32, 40)))
    with pytest.raises(InputError, match="valid mask"):
        estimate_flow(np.zeros((32, 32)), np.zeros((32, 32)), valid=np.ones((16, 16), bool))
    with pytest.raises(InputError, match="4×4"):
        estimate_flow(np.zeros((32, 32)), np.zeros((32, 32)), box=(0, 2, 0, 2))
    flow = estimate_flow(texture(64), texture(64))
    with pytest.raises(InputError, match="measured on"):
        warp_by_flow(np.zeros((32, 32, 3)), flow)
