"""OCCUR metrics (appendix A.5): region algebra, masked PSNR / LPIPS / CLIP, sim, S_TC, NaN rules."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from respec import models
from respec.errors import DownloadNotAllowedError, InputError, MissingWeightsError
from respec.eval import metric_models
from respec.eval.masks import TrajectoryMasks
from respec.eval.metric_models import build_tiny_scorer
from respec.eval.metrics import masked_psnr, occur_regions, reference_selection_accuracy
from respec.plan import Plan
from respec.tiny.eval_models import TINY_CLIP_CFG, save_tiny_eval_files


@pytest.fixture(scope="module")
def scorer():
    torch.manual_seed(0)
    return build_tiny_scorer(seed=0)


def box(shape, r0, r1, c0, c1):
    m = np.zeros(shape, bool)
    m[r0:r1, c0:c1] = True
    return m


def photo(seed=0, size=64):
    """A smooth random picture (so LPIPS and CLIP see structure, not only noise)."""
    rng = np.random.RandomState(seed)
    small = (rng.rand(8, 8, 3) * 255).astype(np.uint8)
    return np.asarray(Image.fromarray(small).resize((size, size), Image.BICUBIC))


def traj(occ, new):
    return TrajectoryMasks(occ=list(occ), new=list(new), records=[{}] * len(occ), occluder_label="x",
                           turns=list(range(1, len(occ) + 1)))


# ----------------------------------------------------------------------------- region algebra

def test_region_algebra_follows_appendix_a5_on_hand_made_masks():
    s = (8, 8)
    occ = [box(s, 2, 6, 2, 6), box(s, 2, 6, 2, 6), box(s, 2, 4, 6, 8)]  # the occluder moves at turn N=3
    new = [np.zeros(s, bool), box(s, 6, 8, 0, 2), box(s, 4, 6, 2, 4)]    # a new object lands on the old area
    r_restore, r_preserve = occur_regions(traj(occ, new))
    expected_restore = box(s, 2, 6, 2, 6) & ~box(s, 4, 6, 2, 4)          # M_occ^{1:N} \ (M_occ^N | M_new^N)
    occ_all = box(s, 2, 6, 2, 6) | box(s, 2, 4, 6, 8)
    new_all = box(s, 6, 8, 0, 2) | box(s, 4, 6, 2, 4)
    assert np.array_equal(r_restore, expected_restore) and r_restore.sum() == 12
    assert np.array_equal(r_preserve, ~(occ_all | new_all)) and r_preserve.sum() == 40


def test_regions_are_computed_on_the_reference_grid_when_mask_sizes_differ():
    occ = [box((8, 8), 0, 4, 0, 4), np.zeros((16, 16), bool)]
    new = [np.zeros((8, 8), bool), np.zeros((16, 16), bool)]
    r_restore, r_preserve = occur_regions(traj(occ, new), size=(16, 16))
    assert r_restore.shape == (16, 16) and np.array_equal(r_restore, box((16, 16), 0, 8, 0, 8))
    assert np.array_equal(r_preserve, ~r_restore)


def test_region_algebra_refuses_mismatched_turn_counts():
    with pytest.raises(InputError, match="one occluder mask and one new-object mask per turn"):
        occur_regions(traj([np.zeros((4, 4), bool)] * 2, [np.zeros((4, 4), bool)]))


# ----------------------------------------------------------------------------- masked PSNR

def test_masked_psnr_equals_a_hand_computation_over_the_masked_pixels_only():
    ref = np.zeros((4, 4, 3), np.uint8)
    gen = ref.copy()
    gen[0, 0] = 10
    gen[0, 1] = 20
    gen[3, 3] = 255           # outside the mask: must not count
    mask = box((4, 4), 0, 1, 0, 2)
    mse = ((10 / 255) ** 2 + (20 / 255) ** 2) / 2
    db = 10 * math.log10(1 / mse)
    got = masked_psnr(gen, ref, mask, cap=50)
    assert got["psnr_db"] == pytest.approx(db, rel=1e-12)
    assert got["psnr_norm"] == pytest.approx(db / 50, rel=1e-12)


def test_psnr_normalisation_clips_to_the_configurable_cap():
    ref = np.zeros((4, 4, 3), np.uint8)
    gen = ref.copy()
    gen[0, 0] = 1             # one of 16 pixels off by 1/255: 60.2 dB
    m = np.ones((4, 4), bool)
    assert masked_psnr(gen, ref, m, cap=50)["psnr_norm"] == 1.0
    assert masked_psnr(gen, ref, m, cap=100)["psnr_norm"] == pytest.approx(masked_psnr(gen, ref, m)["psnr_db"] / 100)
    assert masked_psnr(255 - ref, ref, m, cap=50)["psnr_norm"] == 0.0   # 0 dB floor
    with pytest.raises(InputError):
        masked_psnr(gen, ref, m, cap=0)


def test_identical_regions_give_psnr_norm_one():
    img = photo(1)
    got = masked_psnr(img, img, box((64, 64), 5, 20, 5, 20))
    assert got["psnr_db"] == math.inf and got["psnr_norm"] == 1.0


# ----------------------------------------------------------------------------- LPIPS and CLIP

def test_masked_lpips_pastes_the_reference_outside_the_mask(scorer):
    ref, other = photo(1), photo(2)
    mask = box((64, 64), 16, 48, 16, 48)
    outside_only = np.where(mask[:, :, None], ref, other)   # differs from ref only outside the mask
    assert scorer.masked_lpips(outside_only, ref, mask) == 0.0
    # Without the composite, the network's receptive field lets the outside leak into the region:
    naive = scorer.lpips_model(*(torch.from_numpy(a.copy()).permute(2, 0, 1)[None].float() / 127.5 - 1
                                 for a in (outside_only, ref)))[0, 0].detach().numpy()
    assert naive[mask].mean() > 1e-4


def test_masked_lpips_is_the_spatial_map_of_the_composite_averaged_over_the_mask(scorer):
    ref, gen = photo(1), photo(2)
    mask = box((64, 64), 8, 40, 20, 60)
    composite = np.where(mask[:, :, None], gen, ref)
    to_t = lambda a: torch.from_numpy(a.copy()).permute(2, 0, 1)[None].float() / 127.5 - 1
    with torch.no_grad():
        dmap = scorer.lpips_model(to_t(composite), to_t(ref))[0, 0].numpy()
    assert scorer.masked_lpips(gen, ref, mask) == pytest.approx(float(dmap[mask].mean()), rel=1e-6)


def test_masked_clip_ignores_pixels_outside_the_mask_inside_its_box(scorer):
    ref, gen = photo(1), photo(2)
    ring = box((64, 64), 10, 50, 10, 50) & ~box((64, 64), 20, 40, 20, 40)   # a hollow square
    gen_changed_in_hole = gen.copy()
    gen_changed_in_hole[20:40, 20:40] = 0                                    # inside the box, outside the mask
    assert scorer.masked_clip(gen_changed_in_hole, ref, ring) == scorer.masked_clip(gen, ref, ring)


def test_clip_input_fills_and_pads_with_clips_mean_colour(scorer):
    img = photo(3)
    wide = box((64, 64), 30, 34, 0, 64)                  # 4×64 region: the square pad is mostly fill
    x = scorer.clip_input(img, wide, (30, 34, 0, 64))
    assert tuple(x.shape) == (3, 224, 224)
    assert float(x[:, :90].abs().max()) < 1e-5           # padding = mean colour = 0 after normalising
    assert float(x[:, 100:124].abs().max()) > 0.1        # the region itself is there, centred


def test_identical_images_score_one_everywhere(scorer):
    img = photo(4)
    s = (64, 64)
    masks = traj([box(s, 10, 30, 10, 30), box(s, 10, 20, 40, 60)], [np.zeros(s, bool), box(s, 50, 60, 0, 10)])
    res = scorer.occur_score(img, img, masks)
    assert res["S_restore"] == 1.0 and res["S_preserve"] == 1.0 and res["S_TC"] == 1.0
    assert res["restore"]["lpips"] == 0.0 and res["restore"]["clip"] == 1.0 and res["restore"]["psnr_norm"] == 1.0
    assert res["whole_image"]["sim"] == 1.0


def test_the_score_carries_the_regions_it_was_computed_on(scorer):
    s = (64, 64)
    masks = traj([box(s, 8, 32, 8, 32), box(s, 40, 60, 40, 60)], [np.zeros(s, bool), box(s, 0, 8, 0, 8)])
    ref = photo(1, size=32)                                     # the grid is I_ref's: 32x32
    res = scorer.occur_score(photo(2), ref, masks)
    want = occur_regions(masks, size=(32, 32))
    assert np.array_equal(res["regions"]["R_restore"], want[0])
    assert np.array_equal(res["regions"]["R_preserve"], want[1])
    assert res["areas"]["R_restore"] == pytest.approx(want[0].mean())


def test_the_final_image_is_the_given_one_else_the_historys_latest():
    from respec.history import History
    from respec.eval.scoring import final_and_reference
    h = History.start(photo(0)).append(photo(1), "a").append(photo(2), "b")
    final, ref = final_and_reference(h, reference_turn=0)
    assert final is h.current.image and ref is h.image(0)
    given = photo(9)
    final, ref = final_and_reference(h, final_image=given, reference_image=photo(8), reference_turn=1)
    assert final is given and ref is h.image(1)                  # a reference turn wins over an image
    with pytest.raises(InputError, match="final image"):
        final_and_reference(reference_image=photo(8))
    with pytest.raises(InputError, match="no history is connected"):
        final_and_reference(final_image=given, reference_turn=0)
    with pytest.raises(InputError, match="needs I_ref"):
        final_and_reference(h)


def test_a_change_outside_r_restore_leaves_s_restore_unchanged(scorer):
    ref, gen = photo(5), photo(6)
    s = (64, 64)
    masks = traj([box(s, 8, 32, 8, 32), box(s, 8, 32, 8, 32), np.zeros(s, bool)],
                 [np.zeros(s, bool)] * 3)
    r_restore, _ = occur_regions(masks)
    gen2 = gen.copy()
    gen2[~r_restore] = 255 - gen2[~r_restore]            # change everything but R_restore
    a, b = scorer.occur_score(gen, ref, masks), scorer.occur_score(gen2, ref, masks)
    assert a["S_restore"] == b["S_restore"] and a["restore"] == b["restore"]
    assert a["S_preserve"] != b["S_preserve"]


def test_sim_is_the_mean_of_psnr_norm_one_minus_lpips_and_clip(scorer):
    ref, gen = photo(7), photo(8)
    r = scorer.sim(gen, ref, box((64, 64), 0, 40, 0, 40), psnr_cap=30)
    assert r["psnr_norm"] == pytest.approx(min(max(r["psnr_db"], 0), 30) / 30)
    assert r["sim"] == pytest.approx((r["psnr_norm"] + 1 - r["lpips_norm"] + r["clip_norm"]) / 3)
    assert 0.0 <= r["lpips_norm"] <= 1.0 and 0.0 <= r["clip_norm"] <= 1.0


def test_s_tc_is_the_mean_of_restore_and_preserve(scorer):
    ref, gen = photo(9), photo(10)
    s = (64, 64)
    res = scorer.occur_score(gen, ref, traj([box(s, 0, 30, 0, 30), np.zeros(s, bool)], [np.zeros(s, bool)] * 2))
    assert res["S_TC"] == pytest.approx((res["S_restore"] + res["S_preserve"]) / 2)
    assert res["areas"]["R_restore"] == pytest.approx(900 / 4096)


# ----------------------------------------------------------------------------- NaN and resizing rules

def test_an_empty_restoration_region_gives_nan_with_a_reason_not_a_crash(scorer):
    img, other = photo(1), photo(2)
    s = (64, 64)
    never_found = traj([np.zeros(s, bool)] * 3, [np.zeros(s, bool)] * 3)
    res = scorer.occur_score(other, img, never_found)
    assert math.isnan(res["S_restore"]) and math.isnan(res["S_TC"]) and not math.isnan(res["S_preserve"])
    assert "not found on any turn" in res["restore"]["reason"] and res["reasons"]
    still_covered = traj([box(s, 0, 10, 0, 10)] * 2, [np.zeros(s, bool)] * 2)
    assert "still covered" in scorer.occur_score(other, img, still_covered)["restore"]["reason"]


def test_an_empty_preservation_region_gives_nan_with_a_reason(scorer):
    s = (64, 64)
    everything = traj([np.ones(s, bool), np.zeros(s, bool)], [np.zeros(s, bool)] * 2)
    res = scorer.occur_score(photo(2), photo(1), everything)
    assert math.isnan(res["S_preserve"]) and "cover the whole image" in res["preserve"]["reason"]
    assert not math.isnan(res["S_restore"])   # the other region still scores


def test_a_generated_image_of_another_size_is_resized_to_the_reference(scorer):
    ref = photo(11, 32)
    big = photo(12, 64)
    s = (32, 32)
    masks = traj([box(s, 4, 20, 4, 20), np.zeros(s, bool)], [np.zeros(s, bool)] * 2)
    res = scorer.occur_score(big, ref, masks)
    assert res["generated_resized_from"] == [64, 64] and res["size"] == [32, 32]
    by_hand = np.asarray(Image.fromarray(big).resize((32, 32), Image.BICUBIC))
    assert res["S_restore"] == scorer.occur_score(by_hand, ref, masks)["S_restore"]


# ----------------------------------------------------------------------------- reference accuracy (D.4)

def test_reference_selection_accuracy_compares_restoration_source_id_with_ground_truth():
    plan = lambda rid: Plan(turn=3, user_instruction="remove it", synthesis_instruction="x",
                            is_restoration=True, restoration_source_id=rid)
    acc = reference_selection_accuracy([(plan(1), 1), (plan(0), 1), (plan(None), 2), (plan(2), None)])
    assert acc == {"accuracy": 1 / 3, "correct": 1, "n": 3, "without_ground_truth": 1}


def test_reference_accuracy_of_row_outcomes_leaves_out_those_without_a_verdict():
    from respec.eval.metrics import reference_accuracy
    assert reference_accuracy([True, False, None, True]) == {"accuracy": 2 / 3, "correct": 2, "n": 3,
                                                               "without_ground_truth": 1}
    assert math.isnan(reference_accuracy([None])["accuracy"])


# ----------------------------------------------------------------------------- loading

@pytest.mark.slow
def test_scorer_loads_its_weights_from_local_files_once(tmp_path):
    folder = tmp_path / "respec_home" / "models" / "respec_metrics"
    files = save_tiny_eval_files(folder)
    models.CACHE.clear()
    s1 = metric_models.load_scorer("tiny-alexnet.pth", "tiny-clip.safetensors", clip_arch=TINY_CLIP_CFG, device="cpu")
    loads = models.CACHE.loads
    s2 = metric_models.load_scorer("tiny-alexnet.pth", "tiny-clip.safetensors", clip_arch=TINY_CLIP_CFG, device="cpu")
    assert models.CACHE.loads == loads and s2.lpips_model is s1.lpips_model and s2.clip_model is s1.clip_model
    trunk = torch.load(files["lpips_trunk"], weights_only=True)
    assert torch.equal(dict(s1.lpips_model.net.named_parameters())["slice3.6.weight"], trunk["features.6.weight"])
    models.CACHE.clear()


def test_missing_metric_weights_name_the_folder_searched_and_downloads_need_consent(monkeypatch):
    with pytest.raises(MissingWeightsError, match="respec_metrics"):
        metric_models.load_scorer("no-such-trunk.pth", device="cpu")
    monkeypatch.setenv("RESPEC_ALLOW_DOWNLOADS", "0")
    monkeypatch.setattr(metric_models, "_hub_checkpoint", lambda name: None)
    with pytest.raises(DownloadNotAllowedError, match="allow downloads"):
        metric_models.resolve_lpips_trunk()
    with pytest.raises(DownloadNotAllowedError, match="allow downloads"):
        metric_models.resolve_clip("someone/not-cached-clip")


@pytest.mark.slow
def test_weights_of_another_architecture_are_refused_clearly(tmp_path):
    from safetensors.torch import save_file
    from respec.errors import CorruptWeightsError
    folder = tmp_path / "respec_home" / "models" / "respec_metrics"
    files = save_tiny_eval_files(folder)
    save_file({"visual.proj": torch.zeros(3, 3)}, str(folder / "not-clip.safetensors"))
    torch.save({"classifier.1.weight": torch.zeros(2, 2)}, folder / "not-alexnet.pth")
    models.CACHE.clear()
    with pytest.raises(CorruptWeightsError, match="CLIP ViT-B/32"):
        metric_models.load_scorer("tiny-alexnet.pth", "not-clip.safetensors", clip_arch=TINY_CLIP_CFG, device="cpu")
    with pytest.raises(CorruptWeightsError, match="AlexNet"):
        metric_models.load_scorer("not-alexnet.pth", str(files["clip"]), clip_arch=TINY_CLIP_CFG, device="cpu")
    models.CACHE.clear()


# ----------------------------------------------------------------------------- input edge cases

@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64, np.int64])
def test_zero_one_masks_of_any_dtype_mark_their_ones(dtype):
    from respec.images import as_mask
    m = np.zeros((8, 8), dtype)
    m[2:5, 3:6] = 1
    assert as_mask(m).sum() == 9 and as_mask(m)[3, 4]


def test_0_255_and_0_1_float_masks_keep_their_meaning():
    from respec.images import as_mask
    assert as_mask(np.array([[0, 255], [128, 127]], np.uint8)).tolist() == [[False, True], [True, False]]
    assert as_mask(np.array([[0.0, 0.7], [0.2, 1.0]])).tolist() == [[False, True], [False, True]]
    assert as_mask(np.array([[0.0, 200.0], [100.0, 255.0]], np.float32)).tolist() == [[False, True], [False, True]]


def test_a_uint8_zero_one_mask_scores_like_the_bool_mask(scorer):
    s = (64, 64)
    region = box(s, 8, 40, 8, 40)
    as_bool = scorer.sim(photo(3), photo(4), region)
    as_uint8 = scorer.sim(photo(3), photo(4), region.astype(np.uint8))
    assert not math.isnan(as_uint8["sim"]) and as_uint8["sim"] == as_bool["sim"]


def test_images_under_32_px_are_refused_clearly_not_crashed_inside_lpips(scorer):
    with pytest.raises(InputError, match=r"24×24 px.*at least 32×32"):
        scorer.sim(photo(1, 24), photo(2, 24))


def test_a_different_aspect_ratio_is_refused_not_stretched(scorer):
    wide = np.asarray(Image.fromarray(photo(5, 64)).resize((96, 48)))
    with pytest.raises(InputError, match=r"96×48.*64×64.*different aspect ratios"):
        scorer.sim(wide, photo(6, 64))
    # rounding to a multiple of 16 (an editor's output size) is within the tolerance and recorded
    near = np.asarray(Image.fromarray(photo(5, 64)).resize((64, 66)))
    assert scorer.sim(near, photo(6, 64))["generated_resized_from"] == [64, 66]
