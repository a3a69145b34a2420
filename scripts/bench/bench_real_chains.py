#!/usr/bin/env python
"""Real conversations that repeat themselves (issue 32), replayed through the conversational turn
(not a test): what a removal gets back when the same kind of object was added, removed and added
again.

    python scripts/bench/bench_real_chains.py --pairs ../shared/realdata/pairs

Reads the folder it is given (never copies from it). The four six-turn FLUX.1 Kontext chains the
issue describes are not in ../shared/realdata; these are the closest that can be built from it:

- glasses (FLUX.2 [klein] 9B, mflux, the person photo, 768×512): the editor's own outputs for "wear
  the eyeglasses" and "put on sunglasses" (two shapes on one face) are the additions: turn 1 adds
  the glasses, 2 removes them, 3 adds the sunglasses, 4 removes them, 5 adds the glasses again, 6
  removes them; each addition pastes the real output's changed pixels onto the kept image, each
  removal is built (the object's region re-invented: the true content blurred by 4 px, the colours
  right and the detail not), and every call adds klein's own per-call drift (its output minus its
  input outside the edit, measured on the sunglasses pair). Variants: `clean`; `half-done` (the
  first removal leaves 14 % of the glasses, the issue's red ball); `local warp` (removals 4 and 6
  also warp the face by 0.8 px, the issue's Kontext defect).
- pendant (Step1X-Edit, "add pendant with a ruby", 512×768): added, removed, added again 40 px
  lower-left (the real pendant's pixels moved), removed.
- MC-Edit "cat" (four real turns per method: + hat, [blue] hat, + sunglasses, + blue scarf) and a
  built fifth turn "remove the hat": the recolour must not count as another addition of the hat.
- the klein 9B-KV three-image chain (watercolour, then "replace the beaver with a fox") and a
  built third turn "remove the fox".

The glasses and pendant chains run as `conversational_provenance_flux2` runs a turn: the provenance
planner and selector (no VLM), the restoration flag from the request's words, Reveal Composite and
the Drift Guard; MC-Edit and klein keep their real outputs (unguarded) and run Reveal on the built
removal. Per remove turn: the covering turn chosen (the true one), the source, applied or refused
(why), and the gain in the revealed region: PSNR of the output against the kept history's image
before the object came, minus the editor's own, on the object's region (eroded 3 px).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_pairs import append, load, psnr  # noqa: E402
from respec.controller.provenance_selector import selector_parts  # noqa: E402
from respec.history import History  # noqa: E402
from respec.pixels.change_mask import change_mask  # noqa: E402
from respec.pixels.masks import dilate, erode  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep, reveal_turn  # noqa: E402
from respec.turn import TurnParts, TurnSwitches, run_turn  # noqa: E402


def u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x), 0, 255).astype(np.uint8)


def local_warp(img: np.ndarray, centre: tuple[float, float], amp: float, sigma: float) -> np.ndarray:
    """`img` under a smooth swirl of `amp` px about `centre` (y, x), fading with `sigma` px."""
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    ry, rx = yy - centre[0], xx - centre[1]
    r = np.hypot(ry, rx) + 1e-9
    bump = amp * (r / sigma) * np.exp(0.5 - r ** 2 / (2 * sigma ** 2))
    return np.stack([ndimage.map_coordinates(img[..., c].astype(np.float64), [yy - bump * rx / r, xx + bump * ry / r],
                                             order=3, mode="nearest") for c in range(3)], axis=2)


class ReplayEditor:
    """Replays a planned chain: turn t's output is steps[t - 1](the current image it is given)."""

    name = "replay"

    def __init__(self, steps):
        self.steps, self.t, self.last_run = steps, 0, {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.t += 1
        return Image.fromarray(self.steps[self.t - 1](np.asarray(images[-1])[..., :3]))


def object_of(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The pixels a real add edit changed (the pack's own change mask, grown 2 px)."""
    return dilate(change_mask(before, after).mask, 2)


def run_chain(name: str, i0: np.ndarray, turns: list, guard: bool = True) -> list[dict]:
    """turns: [(request, step, object_mask or None, the turn that added what it removes or None)]."""
    planner, selector = selector_parts("provenance")
    editor = ReplayEditor([s for _, s, _, _ in turns])
    parts = TurnParts(editor=editor, planner=planner, selector=selector,
                      post_edit=[RevealStep()] + ([GuardStep()] if guard else []))
    h = History.start(i0)
    rows = []
    for t, (request, _, mask, k_true) in enumerate(turns, start=1):
        before = h
        record, h = run_turn(h, request, parts, TurnSwitches(restoration_mode="auto"), seed=t)
        if k_true is None:
            continue
        m = erode(mask, 3)
        truth = before.image(k_true - 1).array
        rev = next((e for e in record.post_edit if e.get("step") == "reveal_composite"), {})
        rows.append(_row(name, t, request, record.plan.provenance.turn if record.plan and record.plan.provenance else None,
                         k_true, record.plan.restoration_source_id if record.plan else None, rev,
                         psnr(h.current.image.array, truth, m) - psnr(record.edited.array, truth, m)))
    return rows


def _row(chain, t, request, covering, k_true, source, rev, gain) -> dict:
    return {"chain": chain, "turn": t, "request": request, "covering": covering, "true": k_true, "source": source,
            "applied": bool(rev.get("applied")), "reason": rev.get("reason", ""), "gain_db": gain,
            "left": rev.get("editor_left_fraction"), "flow": rev.get("local_flow_applied")}


def glasses_chains(pairs: Path) -> list[dict]:
    d = pairs / "flux2_klein"
    size = (768, 512)
    i0 = load(d / "mflux_person_input.jpg", size)
    glasses = load(d / "mflux_person_glasses_klein9b_output.png", size)
    sun = load(d / "mflux_person_sunglasses_klein9b_output.png", size)
    g_mask, s_mask = object_of(i0, glasses), object_of(i0, sun)
    # klein's own per-call drift: its output minus its input outside the edit (the sunglasses pair)
    away = ~dilate(s_mask | g_mask, 8)
    drift = np.where(away[..., None], sun.astype(np.float64) - i0.astype(np.float64), 0.0)
    truth0 = i0.astype(np.float64)
    ys, xs = np.nonzero(g_mask | s_mask)
    centre, sigma = (ys.mean(), xs.mean()), 0.6 * max(np.ptp(ys), np.ptp(xs))

    def add(obj, mask):
        return lambda cur: u8(np.where(mask[..., None], obj, cur) + drift)

    def remove(mask, leave=0.0, warp=0.0):
        def step(cur):
            fill = ndimage.gaussian_filter(truth0, (4, 4, 0))
            keep = np.zeros_like(mask)
            if leave:
                ys, _ = np.nonzero(mask)
                keep = mask & (np.arange(mask.shape[0])[:, None] < np.quantile(ys, leave))
            out = np.where((mask & ~keep)[..., None], fill, cur.astype(np.float64)) + drift
            return u8(local_warp(out, centre, warp, sigma) if warp else out)
        return step

    out = []
    for variant, leave, warp in (("clean", 0.0, 0.0), ("half-done", 0.14, 0.0), ("local warp", 0.0, 0.8)):
        turns = [("Make the woman wear eyeglasses", add(glasses, g_mask), None, None),
                 ("Remove the eyeglasses", remove(g_mask, leave), g_mask, 1),
                 ("Put on sunglasses", add(sun, s_mask), None, None),
                 ("Remove the sunglasses", remove(s_mask, 0.0, warp), s_mask, 3),
                 ("Make the woman wear eyeglasses", add(glasses, g_mask), None, None),
                 ("Remove the eyeglasses", remove(g_mask, 0.0, warp), g_mask, 5)]
        out += run_chain(f"glasses ({variant})", i0, turns)
    return out


def pendant_chain(pairs: Path, index: dict) -> list[dict]:
    it = next(i for i in index["items"] if i["id"] == "step1x_0000")
    size = (512, 768)
    i0 = load(pairs / it["input"]["path"], size)
    out1 = load(pairs / it["output"]["path"], size)
    mask = object_of(i0, out1)
    shift = (40, -40)
    mask2 = np.roll(mask, shift, axis=(0, 1))
    obj2 = np.roll(out1, shift, axis=(0, 1))
    truth0 = ndimage.gaussian_filter(i0.astype(np.float64), (4, 4, 0))

    def add(obj, m):
        return lambda cur: np.where(m[..., None], obj, cur)

    def remove(m):
        return lambda cur: u8(np.where(m[..., None], truth0, cur))

    turns = [("Add a pendant with a ruby around her neck", add(out1, mask), None, None),
             ("Remove the pendant", remove(mask), mask, 1),
             ("Add a pendant with a ruby a little lower on the left", add(obj2, mask2), None, None),
             ("Remove the pendant", remove(mask2), mask2, 3)]
    return run_chain("pendant (Step1X)", i0, turns)


def mcedit_cat(pairs: Path, index: dict) -> list[dict]:
    it = next(i for i in index["items"] if i["id"] == "mcedit_cat")
    src = it["source_image"]["path"]
    scene = pairs / Path(src).parent
    i0 = load(pairs / src)
    caps = [t["page_caption"] for t in it["turns"]]
    requests = ["Add a hat on the cat", "Make the hat blue", "Add sunglasses on the cat", "Add a blue scarf on the cat"]
    rows = []
    for method in sorted({p.name.rsplit("_turn", 1)[0] for p in scene.glob("*_turn1.*")}):
        imgs = [load(next(scene.glob(f"{method}_turn{t}.*")), (i0.shape[1], i0.shape[0])) for t in range(1, 5)]
        h = History.start(i0)
        for img, text in zip(imgs, requests):
            h = append(h, img, text)
        hat = dilate(h.turns[1].masks["change"].mask, 2)
        i5 = np.where(hat[..., None], ndimage.gaussian_filter(i0.astype(np.float64), (4, 4, 0)), imgs[-1]).astype(np.uint8)
        res, entry = reveal_turn(h, i5, None, "Remove the hat", True)
        m = erode(hat, 3)
        gain = psnr(res.image, i0, m) - psnr(i5, i0, m) if res is not None else 0.0
        rows.append(_row(f"MC-Edit cat ({method}; {', '.join(caps)})", 5, "Remove the hat", entry.get("covering_turn"),
                         1, entry.get("source_id"), entry, gain))
    return rows


def klein_kv_chain(pairs: Path) -> list[dict]:
    d = pairs / "flux2_klein"
    imgs = [load(d / f"swift_kvchain_turn{t}.png") for t in range(3)]
    h = History.start(imgs[0])
    h = append(h, imgs[1], "transform into a watercolor painting with soft pastel colors")
    h = append(h, imgs[2], "replace the beaver with a fox, keep the same watercolor painting style")
    fox = dilate(h.turns[2].masks["change"].mask, 2)
    i3 = np.where(fox[..., None], ndimage.gaussian_filter(imgs[1].astype(np.float64), (4, 4, 0)), imgs[2]).astype(np.uint8)
    res, entry = reveal_turn(h, i3, None, "Remove the fox", True)
    m = erode(fox, 3)
    gain = psnr(res.image, imgs[1], m) - psnr(i3, imgs[1], m) if res is not None else 0.0
    return [_row("klein 9B-KV chain (watercolour, fox)", 3, "Remove the fox", entry.get("covering_turn"), 2,
                 entry.get("source_id"), entry, gain)]


def repeat_chains(pairs: Path, index: dict) -> None:
    print("\n## Conversations that repeat themselves (issue 32): real additions, built removals\n")
    rows = glasses_chains(pairs) + pendant_chain(pairs, index) + mcedit_cat(pairs, index) + klein_kv_chain(pairs)
    print("| chain | turn | request | covering (true) | source | reveal | gain dB (object's region) | left by the editor | local field | reason |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        left = f"{r['left']:.0%}" if r["left"] is not None else "–"
        print(f"| {r['chain']} | {r['turn']} | {r['request']} | {r['covering']} ({r['true']}) | I_{r['source']} | "
              f"{'applied' if r['applied'] else 'refused'} | {r['gain_db']:+.1f} | {left} | "
              f"{'yes' if r['flow'] else '–'} | {r['reason'][:100]} |", flush=True)
    gains = [r["gain_db"] for r in rows if r["applied"]]
    print(f"\nremove turns {len(rows)}: covering turn right {sum(r['covering'] == r['true'] for r in rows)}; applied "
          f"{len(gains)}, of which +3 dB or more {sum(g >= 3 for g in gains)} and worse than the editor "
          f"{sum(g < 0 for g in gains)}; median gain when applied "
          f"{statistics.median(gains) if gains else float('nan'):+.1f} dB; refused {len(rows) - len(gains)} (each with its reason)")


def main(argv=None) -> int:
    import json
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", required=True, type=Path, help="the realdata/pairs folder (read only)")
    args = ap.parse_args(argv)
    repeat_chains(args.pairs, json.loads((args.pairs / "index.json").read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
