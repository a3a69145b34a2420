"""OCCUR-Bench scores (paper §3.3, appendices A.5 and D.4/D.5).

Everything a reader needs to recompute the numbers is here and in docs/evaluation.md:

* the region algebra of A.5 (`occur_regions`):
  M_occ^{1:N} = |_t M_occ^t, M_new^{1:N} = |_t M_new^t,
  R_restore  = M_occ^{1:N} \\ (M_occ^N | M_new^N),
  R_preserve = Omega \\ (M_occ^{1:N} | M_new^{1:N});
* the three masked measures and their normalisation to [0, 1]
  (`masked_psnr`, `Scorer.masked_lpips`, `Scorer.masked_clip`);
* sim = mean(PSNR_norm, 1 - LPIPS_norm, CLIP_norm), S_TC = mean(S_restore, S_preserve);
* the whole-image measures of D.5 (the same measures with R = Omega);
* reference-selection accuracy of D.4.

An empty region never raises: its scores are NaN and the record says why. The LPIPS and CLIP
networks the Scorer holds are found and built in respec/eval/metric_models.py.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from PIL import Image

from .. import comfy
from ..errors import InputError
from ..images import as_mask, resize_mask, rgb_array
from ..timing import StageTimer

DEFAULT_PSNR_CAP = 50.0          # dB; PSNR_norm = clip(PSNR, 0, cap) / cap
CLIP_INPUT_SIZE = 224
# OpenAI CLIP's input normalisation; non-region pixels and the square padding are set to
# this mean so that, once normalised, they are exactly zero ("nothing there").
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


# --------------------------------------------------------------------------- small helpers

MIN_SIDE = 32               # AlexNet-LPIPS needs at least this many pixels per side
ASPECT_TOLERANCE = 0.05     # relative aspect-ratio difference still resized (editors round sizes to 16 px)


def prepare_pair(generated: Any, reference: Any) -> tuple[np.ndarray, np.ndarray, dict]:
    """RGB uint8 arrays of the same size: the generated image is resized (bicubic) to the
    reference's, recorded in info["generated_resized_from"]. Refused (InputError): a side under
    MIN_SIDE, or aspect ratios more than ASPECT_TOLERANCE apart (resizing would stretch the content
    and compare misplaced pixels)."""
    ref = rgb_array(reference)
    gen = rgb_array(generated)
    for name, a in (("generated", gen), ("reference", ref)):
        if min(a.shape[:2]) < MIN_SIDE:
            raise InputError(f"the {name} image is {a.shape[1]}×{a.shape[0]} px; the scores need images of at "
                             f"least {MIN_SIDE}×{MIN_SIDE} px (AlexNet-LPIPS cannot read smaller ones)")
    info: dict = {"size": [ref.shape[1], ref.shape[0]]}
    ratio = (gen.shape[1] / gen.shape[0]) / (ref.shape[1] / ref.shape[0])
    if abs(ratio - 1.0) > ASPECT_TOLERANCE:
        raise InputError(f"the generated image ({gen.shape[1]}×{gen.shape[0]}) and the reference "
                         f"({ref.shape[1]}×{ref.shape[0]}) have different aspect ratios; resizing one to the "
                         "other would stretch the content. Edit at the reference's size (or crop both alike).")
    if gen.shape != ref.shape:
        info["generated_resized_from"] = [gen.shape[1], gen.shape[0]]
        gen = np.asarray(Image.fromarray(gen).resize((ref.shape[1], ref.shape[0]), Image.BICUBIC))
    return gen, ref, info


# --------------------------------------------------------------------------- region algebra (A.5)

def _union(masks: Sequence[np.ndarray], shape_hw) -> np.ndarray:
    out = np.zeros(shape_hw, dtype=bool)
    for m in masks:
        out |= resize_mask(m, shape_hw)
    return out


def occur_regions(traj_masks: Any, size: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(R_restore, R_preserve) of appendix A.5 from the per-turn masks of turns 1..N.

    `traj_masks` has `.occ` and `.new` (lists of N bool masks, turn order, last = final turn N),
    e.g. a masks.TrajectoryMasks. `size` = (width, height) of the evaluation grid (the reference
    image); masks of another size are resized nearest-neighbour onto it. Default: turn N's size.
    """
    occ, new = list(traj_masks.occ), list(traj_masks.new)
    if not occ or len(occ) != len(new):
        raise InputError(f"need one occluder mask and one new-object mask per turn 1..N; "
                         f"got {len(occ)} occluder and {len(new)} new-object masks")
    shape_hw = (size[1], size[0]) if size is not None else as_mask(occ[-1]).shape
    occ_all = _union(occ, shape_hw)                  # M_occ^{1:N}
    new_all = _union(new, shape_hw)                  # M_new^{1:N}
    final_cover = resize_mask(occ[-1], shape_hw) | resize_mask(new[-1], shape_hw)  # M_occ^N | M_new^N
    r_restore = occ_all & ~final_cover
    r_preserve = ~(occ_all | new_all)
    return r_restore, r_preserve


def _empty_reason(region: str, traj_masks: Any, shape_hw) -> str:
    occ_any = [bool(resize_mask(m, shape_hw).any()) for m in traj_masks.occ]
    if region == "restore":
        if not any(occ_any):
            return ("R_restore is empty: the occluder was not found on any turn (every occluder mask is empty; "
                    "see the mask records for the detection attempts)")
        return ("R_restore is empty: every pixel the occluder covered during the trajectory is still covered "
                "by the occluder or a new object in the final image")
    return "R_preserve is empty: the occluder and new-object masks cover the whole image"


# --------------------------------------------------------------------------- masked PSNR

def masked_psnr(generated: np.ndarray, reference: np.ndarray, mask: np.ndarray | None,
                cap: float = DEFAULT_PSNR_CAP) -> dict:
    """PSNR over the masked pixels only, and its normalisation clip(PSNR, 0, cap) / cap.

    Pixels are scaled to [0, 1]; MSE is the mean over the region's pixels and all three RGB
    channels; PSNR = 10·log10(1 / MSE). Identical regions give PSNR = inf and PSNR_norm = 1.
    An empty region gives NaN.
    """
    if not cap or cap <= 0:
        raise InputError(f"the PSNR cap must be > 0 dB, got {cap}")
    g = np.asarray(generated, dtype=np.float64) / 255.0
    r = np.asarray(reference, dtype=np.float64) / 255.0
    if g.shape != r.shape:
        raise InputError(f"masked_psnr: images differ in shape {g.shape} vs {r.shape}; use prepare_pair first")
    m = np.ones(g.shape[:2], bool) if mask is None else as_mask(mask)
    if not m.any():
        return {"psnr_db": math.nan, "psnr_norm": math.nan}
    mse = float(np.mean((g[m] - r[m]) ** 2))
    if mse == 0.0:
        return {"psnr_db": math.inf, "psnr_norm": 1.0}
    db = 10.0 * math.log10(1.0 / mse)
    return {"psnr_db": db, "psnr_norm": min(max(db, 0.0), cap) / cap}


def sim_from_parts(psnr_norm: float, lpips_norm: float, clip_norm: float) -> float:
    """sim = (PSNR_norm + (1 - LPIPS_norm) + CLIP_norm) / 3 (paper eq. 21); NaN if any part is NaN."""
    return (psnr_norm + (1.0 - lpips_norm) + clip_norm) / 3.0


# --------------------------------------------------------------------------- reference selection (D.4)

def reference_selection_correct(plan: Any, ground_truth_id: int | None) -> bool | None:
    """Whether the plan's restoration_source_id equals the scenario's ground-truth reference turn.

    None when there is no ground truth to compare with; a plan without a restoration source
    (a non-restoration decision) counts as wrong. A parse failure has C.3's source 0 and counts
    like any other answer.
    """
    if ground_truth_id is None:
        return None
    predicted = plan.get("restoration_source_id") if isinstance(plan, dict) else getattr(plan, "restoration_source_id", None)
    return predicted is not None and int(predicted) == int(ground_truth_id)


def reference_accuracy(outcomes: Iterable[bool | None]) -> dict:
    """Ref. Acc. (paper D.4, table 7) from per-scenario outcomes, as reference_selection_correct
    gives them (a results row's `reference_correct`): the fraction that are right among those
    with a ground truth; None counts as without."""
    correct = total = skipped = 0
    for ok in outcomes:
        if ok is None:
            skipped += 1
            continue
        total += 1
        correct += int(bool(ok))
    return {"accuracy": (correct / total) if total else math.nan, "correct": correct, "n": total,
            "without_ground_truth": skipped}


def reference_selection_accuracy(pairs: Iterable[tuple[Any, int | None]]) -> dict:
    """Fraction of (plan, ground_truth_id) pairs whose restoration_source_id matches (paper D.4)."""
    return reference_accuracy(reference_selection_correct(plan, gt) for plan, gt in pairs)


# --------------------------------------------------------------------------- the scorer

@dataclass
class RegionScore:
    """sim and its parts on one region (NaN parts and a reason when the region is empty)."""

    psnr_db: float
    psnr_norm: float
    lpips: float
    lpips_norm: float
    clip: float
    clip_norm: float
    sim: float
    area_px: int
    area_ratio: float
    reason: str | None = None

    def to_dict(self) -> dict:
        """Its fields as a dict (NaN kept as float)."""
        return dict(self.__dict__)


class Scorer:
    """Masked PSNR / LPIPS / CLIP and the OCCUR scores. Holds the LPIPS and CLIP models."""

    def __init__(self, lpips_model, clip_model, *, psnr_cap: float = DEFAULT_PSNR_CAP, device=None,
                 name: str = "scorer"):
        import torch
        self.lpips_model = lpips_model
        self.clip_model = clip_model
        self.psnr_cap = float(psnr_cap)
        self.device = torch.device(device) if device is not None else next(lpips_model.parameters()).device
        self.name = name
        # Inside ComfyUI its memory manager places (and on /free unloads) both networks.
        self._lpips = comfy.manage(lpips_model, self.device, name="lpips")
        self._clip = comfy.manage(clip_model, self.device, name="clip")
        self.timer = StageTimer()
        self._lock = threading.RLock()

    # -- the three measures ------------------------------------------------------------
    def masked_lpips(self, generated: np.ndarray, reference: np.ndarray, mask: np.ndarray | None) -> float:
        """Spatial AlexNet LPIPS averaged over the region, after pasting the reference outside it.

        The composite (generated inside the region, reference outside) keeps differences outside
        the region from leaking in through the network's receptive field. Raw LPIPS value.
        """
        import torch
        m = np.ones(generated.shape[:2], bool) if mask is None else as_mask(mask)
        if not m.any():
            return math.nan
        composite = np.where(m[:, :, None], generated, reference)
        if np.array_equal(composite, reference):
            return 0.0
        to_t = lambda a: (torch.from_numpy(np.array(a, dtype=np.float32)).permute(2, 0, 1)[None]
                          .div(127.5).sub(1.0).to(self.device))
        self._lpips.use()
        with torch.inference_mode(), self.timer.measure("lpips_forward"):
            dist = self.lpips_model(to_t(composite), to_t(reference))  # (1, 1, H, W)
        dmap = dist[0, 0].float().cpu().numpy()
        return float(dmap[m].mean())

    def clip_input(self, image: np.ndarray, mask: np.ndarray, box: tuple[int, int, int, int]):
        """Crop to the region's box, set non-region pixels to CLIP's mean colour, pad square with it,
        resize to 224×224 (bicubic, antialiased), normalise. Returns a (3, 224, 224) float tensor."""
        import torch
        import torch.nn.functional as F
        y0, y1, x0, x1 = box
        crop = torch.from_numpy(np.array(image[y0:y1, x0:x1], dtype=np.float32)).div(255.0)  # h, w, 3
        inside = torch.from_numpy(np.array(mask[y0:y1, x0:x1], dtype=bool))
        mean = torch.tensor(CLIP_MEAN)
        crop = torch.where(inside[:, :, None], crop, mean)
        h, w = crop.shape[:2]
        side = max(h, w)
        canvas = mean.repeat(side, side, 1)
        top, left = (side - h) // 2, (side - w) // 2
        canvas[top:top + h, left:left + w] = crop
        x = canvas.permute(2, 0, 1)[None]
        x = F.interpolate(x, size=(CLIP_INPUT_SIZE, CLIP_INPUT_SIZE), mode="bicubic",
                          align_corners=False, antialias=True).clamp_(0.0, 1.0)
        return ((x[0] - mean[:, None, None]) / torch.tensor(CLIP_STD)[:, None, None])

    def masked_clip(self, generated: np.ndarray, reference: np.ndarray, mask: np.ndarray | None) -> float:
        """Cosine similarity of the CLIP image embeddings of the two prepared region crops (raw, in [-1, 1])."""
        import torch
        m = np.ones(generated.shape[:2], bool) if mask is None else as_mask(mask)
        if not m.any():
            return math.nan
        rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
        box = (int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1)
        a, b = self.clip_input(generated, m, box), self.clip_input(reference, m, box)
        if torch.equal(a, b):
            return 1.0
        self._clip.use()
        batch = torch.stack([a, b]).to(self.device)
        dtype = next(self.clip_model.parameters()).dtype
        with torch.inference_mode(), self.timer.measure("clip_forward"):
            emb = self.clip_model.encode_image(batch.to(dtype)).float()
        emb = torch.nn.functional.normalize(emb, dim=-1)
        return float((emb[0] * emb[1]).sum().clamp(-1.0, 1.0))

    # -- sim on a region -----------------------------------------------------------------
    def region_score(self, generated: np.ndarray, reference: np.ndarray, mask: np.ndarray | None,
                     psnr_cap: float | None = None, empty_reason: str | None = None) -> RegionScore:
        """sim(Î[R], I_ref[R]) and its parts. Inputs are same-size uint8 RGB arrays (see prepare_pair)."""
        cap = float(psnr_cap or self.psnr_cap)
        m = np.ones(generated.shape[:2], bool) if mask is None else as_mask(mask)
        area = int(m.sum())
        ratio = area / float(m.size)
        if area == 0:
            nan = math.nan
            return RegionScore(nan, nan, nan, nan, nan, nan, nan, 0, 0.0,
                               empty_reason or "the region is empty")
        with self.timer.measure("psnr"):
            p = masked_psnr(generated, reference, m, cap)
        with self.timer.measure("lpips"):
            lp = self.masked_lpips(generated, reference, m)
        with self.timer.measure("clip"):
            cl = self.masked_clip(generated, reference, m)
        lp_norm = min(max(lp, 0.0), 1.0)
        cl_norm = min(max(cl, 0.0), 1.0)
        return RegionScore(p["psnr_db"], p["psnr_norm"], lp, lp_norm, cl, cl_norm,
                           sim_from_parts(p["psnr_norm"], lp_norm, cl_norm), area, ratio)

    def sim(self, generated: Any, reference: Any, mask: np.ndarray | None = None,
            psnr_cap: float | None = None) -> dict:
        """sim on a region of two images (any sizes: the generated one is resized to the reference)."""
        gen, ref, info = prepare_pair(generated, reference)
        if mask is not None:
            mask = resize_mask(mask, ref.shape[:2])
        return {**self.region_score(gen, ref, mask, psnr_cap).to_dict(), **info}

    def whole_image(self, generated: Any, reference: Any, psnr_cap: float | None = None) -> dict:
        """The same measures over the whole image (R = Omega), for contrast with the masked ones (D.5)."""
        return self.sim(generated, reference, None, psnr_cap)

    # -- OCCUR scores --------------------------------------------------------------------
    def occur_score(self, final_image: Any, ref_image: Any, traj_masks: Any,
                    psnr_cap: float | None = None) -> dict:
        """S_restore, S_preserve, S_TC (paper eqs. 9–11 / 17–22) with their parts, areas and the
        whole-image measures. Î_N = final_image (resized to I_ref if needed), I_ref = ref_image.

        Everything is JSON-able except `regions`: {"R_restore", "R_preserve"} as the bool H×W
        masks (I_ref's grid) the scores were computed on; drop it before writing a record."""
        with self._lock:
            cap = float(psnr_cap or self.psnr_cap)
            gen, ref, info = prepare_pair(final_image, ref_image)
            shape_hw = ref.shape[:2]
            r_restore, r_preserve = occur_regions(traj_masks, size=(shape_hw[1], shape_hw[0]))
            restore = self.region_score(gen, ref, r_restore, cap, _empty_reason("restore", traj_masks, shape_hw))
            preserve = self.region_score(gen, ref, r_preserve, cap, _empty_reason("preserve", traj_masks, shape_hw))
            whole = self.region_score(gen, ref, None, cap)
            s_tc = 0.5 * (restore.sim + preserve.sim)
            reasons = [r.reason for r in (restore, preserve) if r.reason]
            occ_all = _union(traj_masks.occ, shape_hw)
            new_all = _union(traj_masks.new, shape_hw)
            return {
                "S_restore": restore.sim,
                "S_preserve": preserve.sim,
                "S_TC": s_tc,
                "restore": restore.to_dict(),
                "preserve": preserve.to_dict(),
                "whole_image": whole.to_dict(),
                "areas": {"R_restore": restore.area_ratio, "R_preserve": preserve.area_ratio,
                          "M_occ_1N": float(occ_all.mean()), "M_new_1N": float(new_all.mean())},
                "psnr_cap": cap,
                "n_turns": len(traj_masks.occ),
                "reasons": reasons,
                **info,
                "regions": {"R_restore": r_restore, "R_preserve": r_preserve},
            }
