"""The Drift Guard above GUARD_WORK_PIXELS (pair.py): the turn's change record made at the working
size carried to full size (`full_size_change`), and the guard's working-size result made at full
size (`compose_full`: I_{t-1}'s own pixels where the working weight is 0, the editor's full-size
pixels with the working-size seam correction upsampled elsewhere)."""
from __future__ import annotations

import numpy as np
from PIL import Image

from ...history import StoredImage, TurnMask
from ..alignment import Alignment, support, warp_float
from ..change_record import ChangeRecord
from ..masks import dilate
from .arrays import float_rgb, rgb3
from .drift import drift_explained
from .params import GuardParams
from .result import GuardResult


def full_size_change(change_w: ChangeRecord, size: tuple[int, int]) -> ChangeRecord:
    """A change record made at a working size as change_between gives it at `size`: the mask
    upsampled (nearest), the alignment in full-size pixels, the working size recorded."""
    w, h = change_w.stored.image.size
    f = w / float(size[0])
    al = change_w.alignment
    full = Alignment(al.dx / f, al.dy / f, al.scale, al.residual_px / f, al.method, al.inliers, tuple(size))
    mask = np.asarray(Image.fromarray(change_w.mask).resize(tuple(size), Image.NEAREST), bool)
    return ChangeRecord.of(TurnMask.from_mask(mask, {**change_w.info, "alignment": full.record(),
                                                     "working_size": [w, h]}))


def compose_full(p: StoredImage, e: StoredImage, p_w: StoredImage, e_w: StoredImage, res_w: GuardResult,
                 change_w: ChangeRecord, params: GuardParams, refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The guard's output and weight at I_{t-1}'s full size from its working-size result. With w the
    working weight and g = out_w - P_w - w (E_w - P_w) what the seam added (the membrane's colour
    correction, zero wherever w is), both upsampled (bilinear) on the box around w > 0:

        out = P + w (E - P) + g        (E: the editor's full-size pixels, aligned; P: I_{t-1})

    so I_{t-1}'s pixels are kept exactly where w is 0 and the edit keeps its full-size detail. The
    working size rounds the region's outline by up to one working pixel, so (`refine`, not with the
    user's mask) the full-size pixels of that outline (within the reach outside the region, or on its
    interpolated edge) that the drift test (`drift_explained`) cannot explain are the edit (a sharp
    corner) and keep the editor's pixel exactly."""
    P_full = p.array
    H, W = P_full.shape[:2]
    out3 = rgb3(P_full).copy()
    weight = np.zeros((H, W), np.float32)
    ys, xs = np.nonzero(res_w.weight > 0)
    if ys.size:
        h, w = res_w.weight.shape
        fx, fy = w / float(W), h / float(H)
        reach = int(np.ceil(1.0 / min(fx, fy))) + 1      # one working pixel, in full-size pixels (and one more)
        # The full-size box around the weight (the reach and a pixel for the interpolation), and
        # the working-size crop it reads.
        X0, X1 = max(0, int((xs.min() - 1) / fx) - reach), min(W, int(np.ceil((xs.max() + 2) / fx)) + reach)
        Y0, Y1 = max(0, int((ys.min() - 1) / fy) - reach), min(H, int(np.ceil((ys.max() + 2) / fy)) + reach)
        wx0, wx1 = max(0, int(X0 * fx) - 1), min(w, int(np.ceil(X1 * fx)) + 1)
        wy0, wy1 = max(0, int(Y0 * fy) - 1), min(h, int(np.ceil(Y1 * fy)) + 1)
        al_w = change_w.alignment
        P_w = float_rgb(rgb3(p_w.array)[wy0:wy1, wx0:wx1])
        E_w = warp_float(rgb3(e_w.array), al_w.inverse(), box=(wy0, wy1, wx0, wx1))
        w_w = res_w.weight[wy0:wy1, wx0:wx1]
        g_w = float_rgb(rgb3(res_w.image)[wy0:wy1, wx0:wx1]) - P_w - w_w[..., None] * (E_w - P_w)
        box = (X0 * fx - wx0, Y0 * fy - wy0, X1 * fx - wx0, Y1 * fy - wy0)

        def up(a: np.ndarray) -> np.ndarray:
            return np.asarray(Image.fromarray(np.ascontiguousarray(a, np.float32), "F").resize(
                (X1 - X0, Y1 - Y0), Image.BILINEAR, box=box))
        wt = np.clip(up(w_w), 0.0, 1.0)
        al = Alignment(al_w.dx / fx, al_w.dy / fy, al_w.scale)
        E = warp_float(rgb3(e.array), al.inverse(), box=(Y0, Y1, X0, X1))
        P = float_rgb(out3[Y0:Y1, X0:X1])
        if refine:   # the outline's zone: within the reach outside the region, and its soft edge
            zone = dilate(wt > 0, reach) & (wt < 1.0) & support(al.inverse(), (H, W))[Y0:Y1, X0:X1]
            if zone.any():
                explained, _ = drift_explained(P, E, dict(change_w.info), params.drift_residual)
                wt = np.where(zone & ~explained, np.float32(1.0), wt)
        comp = P + wt[..., None] * (E - P) + np.stack([up(g_w[..., k]) for k in range(3)], axis=2)
        sel = wt > 0
        out3[Y0:Y1, X0:X1][sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
        weight[Y0:Y1, X0:X1] = wt
    if P_full.shape[2] == 4:
        out = np.concatenate([out3, P_full[:, :, 3:]], axis=2)
    elif P_full.shape[2] == 1:
        out = np.round(out3.mean(axis=2, keepdims=True)).astype(np.uint8)
    else:
        out = out3
    out.flags.writeable = False
    return out, weight
