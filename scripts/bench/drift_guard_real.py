"""The Drift Guard on real pictures (docs/drift-guard.md; `python scripts/bench/bench_drift_guard.py real`).

    python scripts/bench/bench_drift_guard.py real --pairs ../shared/realdata/pairs --out runs/drift_real [--quick]

Reads the folder it is given (never copies from it; writes numbers, and pictures only from the
Apache-2.0 Step1X-Edit photos):

1. **Controlled chains on the Step1X-Edit inputs.** Each photo (resized to 768 px wide) is edited
   for 6 turns by a stand-in editor whose edits are known exactly (add a sticker-like object with
   a soft shadow, recolour it, add a second one, remove the first (the editor re-invents the place
   from a blurred view of the truth), recolour the second, add a third) and which drifts on every
   call as real editors were measured to (scripts/bench/bench_real_pairs.py's degradations, all at once:
   a zoom-out of 0.5-1.5 %, a shift of up to ±1.5 px, the OmniEraser residual field, a ±2 % gain,
   a 0.6 px blur, JPEG at quality 90). Per turn, without and with the guard: the untouched PSNR
   (the image against I_0 on the pixels no turn's edit touched, as respec/sim/measures.py defines it),
   the edit region PSNR (the guard's output against the editor's on the turn's true edit region),
   what the guard did, and its CPU seconds. Then the same chains with each seam (membrane, multiband,
   feather): untouched PSNR, edit region PSNR and the seam's gradient error.
2. **The Step1X-Edit pairs themselves** (one real editor call each): what the guard keeps.
3. **The MC-Edit sequences** (4 scenes × up to 9 methods × 4 turns): the guard on every real call
   (I_{t-1} -> I_t of each method): what it kept, where it stepped aside and why.
"""
from __future__ import annotations

import csv
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from respec.history import StoredImage  # noqa: E402
from respec.pixels.alignment import Alignment, support, warp  # noqa: E402
from respec.pixels.colour_fit import MAD_TO_SIGMA  # noqa: E402
from respec.pixels.guard import GuardParams, guard_change  # noqa: E402
from respec.pixels.masks import erode  # noqa: E402
from respec.post_edit.guard_step import guard_images  # noqa: E402

WIDTH = 768
GT_MARGIN_PX = 2


def load(p: Path, size=None) -> np.ndarray:
    im = Image.open(p).convert("RGB")
    if size is not None and im.size != tuple(size):
        im = im.resize(tuple(size), Image.BICUBIC)
    return np.asarray(im)


def psnr(a, b, m) -> float | None:
    if not m.any():
        return None
    e = ((np.asarray(a, np.float64)[m] - np.asarray(b, np.float64)[m]) ** 2).mean()
    return 100.0 if e == 0 else round(float(10 * np.log10(255.0 ** 2 / e)), 2)


# --------------------------------------------------------------------------- the stand-in editor

def omni_residual(pairs: Path, size) -> np.ndarray | None:
    """The OmniEraser residual field, resized to `size`: its output - input outside the removal
    mask (float, 0..255 units), each channel clipped to its median ± 3 robust sigmas, the mask's
    place filled with the median: the editor's colour bias and re-rendered texture, without the
    content of its own picture that the removal left (a reflection's remains)."""
    d = pairs / "omnieraser"
    for p in sorted(d.glob("*_input.png")):
        i = load(p).astype(np.float32)
        o = load(d / p.name.replace("_input", "_output"), (i.shape[1], i.shape[0])).astype(np.float32)
        m = ndimage.binary_dilation(load(d / p.name.replace("_input", "_mask"), (i.shape[1], i.shape[0])).mean(axis=2) > 127,
                                    iterations=8)
        r = o - i
        for c in range(3):
            v = r[:, :, c][~m]
            med = float(np.median(v))
            sig = MAD_TO_SIGMA * float(np.median(np.abs(v - med)))
            r[:, :, c] = np.where(m, med, np.clip(r[:, :, c], med - 3 * sig, med + 3 * sig))
        return np.stack([np.asarray(Image.fromarray(r[:, :, c]).resize(size, Image.BILINEAR)) for c in range(3)], 2)
    return None


def drift_call(img: np.ndarray, seed: int, residual: np.ndarray | None) -> tuple[np.ndarray, Alignment]:
    """One editor call's drift on a uint8 image (all of bench_real_pairs' degradations at once):
    (the drifted image, the call's motion)."""
    rng = np.random.default_rng([seed, 22])
    step = Alignment(float(rng.uniform(-1.5, 1.5)), float(rng.uniform(-1.5, 1.5)), 1.0 - float(rng.uniform(0.5, 1.5)) / 100)
    f = warp(img.astype(np.float32), step)
    if residual is not None:
        f = f + np.roll(residual, (int(rng.integers(0, 64)), int(rng.integers(0, 64))), axis=(0, 1))
    f = f * (1.0 + rng.uniform(-0.02, 0.02, 3)).astype(np.float32)
    f = ndimage.gaussian_filter(f, (0.6, 0.6, 0))
    u = np.clip(np.round(f), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(u).save(buf, "JPEG", quality=90)
    return np.asarray(Image.open(buf).convert("RGB")), step


def sticker(h: int, w: int, colour, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A textured, rounded object (rgb float 0..255, soft alpha 0..1) of h×w px."""
    rng = np.random.default_rng(seed)
    tex = ndimage.gaussian_filter(rng.random((h, w)), 3)
    tex = (tex - tex.min()) / (np.ptp(tex) + 1e-9)
    yy, xx = np.mgrid[:h, :w]
    stripes = 0.5 + 0.5 * np.sin((xx + yy) / max(3.0, w / 10.0))
    rgb = np.asarray(colour, np.float32)[None, None] * (0.55 + 0.3 * tex[..., None] + 0.15 * stripes[..., None])
    r = min(h, w) / 4.0
    inside = np.ones((h, w), bool)
    for cy, cx in ((r, r), (r, w - 1 - r), (h - 1 - r, r), (h - 1 - r, w - 1 - r)):
        corner = ((yy < r) if cy == r else (yy > h - 1 - r)) & ((xx < r) if cx == r else (xx > w - 1 - r))
        inside &= ~corner | ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r)
    alpha = ndimage.gaussian_filter(inside.astype(np.float32), 0.8)
    return np.clip(rgb, 0, 255), alpha


class PhotoWorld:
    """The stand-in editor's world: a photo and sticker objects, in I_0's frame (the world frame)."""

    def __init__(self, photo: np.ndarray):
        self.photo = photo
        self.h, self.w = photo.shape[:2]
        self.objects: dict[str, dict] = {}

    def box(self, fy: float, fx: float, fh: float, fw: float) -> tuple[int, int, int, int]:
        y0, x0 = int(fy * self.h), int(fx * self.w)
        return y0, x0, y0 + int(fh * self.h), x0 + int(fw * self.w)

    def layer(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rgb H×W×3, alpha H×W, shadow darkening H×W) of one object, world frame."""
        o = self.objects[name]
        y0, x0, y1, x1 = o["box"]
        rgb_s, a_s = sticker(y1 - y0, x1 - x0, o["colour"], o["seed"])
        rgb = np.zeros((self.h, self.w, 3), np.float32)
        alpha = np.zeros((self.h, self.w), np.float32)
        rgb[y0:y1, x0:x1] = rgb_s
        alpha[y0:y1, x0:x1] = a_s
        sh = np.zeros((self.h, self.w), np.float32)
        dy, dx = max(2, (y1 - y0) // 8), max(2, (x1 - x0) // 10)
        sh[y0 + dy:min(self.h, y1 + dy), x0 + dx:min(self.w, x1 + dx)] = 0.35
        sh = ndimage.gaussian_filter(sh, max(2.0, (y1 - y0) / 12)) * (1 - alpha)
        return rgb, alpha, sh

    def footprint(self, name: str, visible: bool = False) -> np.ndarray:
        """bool H×W (world frame): the pixels an object and its shadow change by more than 1/255
        (visible: the object itself and its shadow where it darkens by 5 % or more)."""
        _, a, sh = self.layer(name)
        return (a > 0.5) | (sh > 0.05) if visible else (a > 0.004) | (sh > 0.004)


def paint(img: np.ndarray, frame: Alignment, layer) -> np.ndarray:
    """An object's layer (world frame) composited onto `img` (in `frame`)."""
    rgb, alpha, sh = layer
    if not frame.is_identity:
        rgb, alpha, sh = warp(rgb, frame), warp(alpha, frame), warp(sh, frame)
    out = img.astype(np.float32) * (1 - sh[..., None])
    out = out * (1 - alpha[..., None]) + rgb * alpha[..., None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def reinvent(img: np.ndarray, frame: Alignment, world: PhotoWorld, where: np.ndarray) -> np.ndarray:
    """The editor removes what covers `where` (world frame): it paints a blurred view of the true
    scene there (colours right, detail not: an inpainter with a good prior), soft-edged."""
    soft = ndimage.gaussian_filter(world.photo.astype(np.float32), (4, 4, 0))
    a = ndimage.gaussian_filter(ndimage.binary_dilation(where, iterations=2).astype(np.float32), 1.0)
    if not frame.is_identity:
        soft, a = warp(soft, frame), warp(a, frame)
    out = img.astype(np.float32) * (1 - a[..., None]) + soft * a[..., None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


TURNS = (("add", "A", "add a red gift box on the left", (0.30, 0.08, 0.16, 0.22), (200, 40, 40)),
         ("recolour", "A", "make the gift box blue", None, (40, 70, 210)),
         ("add", "B", "add a green vase on the right", (0.55, 0.62, 0.20, 0.18), (40, 170, 60)),
         ("remove", "A", "remove the gift box", None, None),
         ("recolour", "B", "make the vase yellow", None, (230, 200, 40)),
         ("add", "C", "add a purple lamp at the bottom", (0.78, 0.35, 0.14, 0.16), (150, 60, 190)))


def run_photo_chain(photo: np.ndarray, residual, seam: str = "membrane", with_guard: bool = True,
                    seed: int = 0, keep_images: bool = False) -> dict:
    """One 6-turn chain on a photo (see the module docstring): per-turn records (and the images)."""
    world = PhotoWorld(photo)
    touched = np.zeros(photo.shape[:2], bool)
    cur, frame = photo.copy(), Alignment()
    params = GuardParams(seam=seam)
    turns, images = [], [photo.copy()]
    for t, (do, name, text, box, colour) in enumerate(TURNS, 1):
        if do == "add":
            world.objects[name] = {"box": world.box(*box), "colour": colour, "seed": t}
            region, visible = world.footprint(name), world.footprint(name, True)
            edited = paint(cur, frame, world.layer(name))
        elif do == "recolour":
            region, visible = world.footprint(name), world.footprint(name, True)
            world.objects[name]["colour"] = colour
            edited = paint(cur, frame, world.layer(name))
        else:
            region, visible = world.footprint(name), world.footprint(name, True)
            del world.objects[name]
            edited = reinvent(cur, frame, world, region)
        touched |= region
        drawn = edited                             # the stand-in's own drawing, before its drift
        edited, step = drift_call(edited, seed * 100 + t, residual)
        e_frame = frame.compose(step)
        rec = {"turn": t, "request": text}
        if with_guard:
            p, e = StoredImage.of(cur), StoredImage.of(edited)
            c0 = time.process_time()
            guard_change(p, e)                     # History Append's change record (shared, cached)
            c1 = time.process_time()
            res = guard_images(p, e, request=text, params=params)
            c2 = time.process_time()
            rec.update({"applied": res.applied, "reason": res.reason, "edit_fraction": res.record.get("edit_fraction"),
                        "guard_cpu_s": round(c2 - c1, 3), "change_record_cpu_s": round(c1 - c0, 3)})
            out, o_frame = (np.asarray(res.image), frame) if res.applied else (edited, e_frame)
            if res.applied:
                rec["seam_grad_err"] = seam_gradient_error(out, edited, cur, res)
        else:
            out, o_frame = edited, e_frame
        # the edit's fidelity: the output against the editor's own output on the true edit region
        # (where the edit visibly changes the picture: the object, its shadow where it darkens 5 %)
        to_out = e_frame.inverse().compose(o_frame)
        reg_o = visible if o_frame.is_identity else warp(visible, o_frame, order=0)
        reg_o = erode(reg_o, GT_MARGIN_PX) & support(to_out, reg_o.shape)
        ed_o = edited if to_out.is_identity else warp(edited.astype(np.float64), to_out)
        rec["edit_region_psnr"] = psnr(out, ed_o, reg_o)
        # ... and against the edit as the stand-in drew it, without its call's drift (the guard maps
        # a whole-picture colour shift out of the edit on a local request: the drawing is the truth)
        to_drawn = frame.inverse().compose(o_frame)
        dr_o = drawn if to_drawn.is_identity else warp(drawn.astype(np.float64), to_drawn)
        rec["edit_region_psnr_truth"] = psnr(out, dr_o, reg_o)
        untouched = ~ndimage.binary_dilation(touched, iterations=GT_MARGIN_PX)
        rec["untouched_psnr"] = psnr(out, photo, untouched)
        rec["untouched_share"] = round(float(untouched.mean()), 4)
        turns.append(rec)
        cur, frame = out, o_frame
        if keep_images:
            images.append(out)
    return {"turns": turns, "images": images}


def seam_gradient_error(out: np.ndarray, edited: np.ndarray, prev: np.ndarray, res) -> float | None:
    """How much the composite's seam adds (RMS, 0..255): on neighbour pairs within 4 px of the
    edit region's edge, the output's difference against the nearer of the editor's (aligned) and
    the previous image's differences (either is a natural picture; a step or a ghost is neither)."""
    K = res.weight >= 1.0
    if not K.any():
        return None
    band = ndimage.binary_dilation(K, iterations=4) & ~ndimage.binary_erosion(K, iterations=4)
    E = warp(edited.astype(np.float64), Alignment.from_record(res.record["alignment"]).inverse())
    O, P = out.astype(np.float64), prev.astype(np.float64)
    devs = []
    for axis in (0, 1):
        n = K.shape[axis] - 1
        a, b = (slice(0, n), slice(1, n + 1))
        sa = (a, slice(None)) if axis == 0 else (slice(None), a)
        sb = (b, slice(None)) if axis == 0 else (slice(None), b)
        pair = band[sa] & band[sb]
        d_o = O[sb] - O[sa]
        dev = np.minimum(np.sqrt(((d_o - (E[sb] - E[sa])) ** 2).mean(axis=-1)),
                         np.sqrt(((d_o - (P[sb] - P[sa])) ** 2).mean(axis=-1)))
        devs.append(dev[pair])
    d = np.concatenate(devs)
    return round(float(np.sqrt((d ** 2).mean())), 3) if d.size else None


# --------------------------------------------------------------------------- real editor calls

def pair_figure(a: np.ndarray, b: np.ndarray, res, out: Path) -> None:
    """Before/after on a Step1X-Edit pair (Apache-2.0): input, the editor's output, the guard's
    output, the kept-edit weights; below, each image's difference from the input (×4)."""
    def half(x):
        return np.asarray(Image.fromarray(x).resize((x.shape[1] // 2, x.shape[0] // 2), Image.BILINEAR))

    def diff(x):
        d = np.abs(x.astype(np.int16) - a.astype(np.int16)).max(axis=2) * 4
        return np.repeat(np.clip(d, 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    wgt = np.repeat((res.weight * 255).astype(np.uint8)[..., None], 3, axis=2)
    gap = np.full((a.shape[0] // 2, 6, 3), 255, np.uint8)
    top = np.concatenate([half(a), gap, half(b), gap, half(np.asarray(res.image)), gap, half(wgt)], 1)
    blank = np.full_like(half(a), 255)
    bot = np.concatenate([blank, gap, half(diff(b)), gap, half(diff(np.asarray(res.image))), gap, blank], 1)
    Image.fromarray(np.concatenate([top, np.full((6, top.shape[1], 3), 255, np.uint8), bot], 0)).save(out)


def step1x_pairs(pairs: Path, index: dict, out: Path | None = None) -> list[dict]:
    """The guard on each Step1X-Edit pair (input -> output, one real call); the add-object pair's
    before/after picture into `out`."""
    rows = []
    for it in index["items"]:
        if it["source"] != "step1x_edit":
            continue
        a = load(pairs / it["input"]["path"])
        b = load(pairs / it["output"]["path"], (a.shape[1], a.shape[0]))
        size = (WIDTH, round(WIDTH * a.shape[0] / a.shape[1]))
        a, b = (np.asarray(Image.fromarray(x).resize(size, Image.BICUBIC)) for x in (a, b))
        res = guard_images(a, b, request=it.get("instruction", ""))
        if out is not None and it["kind"] == "add_object":
            pair_figure(a, b, res, out / "drift-guard-step1x-pair.png")
        rows.append({"pair": it["id"], "kind": it["kind"], "instruction": it.get("instruction", ""),
                     "applied": res.applied, "edit_fraction": res.record.get("edit_fraction"),
                     "change_fraction": res.record.get("change_fraction"), "reason": res.reason,
                     "alignment": res.record.get("alignment_undone", ""),
                     "restored_psnr_vs_input": psnr(res.image, a, res.weight == 0),
                     "editor_psnr_vs_input_there": psnr(b, a, res.weight == 0) if res.applied else None})
    return rows


def request_of(caption: str) -> str:
    """An instruction from an MC-Edit page caption ('+ hat', '[blue] hat', 'bird -> butterfly')."""
    c = caption.split("(")[0].strip()
    if c.startswith("+"):
        return "add " + c[1:].strip()
    if c.startswith("["):
        colour, _, thing = c[1:].partition("]")
        return f"make the {thing.strip()} {colour.strip()}"
    if "->" in c:
        a, b = (s.strip() for s in c.split("->"))
        return f"replace the {a} with a {b}"
    return c


def mc_edit(pairs: Path, index: dict) -> list[dict]:
    """The guard on every MC-Edit call (each method's I_{t-1} -> I_t)."""
    rows = []
    for it in index["items"]:
        if it["source"] != "mc_edit":
            continue
        i0 = load(pairs / it["source_image"]["path"])
        for method, files in sorted(it["methods"].items()):
            prev = i0
            for f in sorted(files, key=lambda x: x["turn"]):
                t = f["turn"]
                cur = load(pairs / f["path"], (i0.shape[1], i0.shape[0]))
                cap = it["turns"][t - 1]["page_caption"]
                res = guard_images(prev, cur, request=request_of(cap))
                why = res.record.get("why", "") if not res.applied else ""
                rows.append({"scene": it["id"].replace("mcedit_", ""), "method": method, "turn": t, "caption": cap,
                             "request": request_of(cap), "applied": res.applied,
                             "edit_fraction": res.record.get("edit_fraction"),
                             "change_fraction": res.record.get("change_fraction"), "why": why,
                             "reason": res.reason,
                             "restored_psnr_vs_prev": psnr(res.image, prev, res.weight == 0) if res.applied else None,
                             "editor_psnr_vs_prev_there": psnr(cur, prev, res.weight == 0) if res.applied else None})
                prev = cur
    return rows


# --------------------------------------------------------------------------- the run

def _median(v):
    v = sorted(x for x in v if x is not None)
    return v[len(v) // 2] if len(v) % 2 else (0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2]) if v else None)


def _fmt(v, nd=1):
    return "–" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))


def figure(photo, without, with_, out: Path) -> None:
    """Before/after (Step1X-derived): I_0, the last turn without and with the guard, and each
    one's difference from I_0 (×4), side by side, at half size."""
    def half(a):
        return np.asarray(Image.fromarray(a).resize((a.shape[1] // 2, a.shape[0] // 2), Image.BILINEAR))

    def diff(a):
        d = np.abs(a.astype(np.int16) - photo.astype(np.int16)).max(axis=2) * 4
        return np.repeat(np.clip(d, 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    gap = np.full((photo.shape[0] // 2, 6, 3), 255, np.uint8)
    top = np.concatenate([half(photo), gap, half(without), gap, half(with_)], 1)
    bot = np.concatenate([np.full_like(half(photo), 255), gap, half(diff(without)), gap, half(diff(with_))], 1)
    Image.fromarray(np.concatenate([top, np.full((6, top.shape[1], 3), 255, np.uint8), bot], 0)).save(out)


def main(pairs: Path, out: Path, quick: bool = False) -> int:
    index = json.loads((pairs / "index.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    photos = [it for it in index["items"] if it["source"] == "step1x_edit"][: 2 if quick else 5]

    print("## 1. Controlled chains on the Step1X-Edit inputs (6 turns, all measured drifts per call)\n")
    chain_rows, per_turn = [], {}
    for n, it in enumerate(photos):
        im = Image.open(pairs / it["input"]["path"]).convert("RGB")
        im = im.resize((WIDTH, round(WIDTH * im.size[1] / im.size[0])), Image.BICUBIC)
        photo = np.asarray(im)
        residual = omni_residual(pairs, im.size)
        runs = {g: run_photo_chain(photo, residual, with_guard=g, seed=n, keep_images=(n == 0)) for g in (False, True)}
        if n == 0:
            figure(photo, runs[False]["images"][-1], runs[True]["images"][-1], out / "drift-guard-real-chain.png")
            np.save(out / "chain0_last_with_guard.npy", runs[True]["images"][-1])
        for a, b in zip(runs[False]["turns"], runs[True]["turns"]):
            row = {"photo": it["id"], "turn": a["turn"], "request": a["request"],
                   "untouched_without": a["untouched_psnr"], "untouched_with": b["untouched_psnr"],
                   "edit_region_psnr": b["edit_region_psnr"], "edit_truth_without": a["edit_region_psnr_truth"],
                   "edit_truth_with": b["edit_region_psnr_truth"],
                   "guard": "kept" if b["applied"] else "stepped aside: " + b["reason"],
                   "edit_fraction": b.get("edit_fraction"), "guard_cpu_s": b.get("guard_cpu_s"),
                   "change_record_cpu_s": b.get("change_record_cpu_s"), "seam_grad_err": b.get("seam_grad_err")}
            chain_rows.append(row)
            per_turn.setdefault(a["turn"], []).append(row)
        sys.stdout.flush()
    print("| turn | request | untouched PSNR without the guard (median dB) | with the guard | edit region PSNR, guard vs editor (min dB) | "
          "edit region vs the stand-in's drawing, editor \u2192 guard (min dB) | guard kept | guard CPU s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for t, rows in per_turn.items():
        print(f"| {t} | {rows[0]['request']} | {_fmt(_median([r['untouched_without'] for r in rows]), 2)} | "
              f"{_fmt(_median([r['untouched_with'] for r in rows]), 2)} | "
              f"{_fmt(min(r['edit_region_psnr'] for r in rows if r['edit_region_psnr'] is not None))} | "
              f"{_fmt(min(r['edit_truth_without'] for r in rows if r['edit_truth_without'] is not None))} \u2192 "
              f"{_fmt(min(r['edit_truth_with'] for r in rows if r['edit_truth_with'] is not None))} | "
              f"{sum(r['guard'] == 'kept' for r in rows)}/{len(rows)} | {_fmt(_median([r['guard_cpu_s'] for r in rows]), 3)} |")
    print("\n| photo | untouched PSNR after turn 1 / 6 without (dB) | with the guard | edit region PSNR min (dB) | stepped aside |")
    print("|---|---|---|---|---|")
    for it in photos:
        rows = [r for r in chain_rows if r["photo"] == it["id"]]
        print(f"| {it['id']} | {_fmt(rows[0]['untouched_without'], 2)} / {_fmt(rows[-1]['untouched_without'], 2)} | "
              f"{_fmt(rows[0]['untouched_with'], 2)} / {_fmt(rows[-1]['untouched_with'], 2)} | "
              f"{_fmt(min(r['edit_region_psnr'] for r in rows))} | "
              f"{'; '.join(r['guard'] for r in rows if r['guard'] != 'kept') or '–'} |")

    print("\n## Seams on the same chains (with the guard; medians over photos)\n")
    print("| seam | untouched PSNR after turn 6 (median dB) | edit region PSNR (median / min dB) | seam gradient error (median RMS /255) |")
    print("|---|---|---|---|")
    seam_rows = []
    for seam in ("membrane", "multiband", "feather"):
        fins, fids, grads = [], [], []
        for n, it in enumerate(photos):
            im = Image.open(pairs / it["input"]["path"]).convert("RGB")
            im = im.resize((WIDTH, round(WIDTH * im.size[1] / im.size[0])), Image.BICUBIC)
            r = run_photo_chain(np.asarray(im), omni_residual(pairs, im.size), seam=seam, seed=n)
            fins.append(r["turns"][-1]["untouched_psnr"])
            fids += [x["edit_region_psnr"] for x in r["turns"] if x["edit_region_psnr"] is not None]
            grads += [x.get("seam_grad_err") for x in r["turns"] if x.get("seam_grad_err") is not None]
        seam_rows.append({"seam": seam, "untouched_final_median": _median(fins), "edit_region_median": _median(fids),
                          "edit_region_min": min(fids), "seam_grad_err_median": _median(grads)})
        print(f"| {seam} | {_fmt(_median(fins), 2)} | {_fmt(_median(fids))} / {_fmt(min(fids))} | {_fmt(_median(grads), 2)} |")
        sys.stdout.flush()

    print("\n## 2. The Step1X-Edit pairs (one real editor call each)\n")
    s1 = step1x_pairs(pairs, index, out)
    print("| pair | kind | guard | edit region share | outside it: editor vs input (dB) | reason |")
    print("|---|---|---|---|---|---|")
    for r in s1:
        print(f"| {r['pair']} | {r['kind']} | {'kept' if r['applied'] else 'stepped aside'} | {_fmt(r['edit_fraction'], 3)} | "
              f"{_fmt(r['editor_psnr_vs_input_there'])} | {r['reason'][:90]} |")

    print("\n## 3. MC-Edit sequences: the guard on every call\n")
    mc = mc_edit(pairs, index)
    print("| scene | turn | request | kept | stepped aside: global / re-render / alignment / moved around the edit | edit region share when kept (median) | outside it, editor vs I_(t-1) (median dB) |")
    print("|---|---|---|---|---|---|---|")
    keys = sorted({(r["scene"], r["turn"]) for r in mc})
    totals = {w: sum(r["why"] == w for r in mc) for w in ("global", "rerender", "alignment", "moved")}
    for sc, t in keys:
        rows = [r for r in mc if (r["scene"], r["turn"]) == (sc, t)]
        kept = [r for r in rows if r["applied"]]
        why = {w: sum(r["why"] == w for r in rows) for w in ("global", "rerender", "alignment", "moved")}
        print(f"| {sc} | {t} | {rows[0]['request']} | {len(kept)}/{len(rows)} | {why['global']} / {why['rerender']} / "
              f"{why['alignment']} / {why['moved']} | {_fmt(_median([r['edit_fraction'] for r in kept]), 3)} | "
              f"{_fmt(_median([r['editor_psnr_vs_prev_there'] for r in kept]))} |")

    print(f"\nAll {len(mc)} calls: kept {sum(r['applied'] for r in mc)}; stepped aside on a global edit "
          f"{totals['global']}, a re-render {totals['rerender']}, an untrusted alignment {totals['alignment']}, the "
          f"picture moved around the edit {totals['moved']}.")
    for name, rows in (("chains", chain_rows), ("seams", seam_rows), ("step1x", s1), ("mc_edit", mc)):
        with open(out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\nwrote {out}/chains.csv, seams.csv, step1x.csv, mc_edit.csv, drift-guard-real-chain.png and "
          f"drift-guard-step1x-pair.png")
    return 0
