"""Change masks, the provenance selector and Reveal Composite on real editor outputs.

    python scripts/bench/bench_real_pairs.py --pairs ../shared/realdata/pairs [--quick] [--parts single,mcedit,chains]
        [--paste-blur-px 0.5]

Reads the folder it is given (never copies from it): OmniEraser removals (mask IoU against their
masks), Step1X-Edit pairs (mask share, stability), MC-Edit multi-turn sequences (per turn: mask
share, stable_fraction, rerendered; then a "remove the hat" revelation turn built from each
method's sequence: I_5 = I_4 with the hat region pasted back from I_0 at I_4's geometry is not
available, so I_5 is the method's own I_4 with the hat's pixels replaced by I_0's — what an ideal
remover would do if the scene had not moved; Reveal must refuse because the scene did move) and
controlled drift chains on the real photos (zoom-outs, shifts incl. sub-pixel, the OmniEraser
residual field, JPEG, gain, blur; an occluder added at turn 1, removed at the last turn by an
editor that re-invents the region; gain in dB in the true revealed region against doing
nothing). Prints one markdown table per part. Conversations that repeat themselves (issue 32)
are scripts/bench/bench_real_chains.py's, which builds on this script's helpers (not the other way
round).
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from respec.controller.provenance_selector import provenance_plan  # noqa: E402
from respec.history import CHANGE, History  # noqa: E402
from respec.pixels.alignment import Alignment, warp  # noqa: E402
from respec.pixels.masks import dilate, erode  # noqa: E402
from respec.pixels.change_mask import change_for, change_mask  # noqa: E402
from respec.pixels.reveal import DEFAULT_REVEAL, RevealParams, reveal_for  # noqa: E402


def load(p: Path, size=None) -> np.ndarray:
    im = Image.open(p).convert("RGB")
    if size is not None and im.size != tuple(size):
        im = im.resize(tuple(size), Image.BICUBIC)
    return np.asarray(im)


def iou(a, b) -> float:
    u = (a | b).sum()
    return float((a & b).sum() / u) if u else 1.0


def psnr(a, b, m) -> float:
    e = ((a[m].astype(np.float64) - b[m].astype(np.float64)) ** 2).mean()
    return float(10 * np.log10(255.0 ** 2 / max(e, 1e-6)))


def append(h: History, img: np.ndarray, text: str) -> History:
    tm = change_for(h, img)
    return h.append(img, text, meta={"alignment": tm.info["alignment"]}, masks={CHANGE: tm})


# --------------------------------------------------------------------------- controlled chains

def resample(img: np.ndarray, a: Alignment) -> np.ndarray:
    """`img` moved by the similarity `a` (respec.pixels.alignment's model) with a cubic spline (scipy,
    order 3, prefiltered; the border repeats): what a re-rendering editor that zooms or shifts
    returns. Not bilinear: three bilinear resamplings at fractional offsets low-pass the picture
    like a Gaussian of 0.5-0.75 px (measured: the single warp that best matches such a chain's
    truth is bilinear plus that blur, the same as the blur 0.5 px/call chain's), which made the
    zoom and shift chains blur chains too; blur has its own rows."""
    h, w = img.shape[:2]
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    sy, sx = (yy - cy - a.dy) / a.scale + cy, (xx - cx - a.dx) / a.scale + cx
    return np.stack([ndimage.map_coordinates(img[:, :, c].astype(np.float64), [sy, sx], order=3, mode="nearest")
                     for c in range(img.shape[2])], axis=2)


def step_of(kind: str, level: float) -> Alignment:
    """The frame's motion of one editor call of this defect (the identity for photometric ones)."""
    if kind == "zoom":
        return Alignment(0.0, 0.0, 1.0 - level / 100.0)
    if kind == "shift":
        return Alignment(level, level * 0.5, 1.0)
    return Alignment()


def degrade(img: np.ndarray, kind: str, level: float, seed: int, residual: np.ndarray | None) -> np.ndarray:
    """One editor call's defect on a uint8 image."""
    f = img.astype(np.float32)
    h, w = img.shape[:2]
    if kind in ("zoom", "shift"):
        f = resample(f, step_of(kind, level))
    elif kind == "gain":
        f = f * np.array([1 + level / 100, 1 - level / 200, 1 + level / 300])
    elif kind == "blur":
        return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(level)))
    elif kind == "jpeg":
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=int(level))
        return np.asarray(Image.open(buf).convert("RGB"))
    elif kind == "residual" and residual is not None:
        f = f + level * residual
    return np.clip(np.round(f), 0, 255).astype(np.uint8)


def chain(photo: np.ndarray, kind: str, level: float, residual, remover: str = "blur",
          params: RevealParams = DEFAULT_REVEAL) -> dict:
    """I_0 = photo; turn 1 adds an occluder (a textured patch); turn 2 a small unrelated object;
    turn 3 removes the occluder and the editor re-invents the region: remover "blur" paints the
    true content without its detail (a Gaussian of 4 px: the colours right, the texture not, as an
    inpainter with a good prior), "flat" with the mean colour around it (no evidence at all).
    Each call applies the defect. The true revealed content is I_0 carried through every call's
    defect."""
    h_, w_ = photo.shape[:2]
    box = (int(h_ * 0.35), int(w_ * 0.35), int(h_ * 0.6), int(w_ * 0.62))
    other = (int(h_ * 0.8), int(w_ * 0.1), int(h_ * 0.88), int(w_ * 0.2))
    rng = np.random.default_rng(3)
    patch = (np.asarray(Image.fromarray((rng.random((8, 8, 3)) * 255).astype(np.uint8)).resize(
        (box[3] - box[1], box[2] - box[0]), Image.BICUBIC)) * 0.5 + np.array([180, 40, 40]) * 0.5).astype(np.uint8)

    def put(img, b, content):
        out = img.copy()
        out[b[0]:b[2], b[1]:b[3]] = content
        return out

    truth = photo.copy()          # the scene without objects, carried through the defects
    hist = History.start(photo)
    cur = photo
    for t, (text, obj) in enumerate((("add a red board", (box, patch)), ("add a blue box", (other, (40, 60, 200)))), 1):
        cur = degrade(put(cur, *obj), kind, level, t, residual)
        truth = degrade(truth, kind, level, t, residual)
        hist = append(hist, cur, text)
    # turn 3: the remover re-invents the board's region with the mean colour around it, after the defect
    nxt = degrade(cur, kind, level, 3, residual)
    truth = degrade(truth, kind, level, 3, residual)
    a_total = Alignment(0, 0, 1)
    for _ in range(3):
        a_total = a_total.compose(step_of(kind, level))
    board = np.pad(np.ones((box[2] - box[0], box[3] - box[1]), bool), ((box[0], h_ - box[2]), (box[1], w_ - box[3])))
    region = warp(board, a_total, order=0)
    ring = np.zeros_like(region)
    ys, xs = np.nonzero(region)
    ring[max(0, ys.min() - 6):ys.max() + 7, max(0, xs.min() - 6):xs.max() + 7] = True
    ring &= ~region
    edited = nxt.copy()
    if remover == "flat":
        edited[region] = np.round(nxt[ring].mean(axis=0)).astype(np.uint8)
    else:
        soft = np.asarray(Image.fromarray(truth).filter(ImageFilter.GaussianBlur(4)))
        edited[region] = soft[region]
    res = reveal_for(hist, edited, 1, params)
    m = erode(region, 4)       # the true revealed region, seams left out
    nothing = psnr(edited, truth, m)
    got = psnr(res.image, truth, m)
    # the seam: 6 px either side of the true region's edge (where the blend works)
    band = dilate(region, 6) & ~erode(region, 6)
    seam = psnr(res.image, truth, band) - psnr(edited, truth, band)
    al = res.checks.get("turn_alignment", {})
    # turn 1's change mask against the board where I_1 shows it (one call's motion)
    iou_1 = iou(hist.turns[1].masks[CHANGE].mask, warp(board, step_of(kind, level), order=0))
    return {"applied": res.applied, "gain_db": got - nothing if res.applied else 0.0, "reason": res.reason,
            "seam_db": seam if res.applied else 0.0, "iou_turn1": iou_1,
            "turn_scale": al.get("scale"), "turn_dx": al.get("dx"),
            "recorded": all("alignment" in t.meta for t in hist.turns[1:])}


def omni_residual(pairs: Path, size) -> np.ndarray | None:
    """The OmniEraser residual field (output - input outside its mask, float), resized."""
    d = pairs / "omnieraser"
    for p in sorted(d.glob("*_input.png")):
        i = load(p).astype(np.float32)
        o = load(d / p.name.replace("_input", "_output"), (i.shape[1], i.shape[0])).astype(np.float32)
        r = o - i
        r = np.stack([np.asarray(Image.fromarray(r[:, :, c]).resize(size, Image.BILINEAR)) for c in range(3)], 2)
        return r
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, type=Path, help="the realdata/pairs folder (read only)")
    ap.add_argument("--quick", action="store_true", help="fewer chain levels")
    ap.add_argument("--paste-blur-px", type=float, default=None,
                    help="RevealParams.paste_blur_px for the chains (default: the pack's; 0.5: paste at I_t's softness)")
    ap.add_argument("--parts", default="single,mcedit,chains",
                    help="which tables, comma-separated: single, mcedit, chains (default: all three)")
    args = ap.parse_args()
    pairs = args.pairs
    index = json.loads((pairs / "index.json").read_text())

    parts = {p.strip() for p in args.parts.split(",")}
    unknown = parts - {"single", "mcedit", "chains"}
    if unknown:
        moved = " (the repeating conversations are scripts/bench/bench_real_chains.py's)" if "repeat" in unknown else ""
        ap.error(f"unknown --parts {', '.join(sorted(unknown))}: use single, mcedit, chains{moved}")
    if "single" in parts:
        single_pairs(pairs, index)
    if "mcedit" in parts:
        mc_edit(pairs, index)
    if "chains" in parts:
        chains(pairs, index, args)


def single_pairs(pairs: Path, index: dict) -> None:
    print("## Single pairs: change mask (aligned) and stability\n")
    print("| pair | kind | mask share | IoU vs given mask | threshold /255 | stable_fraction | rerendered | alignment dx, dy, scale |")
    print("|---|---|---|---|---|---|---|---|")
    for it in index["items"]:
        if it["source"] not in ("step1x_edit", "omnieraser"):
            continue
        a = load(pairs / it["input"]["path"] if isinstance(it["input"], dict) else pairs / it["input"])
        b = load(pairs / (it["output"]["path"] if isinstance(it["output"], dict) else it["output"]), (a.shape[1], a.shape[0]))
        r = change_mask(a, b)
        info = r.info()
        iou_s = "–"
        if it.get("mask"):
            mk = load(pairs / (it["mask"]["path"] if isinstance(it["mask"], dict) else it["mask"]), (a.shape[1], a.shape[0]))
            iou_s = f"{iou(r.mask, mk.mean(axis=2) > 127):.3f}"
        al = info["alignment"]
        print(f"| {it['id']} | {it['kind']} | {r.fraction:.3f} | {iou_s} | {r.threshold * 255:.1f} | "
              f"{info['stable_fraction']:.2f} | {info['rerendered']} | {al['dx']:.2f}, {al['dy']:.2f}, {al['scale']:.4f} |")



def mc_edit(pairs: Path, index: dict) -> None:
    print("\n## MC-Edit sequences: per turn, and a 'remove the hat' revelation turn\n")
    print("| scene | method | mask share t1..t4 | stable_fraction t1..t4 | rerendered | reveal at t5 | selector confidence | selector fallbacks |")
    print("|---|---|---|---|---|---|---|---|")
    for it in index["items"]:
        if it["source"] != "mc_edit":
            continue
        src = it["source_image"]["path"] if isinstance(it["source_image"], dict) else it["source_image"]
        scene_dir = pairs / Path(src).parent
        i0 = load(pairs / src)
        methods = sorted({p.name.rsplit("_turn", 1)[0] for p in scene_dir.glob("*_turn1.*")})
        for m in methods:
            imgs = [i0]
            for t in range(1, 5):
                f = next(iter(scene_dir.glob(f"{m}_turn{t}.*")), None)
                if f is None:
                    break
                imgs.append(load(f, (i0.shape[1], i0.shape[0])))
            h = History.start(i0)
            caps = [tt["page_caption"] for tt in it["turns"]]
            for t, img in enumerate(imgs[1:], 1):
                h = append(h, img, "add " + caps[t - 1].lstrip("+ "))
            rec = [h.turns[t].masks[CHANGE].info for t in range(1, len(imgs))]
            shares = " ".join(f"{r['fraction']:.2f}" for r in rec)
            sfs = " ".join(f"{r['stable_fraction']:.2f}" for r in rec)
            rr = sum(bool(r["rerendered"]) for r in rec)
            # t5: remove what turn 1 added: I_4 with turn 1's changed pixels from I_0 (frame kept)
            c1 = h.turns[1].masks[CHANGE].mask
            i5 = imgs[-1].copy()
            i5[c1] = i0[c1]
            res = reveal_for(h, i5, covering_turn=1)
            plan = provenance_plan(h, f"remove the {caps[0].lstrip('+ ').split()[-1]}", True)
            print(f"| {it['id'].replace('mcedit_', '')} | {m} | {shares} | {sfs} | {rr}/{len(rec)} | "
                  f"{'APPLIED' if res.applied else 'refused'} | {plan.meta.get('provenance_confidence')} | "
                  f"{', '.join(plan.fallbacks) or '–'} |")



def chains(pairs: Path, index: dict, args) -> None:
    print("\n## Controlled chains on real photos (3 calls each; reveal at the last)\n")
    photos = [it for it in index["items"] if it["source"] == "step1x_edit"][:2 if args.quick else 3]
    levels = {"zoom": [0.25, 0.5, 1.0, 1.5, 2.0, 3.0], "shift": [0.0, 0.5, 1.25, 3.0, 8.0],
              "jpeg": [90, 60], "gain": [1, 5], "blur": [0.5, 1.0], "residual": [1.0]}
    if args.quick:
        levels = {"zoom": [0.5, 2.0], "shift": [0.5, 3.0], "jpeg": [60], "residual": [1.0]}
    params = replace(DEFAULT_REVEAL, paste_blur_px=args.paste_blur_px) if args.paste_blur_px is not None \
        else DEFAULT_REVEAL
    print("Gain: PSNR in the true revealed region (eroded 4 px) of the output against I_0's content carried "
          "through the defects, minus that of the editor's own output; seam: the same within 6 px of the "
          "region's edge. BAD: applied with less than +3 dB. IoU t1: turn 1's change mask against the board "
          f"where I_1 shows it. Reveal: paste_blur_px = {params.paste_blur_px}.\n")
    print("| photo | defect | level/call | reveal | gain dB (true region) | seam dB | IoU t1 | turn scale, dx | "
          "alignment recorded | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary: dict = {}
    for it in photos:
        p = load(pairs / it["input"]["path"])
        im = Image.fromarray(p)
        im = im.resize((768, round(768 * im.size[1] / im.size[0])), Image.BICUBIC)
        photo = np.asarray(im)
        resid = omni_residual(pairs, im.size)
        for kind, lv in levels.items():
            for level in lv:
                r = chain(photo, kind, level, resid, params=params)
                bad = r["applied"] and r["gain_db"] < 3.0
                sm = summary.setdefault(kind, {"n": 0, "applied": 0, "bad": 0, "gains": [], "seams": [], "ious": []})
                sm["n"] += 1
                sm["applied"] += int(r["applied"])
                sm["bad"] += int(bad)
                sm["ious"].append(r["iou_turn1"])
                if r["applied"]:
                    sm["gains"].append(r["gain_db"])
                    sm["seams"].append(r["seam_db"])
                print(f"| {it['id']} | {kind} | {level} | {'BAD ' if bad else ''}{'applied' if r['applied'] else 'refused'} | "
                      f"{r['gain_db']:+.1f} | {r['seam_db']:+.1f} | {r['iou_turn1']:.3f} | {r['turn_scale']}, "
                      f"{r['turn_dx']} | {r['recorded']} | {r['reason'][:70]} |")
            sys.stdout.flush()
    print("\n| defect | chains | applied | bad pastes (< +3 dB) | gain when applied: min / median dB | "
          "seam gain: min / median dB | turn-1 mask IoU: min / median |")
    print("|---|---|---|---|---|---|---|")

    def mm(v, fmt):
        v = sorted(v)
        return f"{format(v[0], fmt)} / {format(v[len(v) // 2], fmt)}" if v else "–"

    for kind, sm in summary.items():
        print(f"| {kind} | {sm['n']} | {sm['applied']} | {sm['bad']} | {mm(sm['gains'], '+.1f')} | "
              f"{mm(sm['seams'], '+.1f')} | {mm(sm['ious'], '.3f')} |")


if __name__ == "__main__":
    main()
