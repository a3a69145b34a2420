"""The Drift Guard on the editors users run (docs/drift-guard.md; `python scripts/bench/bench_drift_guard.py editors`).

    python scripts/bench/bench_drift_guard.py editors --pairs ../shared/realdata/pairs --out runs/drift_editors

Every step of `index_more.json` (Qwen-Image-Edit original / 2509 / 2511 / 2511 Causal, FLUX.2
[klein] 4B / 9B / 9B-KV, LongCat-Image-Edit) goes through the guard as a user's graph runs it
(`guard_images(previous, edited, request=...)`, the edit resized to the previous image's size). It
reads the folder it is given and copies nothing out of it: it writes numbers only.

Per step: applied or stepped aside (and why), the guard's CPU seconds, and on the local requests
the issue's measures against a generous box drawn around what the request names (`BOXES`, in
fractions of the input image; the sign, not the cat's eyes; the dog; the glasses; the hat and the
jacket on the beaver; the fox where the beaver was; the necklace and the bag; the marked box):

- far changed: the share of the pixels outside the box grown by 8 px whose largest channel
  differs from the input by more than 8/255 (the guard's output; and the editor's own, for
  comparison);
- edit kept: of the editor's clear change inside the box, the share where the guard's output
  still differs from the input by more than 20/255. The editor's output is put into the input's
  frame by the turn's alignment refined on the scene's structure (`editor_in_input_frame`) and the
  input through a colour fit made outside the box; a pixel is a clear change at the pixel scale
  when one image's pixel lies more than 40/255 (largest channel) outside the range the other takes
  within 2 px of it (so a 1-2 px misfit of a sharp edge is no change, and a thin line removed or
  added is), and at the content scale when, besides, the two images blurred by a Gaussian of
  CONTENT_SIGMA of the shorter side still differ by more than 40/255 there. The content scale is
  the one counted: a re-rendered texture (water's ripples, fur, a caption's letters re-drawn
  softer) changes pixels by more than 40/255 but not what is there, and a generous box around the
  named object over a scene the editor re-rendered whole would otherwise count the re-rendered
  background inside the box as the edit that the guard should keep. Both are reported;
- guarded well: the guard applied, edit kept (content scale) >= 90 %, far changed <= 2 %.

The requests are the index's instructions in English (LongCat's Chinese one by its translation;
the step whose documented prompt does not match its picture by what the picture shows).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from respec.history import StoredImage  # noqa: E402
from respec.pixels.alignment import Alignment  # noqa: E402
from respec.pixels.guard import DEFAULT_GUARD, guard_change, read_structure  # noqa: E402
from respec.pixels.structure import plain_warp  # noqa: E402
from respec.pixels.colour_fit import fit_colour  # noqa: E402
from respec.post_edit.guard_step import guard_images  # noqa: E402

FAR_GROW_PX = 8
FAR_DELTA = 8.0 / 255.0
CLEAR_DELTA = 40.0 / 255.0
CONTENT_SIGMA = 0.006       # the content scale's blur, a share of the shorter side (3-6 px here)
KEPT_DELTA = 20.0 / 255.0

# What each step asks, as the guard reads it: "local" (a box around what the request names, as
# x0, y0, x1, y1 fractions of the input image), "global" (a style or a new light: it must step
# aside), "pose" (the request is the pose of the picture's subject, and the editor re-framed it),
# or "unknown" (the documented prompt does not match the picture).
BOXES: dict[str, tuple[float, float, float, float]] = {
    "sdcpp_cat_qie": (0.16, 0.50, 0.80, 0.91),                   # the sign
    "sdcpp_cat_qie2511": (0.16, 0.50, 0.80, 0.91),
    "sdcpp_cat_klein4b": (0.16, 0.50, 0.80, 0.91),
    "sdcpp_cat_klein9b": (0.16, 0.50, 0.80, 0.91),
    "mflux_dog_dalmatian_klein9b": (0.18, 0.24, 0.82, 0.90),     # the dog, with the tulip in its mouth
    "mflux_dog_dalmatian_klein9bkv": (0.18, 0.24, 0.82, 0.90),
    "mflux_person_sunglasses_klein9b": (0.36, 0.27, 0.64, 0.53),  # the glasses
    "mflux_person_glasses_klein9b": (0.36, 0.27, 0.64, 0.53),
    "swift_beaver_hatjacket_klein4b": (0.16, 0.25, 0.66, 1.00),   # the beaver with the hat and the jacket (and the
                                                                  # jacket's reflection, which the editor drew)
    "swift_beaver_hatjacket_klein9b": (0.12, 0.18, 0.58, 0.70),
    "swift_kvchain_t1t2": (0.52, 0.40, 0.90, 0.88),               # the fox where the beaver was (and its reflection)
    "swift_kv_fox_photo": (0.58, 0.42, 0.90, 0.66),
    "causal_ex1_qie2511": (0.16, 0.28, 0.64, 0.86),               # the necklace and the bag (with its strap)
    "causal_ex1_causal4": (0.16, 0.28, 0.64, 0.86),
    "longcat_cat2dog": (0.12, 0.30, 0.97, 0.80),                  # the dog where the cat was
    "longcat_annot1": (0.38, 0.70, 0.90, 0.97),                   # the marked box (the car is just left of it)
    "longcat_annot3": (0.55, 0.64, 0.99, 0.97),                   # the marked box
    "longcat_annot5": (0.50, 0.00, 0.90, 0.90),                   # the horse (its legs reach down behind the
                                                                  # caption) and the arrow
}
GLOBAL_STEPS = ("swift_beaver_comic_klein4b", "swift_beaver_comic_klein9b", "swift_kvchain_t0t1",
                "causal_ex3_qie2511", "causal_ex3_causal4", "causal_ex4_qie2511", "causal_ex4_causal4")
POSE_STEPS = ("mflux_fist_qie", "mflux_fist_qie2509_v2025", "mflux_fist_qie2509_v2026")
UNKNOWN_PROMPT = {"sdcpp_cat_qie2509": "replace the cat with a dog"}
ENGLISH = {   # the index gives these in Chinese (with a translation) or as a visual instruction
    "longcat_cat2dog": "turn the cat into a dog",
    "causal_ex4_qie2511": "turn the person into Japanese anime style and add the text "
                          "'Lightx2V Qwen-Image-Lightning accelerates image generation and editing'",
    "causal_ex4_causal4": "turn the person into Japanese anime style and add the text "
                          "'Lightx2V Qwen-Image-Lightning accelerates image generation and editing'",
}


def request_of(step: dict) -> str:
    """The request a user would have typed for this step (see the module docstring): the index's
    description of what was drawn on a visual-instruction input, in brackets, is not part of it."""
    sid = step["id"]
    text = ENGLISH.get(sid) or UNKNOWN_PROMPT.get(sid) or step["instruction"]
    return text.split(" (red ")[0].split(" (the input ")[0]


def kind_of(sid: str) -> str:
    return ("local" if sid in BOXES else "global" if sid in GLOBAL_STEPS else "pose" if sid in POSE_STEPS
            else "unknown" if sid in UNKNOWN_PROMPT else "unlisted")


def load(p: Path) -> np.ndarray:
    return np.asarray(Image.open(p).convert("RGB"))


def editor_in_input_frame(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The editor's output b (resized to a's size) on the input a's pixel grid, float 0..1: the
    turn's alignment (the change record's) where it explains the motion (residual and inliers within
    the guard's limits), else that alignment refined on the scene's structure and by the local
    motion field (`read_structure`: respec/pixels/structure.py and flow.py, not measured where the
    content changed). The index's own transform (one similarity, by SIFT / ECC) leaves 2-5 px on the
    Qwen-Image-Edit steps that zoom by a different amount on each axis, which would count every
    shifted edge as the editor's change."""
    if b.shape[:2] != a.shape[:2]:
        b = np.asarray(Image.fromarray(b).resize((a.shape[1], a.shape[0]), Image.BILINEAR))
    change = guard_change(StoredImage.of(a), StoredImage.of(b))
    al = Alignment.from_record(change.info.get("alignment"))
    if al.residual_px <= DEFAULT_GUARD.max_residual_px and al.inliers >= DEFAULT_GUARD.min_inliers:
        return plain_warp(al, a.shape[:2]).sample(b, (0, a.shape[0], 0, a.shape[1]))
    return read_structure(a, b, al, None).sample(b, (0, a.shape[0], 0, a.shape[1]))


def box_mask(shape: tuple[int, int], box: tuple[float, float, float, float]) -> np.ndarray:
    h, w = shape
    m = np.zeros(shape, bool)
    m[int(box[1] * h):int(np.ceil(box[3] * h)), int(box[0] * w):int(np.ceil(box[2] * w))] = True
    return m


def outside_range(x: np.ndarray, y: np.ndarray, reach: int = 2) -> np.ndarray:
    """bool H×W: where x's largest channel lies more than CLEAR_DELTA outside the range y takes
    within `reach` px."""
    size = (2 * reach + 1, 2 * reach + 1, 1)
    lo, hi = ndimage.minimum_filter(y, size), ndimage.maximum_filter(y, size)
    return np.maximum(lo - x, x - hi).max(axis=2) > CLEAR_DELTA


def measure(a: np.ndarray, b: np.ndarray, out: np.ndarray, box) -> dict:
    """far changed (guard, editor), edit kept (see the module docstring)."""
    if out.shape[:2] != a.shape[:2]:    # a guard that stepped aside returns the editor's own size
        out = np.asarray(Image.fromarray(out[..., :3]).resize((a.shape[1], a.shape[0]), Image.BILINEAR))
    P = a.astype(np.float32) / 255.0
    G = out[..., :3].astype(np.float32) / 255.0
    inside = box_mask(P.shape[:2], box)
    E = editor_in_input_frame(a, b)
    far = ~ndimage.binary_dilation(inside, iterations=FAR_GROW_PX)
    far_guard = float((np.abs(G - P).max(axis=2) > FAR_DELTA)[far].mean())
    far_editor = float((np.abs(E - P).max(axis=2) > FAR_DELTA)[far].mean())
    Q = fit_colour(P, E, use=far).apply(P)
    clear = (outside_range(E, Q) | outside_range(Q, E)) & inside
    s = (CONTENT_SIGMA * min(P.shape[:2]),) * 2 + (0,)
    content = clear & (np.abs(ndimage.gaussian_filter(E, s) - ndimage.gaussian_filter(Q, s)).max(axis=2) > CLEAR_DELTA)
    moved = np.abs(G - P).max(axis=2) > KEPT_DELTA

    def kept(m: np.ndarray) -> float | None:
        return round(float(moved[m].mean()), 4) if m.any() else None
    return {"far_changed": round(far_guard, 4), "far_changed_editor": round(far_editor, 4),
            "edit_kept": kept(content), "edit_kept_pixel": kept(clear), "clear_px": int(content.sum()),
            "clear_px_pixel": int(clear.sum())}


def run(pairs: Path) -> list[dict]:
    index = json.loads((pairs / "index_more.json").read_text())
    rows = []
    for step in index["pairs"]:
        sid = step["id"]
        a = load(pairs / step["folder"] / step["files"][0])
        b = load(pairs / step["folder"] / step["files"][1])
        request = request_of(step)
        c0 = time.process_time()
        res = guard_images(a, b, request=request)
        secs = time.process_time() - c0
        row = {"id": sid, "editor": step.get("editor_group", ""), "kind": kind_of(sid), "request": request,
               "size": f"{a.shape[1]}x{a.shape[0]}", "applied": bool(res.applied),
               "why": res.record.get("why", ""), "reason": res.reason, "guard_cpu_s": round(secs, 3),
               "edit_fraction": res.record.get("edit_fraction")}
        if sid in BOXES:
            row.update(measure(a, b, np.asarray(res.image), BOXES[sid]))
            for key, well in (("edit_kept", "guarded_well"), ("edit_kept_pixel", "guarded_well_pixel")):
                row[well] = bool(res.applied and row[key] is not None and row[key] >= 0.9
                                 and row["far_changed"] <= 0.02)
        rows.append(row)
        print(f"{sid}: {'applied' if res.applied else 'stepped aside'} ({secs:.2f} s) {res.reason[:100]}",
              flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """The per-step table (markdown) and the count of local steps guarded well."""
    lines = ["| step | editor | request | guard | far changed: editor \u2192 guard | edit kept: content (pixel) scale "
             "| guarded well | CPU s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        what = "applied" if r["applied"] else f"stepped aside ({r['why']}: {r['reason']})"
        if "far_changed" in r:
            far = f"{100 * r['far_changed_editor']:.1f} % \u2192 {100 * r['far_changed']:.1f} %"
            content, pixel = ("–" if r[k] is None else f"{100 * r[k]:.1f} %" for k in ("edit_kept", "edit_kept_pixel"))
            kept = f"{content} ({pixel})"
            well = ("yes" if r["guarded_well"] else "no") + ("" if r["guarded_well"] == r["guarded_well_pixel"]
                                                           else " (pixel scale: no)" if r["guarded_well"]
                                                           else " (pixel scale: yes)")
        else:
            far, kept, well = "–", "–", f"({r['kind']})"
        req = r["request"] if len(r["request"]) <= 60 else r["request"][:57] + "..."
        lines.append(f"| {r['id']} | {r['editor']} | {req} | {what} | {far} | {kept} | {well} | {r['guard_cpu_s']} |")
    local = [r for r in rows if r["kind"] == "local"]
    lines.append("")
    lines.append(f"Local requests guarded well: {sum(r['guarded_well'] for r in local)} of {len(local)} "
                 f"({sum(r['guarded_well_pixel'] for r in local)} counting the pixel scale's clear change); "
                 f"global requests stepped aside: {sum(not r['applied'] for r in rows if r['kind'] == 'global')} of "
                 f"{sum(r['kind'] == 'global' for r in rows)}.")
    return "\n".join(lines)


def main(pairs: Path, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    rows = run(pairs)
    (out / "editors.json").write_text(json.dumps(rows, indent=1))
    text = table(rows)
    (out / "editors.md").write_text(text + "\n")
    print(text)
    return 0
