"""What the edit region from the request's words changes in the Drift Guard, on real editor outputs.

    python scripts/bench/edit_region_real.py --realdata ../shared/realdata

On the shared real pairs where the request names one object and the editor re-drew more (a sign's
text changed, the cat's eyes and fur re-drawn; and a control where the editor changed only what was
asked), each pair runs through the guard twice, with the pair's own instruction: with its change
mask alone, and with the edit region (respec/pixels/named_region.py) made from the request's object
phrase (request_language.object_phrase) and a hand-drawn box of that object standing in for SAM3's
mask (ComfyUI's SAM3 cannot run here: no weights). Prints one markdown row per pair: how much of
the picture keeps the editor's pixels, and how close the picture outside the object is to the
previous image (PSNR dB; inf = identical), without and with the region. Numbers only: the pictures
stay in the shared folder.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from respec.controller.request_language import object_phrase  # noqa: E402
from respec.pixels.named_region import edit_region  # noqa: E402
from respec.post_edit.guard_step import guard_images  # noqa: E402

# (pair id in pairs/index_more.json, the object's hand-drawn box as fractions x0, y0, x1, y1 of the image)
SIGN = (0.205, 0.543, 0.762, 0.889)          # the cardboard sign the cat holds (512 x 512)
PAIRS = [("sdcpp_cat_qie2511", SIGN), ("sdcpp_cat_qie", SIGN), ("sdcpp_cat_klein4b", SIGN),
         ("sdcpp_cat_klein9b", SIGN),
         ("mflux_person_sunglasses_klein9b", (0.37, 0.33, 0.60, 0.49))]   # control: the edit is the glasses


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def measure(prev: np.ndarray, edit: np.ndarray, instruction: str, box: tuple) -> dict:
    """The guard without and with the edit region on one pair (edit resized to prev's size)."""
    h, w = prev.shape[:2]
    obj = np.zeros((h, w), bool)
    obj[round(box[1] * h):round(box[3] * h), round(box[0] * w):round(box[2] * w)] = True
    phrase = object_phrase(instruction) or ""
    t0 = time.monotonic()
    region = edit_region(prev, edit, phrase, [obj, obj])
    t_region = time.monotonic() - t0
    outside = ~obj
    out = {"phrase": phrase, "region": region.record, "region_s": t_region}
    for label, mask in (("without", None), ("with", region.mask if region.mask.any() else None)):
        res = guard_images(prev, edit, user_mask=mask, request=instruction)
        img = res.image[:, :, :3]
        changed = np.abs(img.astype(int) - prev[:, :, :3]).max(axis=2) > 16
        out[label] = {"applied": res.applied, "reason": res.reason, "kept": float((res.weight > 0).mean()),
                      "changed_outside": float(changed[outside].mean()),
                      "psnr_outside": _psnr(img[outside], prev[:, :, :3][outside])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--realdata", required=True, help="the shared real-outputs folder (its pairs/ holds the files)")
    a = ap.parse_args(argv)
    import json
    pairs = {p["id"]: p for p in json.loads((Path(a.realdata) / "pairs" / "index_more.json").read_text())["pairs"]}
    print("| pair | instruction -> object phrase | guard | keeps the editor's pixels on | outside the object: "
          "changed > 16/255 | outside the object: PSNR to I_(t-1) |")
    print("|---|---|---|---|---|---|")
    for pid, box in PAIRS:
        p = pairs[pid]
        folder = Path(a.realdata) / "pairs" / p["folder"]
        prev = np.asarray(Image.open(folder / p["files"][0]).convert("RGB"))
        edit = Image.open(folder / p["files"][1]).convert("RGB")
        edit = np.asarray(edit.resize((prev.shape[1], prev.shape[0]), Image.BICUBIC) if edit.size != prev.shape[1::-1]
                          else edit)
        m = measure(prev, edit, p["instruction"], box)
        for label in ("without", "with"):
            r = m[label]
            how = ("change mask alone" if label == "without" else
                   f"edit region ({m['region']['region_px']} px)" if m["region"]["used"] else
                   f"edit region unused: {m['region']['reason']}")
            state = f"{r['kept']:.1%}" if r["applied"] else f"stepped aside ({r['reason'][:60]})"
            print(f"| {pid} | {p['instruction'][:40]!r} -> {m['phrase']!r} | {how} | {state} | "
                  f"{r['changed_outside']:.1%} | {r['psnr_outside']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
