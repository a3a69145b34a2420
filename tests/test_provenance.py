"""Change masks and per-pixel provenance (respec/pixels/change_mask.py, provenance.py) on synthetic images with known
rectangles, a global colour drift and pixel noise."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from respec.errors import InputError
from respec.history import CHANGE, History, TurnMask
from respec.pixels.change_mask import ChangeParams, change_for, change_mask
from respec.pixels.colour_fit import fit_colour, robust_scale
from respec.pixels.masks import dilate
from respec.pixels.provenance import provenance_of
from respec.store import SessionStore
from synthetic_scenes import background, draw_rect, drift, iou, rect_mask, u8

BOX = (30, 40, 62, 90)          # y0, x0, y1, x1 inside a 96×128 image


def test_colour_fit_recovers_a_per_channel_drift_despite_a_changed_region():
    scene = background(0)
    edited = drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.0)
    fit = fit_colour(scene.astype(np.float32), edited.astype(np.float32))
    assert np.allclose(fit.gain, (1.06, 0.95, 1.02), atol=0.01)
    assert np.allclose(fit.bias, (0.02, -0.015, 0.01), atol=0.01)
    # the box (13 % of the image) was left out of the fit as outliers
    assert 0.8 < fit.inlier_fraction < 0.9


def test_robust_scale_of_a_normal_sample_is_its_standard_deviation():
    x = np.random.default_rng(0).normal(3.0, 2.0, 200_000)
    med, sig = robust_scale(x)
    assert med == pytest.approx(3.0, abs=0.02) and sig == pytest.approx(2.0, rel=0.02)


def test_the_change_mask_is_the_drawn_rectangle_under_drift_and_noise():
    scene = background(0)
    prev = u8(scene)
    cur = u8(drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), noise=0.012))
    res = change_mask(prev, cur)
    assert res.mask.shape == (96, 128)
    assert iou(res.mask, rect_mask(res.mask.shape, BOX)) > 0.95
    assert res.info()["method"] and res.info()["fraction"] == pytest.approx(res.mask.mean(), abs=1e-6)


def _line_art(seed: int = 4, shape=(96, 128)) -> np.ndarray:
    """A scene with sharp edges everywhere (thin dark strokes on a textured ground), where an
    editor's blur changes many pixels by more than the noise."""
    img = background(seed, shape)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        y, x = rng.integers(0, shape[0] - 2), rng.integers(0, shape[1] - 12)
        img[y:y + 1, x:x + 12] = 0.05
        y, x = rng.integers(0, shape[0] - 12), rng.integers(0, shape[1] - 2)
        img[y:y + 12, x:x + 1] = 0.05
    return img


def test_an_editors_blur_is_matched_before_comparing_so_only_the_edit_is_marked():
    from scipy import ndimage
    scene = _line_art()
    edited = drift(ndimage.gaussian_filter(draw_rect(scene, BOX, (0.9, 0.1, 0.1)), (1.0, 1.0, 0)), noise=0.004)
    res = change_mask(u8(scene), u8(edited))
    assert res.info()["editor_blur_px"] in (0.75, 1.0)
    box = rect_mask(res.mask.shape, BOX)
    # the box and its blurred rim (a pixel around it), nothing of the strokes' blurred edges elsewhere
    assert iou(res.mask, dilate(box, 1)) > 0.9 and not (res.mask & ~dilate(box, 2)).any()
    # an editor that keeps the sharpness is compared as it is
    assert "editor_blur_px" not in change_mask(u8(scene), u8(drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)),
                                                                    noise=0.004))).info()


def test_a_drift_alone_is_no_change():
    scene = background(1)
    res = change_mask(u8(scene), u8(drift(scene, gain=(0.9, 1.1, 1.05), bias=(0.04, -0.03, 0), noise=0.015)))
    assert not res.mask.any()


def test_a_lossless_unchanged_image_gives_an_empty_mask_and_the_floor_threshold():
    img = u8(background(2))
    res = change_mask(img, img)
    assert not res.mask.any()
    assert res.threshold == pytest.approx(ChangeParams().min_delta)


def test_a_low_contrast_change_inside_the_noise_is_missed_as_documented():
    # The mask cannot see a change whose colour is the covered content's (up to the noise).
    scene = background(3)
    patch = scene[BOX[0]:BOX[2], BOX[1]:BOX[3]] + 0.004
    res = change_mask(u8(scene), u8(drift(draw_rect(scene, BOX, patch), noise=0.01)))
    assert res.mask.sum() < 0.05 * rect_mask(res.mask.shape, BOX).sum()


def test_isolated_noisy_pixels_are_cleaned_away():
    scene = background(4)
    cur = scene.copy()
    rng = np.random.default_rng(0)
    ys, xs = rng.integers(0, 96, 40), rng.integers(0, 128, 40)
    cur[ys, xs] = 1.0 - cur[ys, xs]          # 40 single-pixel flips: salt noise, not an edit
    res = change_mask(u8(scene), u8(cur), params=ChangeParams(smooth_size=0))
    assert not res.mask.any()


def test_a_turn_of_another_size_is_compared_at_the_history_size():
    scene = background(5)
    prev = u8(scene)
    big = Image.fromarray(u8(drift(draw_rect(scene, BOX, (0.1, 0.8, 0.2)), noise=0.0))).resize((256, 192), Image.BICUBIC)
    res = change_mask(prev, np.asarray(big))
    assert res.mask.shape == (96, 128)
    assert res.resized_from == (256, 192)
    assert iou(res.mask, rect_mask((96, 128), BOX)) > 0.9


def _three_turn_history():
    scene = background(6)
    box2 = (10, 10, 30, 30)
    i1 = draw_rect(scene, BOX, (0.9, 0.1, 0.1))                       # turn 1 adds a red box
    i2 = draw_rect(i1, box2, (0.1, 0.1, 0.9))                         # turn 2 adds a blue box elsewhere
    i3 = drift(draw_rect(i2, BOX, scene[BOX[0]:BOX[2], BOX[1]:BOX[3]]), noise=0.01)   # turn 3 removes the red box
    h = History.start(u8(scene))
    for img, text in ((i1, "add a red box"), (i2, "add a blue box"), (i3, "remove the red box")):
        h = h.append(u8(img), text, masks={CHANGE: change_for(h, u8(img))})
    return h, box2


def test_provenance_says_which_turns_changed_each_pixel():
    h, box2 = _three_turn_history()
    prov = provenance_of(h)
    assert prov.turns == 3 and prov.computed == ()
    y, x = (BOX[0] + BOX[2]) // 2, (BOX[1] + BOX[3]) // 2
    assert prov.turns_at(y, x) == [1, 3]
    assert prov.turns_at(20, 20) == [2]
    assert prov.turns_at(90, 5) == []
    last = prov.last_change()
    assert last[y, x] == 3 and last[20, 20] == 2 and last[90, 5] == 0
    assert prov.change_count()[y, x] == 2
    cov = prov.coverage(rect_mask((96, 128), BOX))
    assert cov[1] > 0.95 and cov[3] > 0.95 and cov.get(2, 0.0) == 0.0
    assert not prov.unchanged_since(0)[y, x] and prov.unchanged_since(3).all()


def test_missing_masks_are_computed_and_agree_with_stored_ones():
    h, _ = _three_turn_history()
    bare = History(tuple(t.__class__(t.index, t.image, t.instruction, t.sent_instruction) for t in h.turns))
    prov, again = provenance_of(h), provenance_of(bare)
    assert again.computed == (1, 2, 3)
    for a, b in zip(prov.changes, again.changes):
        assert np.array_equal(a, b)


def test_coverage_refuses_a_region_of_another_size():
    h, _ = _three_turn_history()
    with pytest.raises(InputError, match="resize"):
        provenance_of(h).coverage(np.ones((10, 10), bool))


def test_change_masks_are_stored_and_survive_a_store_reopen(tmp_path):
    h, _ = _three_turn_history()
    store = SessionStore(tmp_path / "s")
    s = store.create("p", h.turns[0].image)
    for t in h.turns[1:]:
        s = store.append("p", t.image, t.instruction, masks=dict(t.masks))
    assert s.turns[3].change.info == h.turns[3].change.info
    reopened = SessionStore(tmp_path / "s").load("p")
    assert all(not t.change.image.decoded for t in reopened.turns[1:])      # lazy: not decoded on load
    for t, orig in zip(reopened.turns[1:], h.turns[1:]):
        assert np.array_equal(t.change.mask, orig.change.mask)
        assert t.change.info == orig.change.info
    assert reopened.turns[0].change is None
    assert provenance_of(reopened).computed == ()


def test_stored_masks_follow_rewind_branch_and_gc(tmp_path):
    from respec import web
    h, _ = _three_turn_history()
    store = SessionStore(tmp_path / "s")
    store.create("p", h.turns[0].image)
    for t in h.turns[1:]:
        store.append("p", t.image, t.instruction, masks=dict(t.masks))
    b = store.branch("p", "q", at_turn=2)
    assert [t.change is not None for t in b.turns] == [False, True, True]
    assert b.turns[2].change.mask.any()
    mask1, mask2 = (store.load("p").turns[i].change.image.digest for i in (1, 2))
    assert web.session_image(store, "p", mask2).status == 200   # the panel may read a turn's mask
    store.delete_session("q")
    store.rewind("p", 1)
    assert store.gc(min_age_s=0) >= 2                        # turn 2's and 3's images, turn 2's mask
    gone = web.session_image(store, "p", mask2)
    assert gone.status == 404 and "not part of session" in gone.json()["error"]
    assert not store.files.path(mask2).exists()
    assert web.session_image(store, "p", mask1).status == 200   # turn 1's mask stays with turn 1
    assert np.array_equal(SessionStore(tmp_path / "s").load("p").turns[1].change.mask, h.turns[1].change.mask)


def test_a_turn_mask_must_be_named_and_typed():
    h = History.start(u8(background(0)))
    with pytest.raises(InputError, match="not allowed"):
        h.append(u8(background(1)), "x", masks={"Bad Name": TurnMask.from_mask(np.zeros((2, 2), bool))})
    with pytest.raises(InputError, match="TurnMask"):
        h.append(u8(background(1)), "x", masks={CHANGE: np.zeros((2, 2), bool)})


# ----------------------------------------------------------------------------- held_near, kept by content

def _held_near_directly(history, prov, k, j):
    """held_near's definition computed on whole images each time (the reference it must equal)."""
    from scipy import ndimage
    from respec.pixels.colour_fit import grey_of
    from respec.pixels.change_mask import STABILITY_BLOCK, STABILITY_SIDE, STABILITY_TEXTURE_STD
    from respec.pixels.change_record import grid_from_info
    from respec.pixels.provenance import NEAR_BLOCKS
    from respec.pixels.work_images import as_float_rgb
    from respec.images import as_rgb
    grid = grid_from_info(prov.records[j])
    w, h = prov.size
    f = min(1.0, STABILITY_SIDE / float(max(h, w)))
    small = (max(STABILITY_BLOCK, round(w * f)), max(STABILITY_BLOCK, round(h * f)))
    B = STABILITY_BLOCK
    nby, nbx = grid.shape

    def at_small(x):
        return np.asarray(Image.fromarray(np.asarray(x, np.float32)).resize(small, Image.BOX), np.float32)

    def tiles(x):
        return x[:nby * B, :nbx * B].reshape(nby, B, nbx, B).transpose(0, 2, 1, 3).reshape(nby, nbx, -1)

    c_k, c_j = prov.in_frame(prov.changes[k], k, j), prov.changes[j]
    ck, cj = tiles(at_small(c_k)).mean(-1), tiles(at_small(c_j)).mean(-1)
    near = ndimage.binary_dilation(ck > 0, iterations=NEAR_BLOCKS) & (ck <= 0.5) & (cj <= 0.5)
    if not near.any():
        return 0, 0, 0
    keep = tiles((at_small(dilate(c_k | c_j, 2)) < 0.01).astype(np.float64))
    n_keep = keep.sum(-1)

    def block_std(img):
        g = ndimage.gaussian_filter(grey_of(as_float_rgb(as_rgb(img.array).resize(small, Image.BOX))), 1.0)
        t = tiles(g).astype(np.float64)
        m = (t * keep).sum(-1) / np.maximum(n_keep, 1.0)
        return np.sqrt(((t - m[..., None]) ** 2 * keep).sum(-1) / np.maximum(n_keep, 1.0))

    textured = (block_std(history.turns[j].image) >= STABILITY_TEXTURE_STD) | (block_std(history.turns[j - 1].image) >= STABILITY_TEXTURE_STD)
    n = near & textured & (n_keep >= 0.25 * B * B)
    return int((n & ~grid).sum()), int(n.sum()), int(near.sum())


@pytest.mark.parametrize("shape", [(96, 128), (530, 700)])
def test_held_near_kept_by_content_gives_the_same_figures_as_whole_images(shape):
    # 530x700 is analysed at a stability size 2.6 times smaller: the per-block crops must line up
    from respec.pixels import provenance as pv
    from respec.pixels.analysis_cache import CACHE
    scene = background(5, shape)
    h = History.start(u8(scene))
    H, W = shape
    boxes = [(H // 4, W // 5, H // 2, W // 2), (H // 2, W // 2, 3 * H // 4, 4 * W // 5), (H // 8, W // 2, H // 3, 3 * W // 4)]
    img = scene
    for i, box in enumerate(boxes):
        img = drift(draw_rect(img, box, (0.8 - 0.3 * i, 0.2, 0.3 + 0.2 * i)), gain=(1, 1, 1), bias=(0, 0, 0),
                    noise=0.01, seed=40 + i)
        h = h.append(u8(img), f"add box {i}", masks={CHANGE: change_for(h, u8(img))})
    prov = provenance_of(h)
    pairs = [(k, j) for k in range(1, 4) for j in range(k, 4)]
    assert any(_held_near_directly(h, prov, k, j)[1] for k, j in pairs)
    for k, j in pairs:
        assert pv.held_near(h, prov, k, j) == _held_near_directly(h, prov, k, j), (k, j)
    for k in range(1, 4):        # one NearEvidence for every later turn, as confidence_record asks
        evidence = pv.NearEvidence(h, prov, k)
        assert [evidence.held(j) for j in range(k, 4)] == [_held_near_directly(h, prov, k, j) for j in range(k, 4)]
    # asked again (the next restoration turn), nothing per image or per turn is computed again
    before = (len(CACHE.small), len(CACHE.grey))
    for k, j in pairs:
        pv.held_near(h, prov, k, j)
    assert (len(CACHE.small), len(CACHE.grey)) == before
