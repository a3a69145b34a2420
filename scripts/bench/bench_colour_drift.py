#!/usr/bin/env python
"""Colour compounding on real conversations (issue 43, "no compounding"): the ConvergeBench
add/remove chains replayed with history first OFF (Reveal Composite and the Drift Guard run every
turn), measuring the colour drift of the kept picture against I_0 turn by turn (not a test).

    python scripts/bench/bench_colour_drift.py --chains ../shared/realdata/chains [--only kontext] [--save DIR]

Per turn: the kept picture's mean signed RGB difference from I_0 (/255) and mean deltaE (CIELAB) on
two regions: `object`, the pixels any add turn's editor output changed (grey difference > 0.1,
dilated 8 px; after a removal the right picture there is I_0 too), and `rest`, every other pixel
(no turn asked to change them). A colour fit chained turn on turn shows as a signed offset that
grows over turns 2, 4, 6. --save writes the kept pictures (outside git: they show the fixtures).

--verify also reads every applied Reveal Composite and Drift Guard result as the verification does
(respec/pixels/verify: the seam and colour checks) and lists what they found, with each check's
cost: Reveal's composite is (kept, I_t, I_{k-1}, the paste's weight); the guard's is (kept, the
picture after Reveal, I_{t-1}, 1 - the edit's weight); only where the step's alignment is the
identity (old then needs no warp into kept's frame).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_undo_chains import ReplayEditor  # noqa: E402
from respec.controller.provenance_selector import selector_parts  # noqa: E402
from respec.history import History  # noqa: E402
from respec.post_edit.guard_step import GuardStep  # noqa: E402
from respec.post_edit.reveal_step import RevealStep  # noqa: E402
from respec.pixels.verify import Composite  # noqa: E402
from respec.pixels.verify.colour import check_colour  # noqa: E402
from respec.pixels.verify.seams import check_seams  # noqa: E402
from respec.turn import TurnParts, TurnSwitches, run_turn  # noqa: E402


def lab(rgb: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of a uint8 H×W×3 sRGB image."""
    c = rgb.astype(np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def object_region(i0: np.ndarray, outputs: list[np.ndarray], adds: list[int]) -> np.ndarray:
    """Pixels any add turn's editor output changed (grey difference > 0.1 after a 5×5 mean), dilated 8 px."""
    g0 = i0.astype(np.float32).mean(axis=2) / 255.0
    m = np.zeros(g0.shape, bool)
    for t in adds:
        g = outputs[t - 1].astype(np.float32).mean(axis=2) / 255.0
        m |= ndimage.uniform_filter(np.abs(g - g0), 5) > 0.1
    return ndimage.binary_dilation(m, iterations=8)


def drift(kept: np.ndarray, i0: np.ndarray, region: np.ndarray) -> dict:
    """Mean signed RGB difference (/255) and mean deltaE of kept against I_0 on `region`."""
    if not region.any():
        return {"rgb": [0.0, 0.0, 0.0], "dE": 0.0}
    d = (kept.astype(np.float64) - i0.astype(np.float64))[region] / 255.0
    de = np.sqrt(((lab(kept) - lab(i0)) ** 2).sum(axis=2))[region]
    return {"rgb": [round(float(v), 4) for v in d.mean(axis=0)], "dE": round(float(de.mean()), 3)}


def identity(record: dict | None) -> bool:
    """Whether an alignment record (Alignment.record()) is the identity: no shift, no scale."""
    record = record or {}
    return abs(record.get("dx", 0.0)) < 1e-6 and abs(record.get("dy", 0.0)) < 1e-6 and \
        abs(record.get("scale", 1.0) - 1.0) < 1e-6


class Verified:
    """A post-edit step that runs the seam and colour checks on its applied results (--verify)."""

    def __init__(self, step, found: list):
        self.step, self.name, self.found = step, step.name, found

    def __call__(self, history, record):
        res = self.step(history, record)
        r = res.result
        if r is None or not getattr(r, "applied", False) or res.image is None:
            return res
        fallback = np.asarray(record.image.array if hasattr(record.image, "array") else record.image)[..., :3]
        kept = res.image.array[..., :3]
        al = r.checks.get("alignment") if self.name == "reveal_composite" else r.record.get("alignment")
        if not identity(al):
            return res          # frames differ: the composite needs old warped into kept's frame (the wiring's job)
        if self.name == "reveal_composite":
            old, written = history.image(r.source_id).array[..., :3], r.source_weight
        else:
            old, written = history.current.image.array[..., :3], 1.0 - r.weight
        if old.shape != kept.shape or fallback.shape != kept.shape:
            return res
        c = Composite("reveal" if self.name == "reveal_composite" else "guard", kept, fallback, old,
                      np.asarray(written, np.float32))
        for name, check in (("seam", check_seams), ("colour", check_colour)):
            t0 = time.perf_counter()
            read = check(c)
            self.found.append({"turn": history.next_turn, "step": self.name, "check": name,
                               "seconds": time.perf_counter() - t0, "measured": read.measured,
                               "finding": read.finding.detail if read.finding else ""})
        return res


def run_chain(folder: Path, chain: dict, save: Path | None, found: list | None = None) -> list[dict]:
    """Replay one chain with history first off; a row per turn."""
    turns = chain["turns"]
    i0 = Image.open(folder / turns[0]["file"]).convert("RGB")
    outs = [Image.open(folder / t["file"]).convert("RGB") for t in turns[1:]]
    editor = ReplayEditor(outs)
    planner, selector = selector_parts("provenance")
    steps = [RevealStep(), GuardStep()]
    if found is not None:
        steps = [Verified(st, found) for st in steps]
    parts = TurnParts(editor=editor, planner=planner, selector=selector, post_edit=steps)
    switches = TurnSwitches(restoration_mode="auto", history_first=False)
    h = History.start(np.asarray(i0))
    truth = np.asarray(i0)
    sized = [np.asarray(o if o.size == i0.size else o.resize(i0.size, Image.BICUBIC)) for o in outs]
    obj = object_region(truth, sized, [t for t in range(1, len(turns)) if "remove" not in turns[t]["instruction"].lower()])
    rows = []
    for t in range(1, len(turns)):
        editor.seek(t)
        record, h = run_turn(h, turns[t]["instruction"], parts, switches, seed=t)
        kept = h.current.image.array
        steps = [f"{e['step']}:{'applied' if e.get('applied') else 'aside'}" for e in record.post_edit]
        rows.append({"chain": chain["chain_id"], "turn": t, "object": drift(kept, truth, obj),
                     "rest": drift(kept, truth, ~obj), "editor_rest": drift(sized[t - 1], truth, ~obj),
                     "steps": steps})
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            Image.fromarray(kept).save(save / f"{chain['chain_id']}_t{t}.png")
    if save is not None:
        np.save(save / f"{chain['chain_id']}_object.npy", obj)
    return rows


def verified(found: list) -> None:
    """The findings of --verify, and each check's cost."""
    print("\n## The seam and colour checks on the applied steps\n")
    for f in found:
        if f["finding"]:
            print(f"- {f['chain'].replace('convergebench_', '')} turn {f['turn']} {f['step']}: {f['check']}: {f['finding']}")
    for name in ("seam", "colour"):
        sub = [f for f in found if f["check"] == name]
        if sub:
            secs = sorted(f["seconds"] for f in sub)
            print(f"{name}: {sum(bool(f['finding']) for f in sub)} of {len(sub)} applied steps flagged; "
                  f"seconds median {secs[len(secs) // 2]:.4f}, max {secs[-1]:.4f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", required=True, type=Path, help="the realdata/chains folder (read only)")
    ap.add_argument("--only", default="", help="chain ids containing this text only")
    ap.add_argument("--save", type=Path, default=None, help="write the kept pictures here (outside git)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--verify", action="store_true", help="also run the seam and colour checks on every applied step")
    args = ap.parse_args(argv)
    index = json.loads((args.chains / "index.json").read_text())
    chains = [c for c in index["chains"] if c["chain_id"].startswith("convergebench_") and args.only in c["chain_id"]]
    rows = []
    print("| chain | turn | object \u0394E | object mean RGB (/255) | rest \u0394E | rest mean RGB | editor's rest \u0394E | steps |")
    print("|---|---|---|---|---|---|---|---|")
    found: list | None = [] if args.verify else None
    for c in chains:
        start = len(found) if found is not None else 0
        for r in run_chain(args.chains, c, args.save, found):
            rows.append(r)
            print(f"| {r['chain'].replace('convergebench_', '')} | {r['turn']} | {r['object']['dE']:.2f} | "
                  f"{r['object']['rgb']} | {r['rest']['dE']:.2f} | {r['rest']['rgb']} | {r['editor_rest']['dE']:.2f} | "
                  f"{' '.join(r['steps'])} |", flush=True)
        for f in (found or [])[start:]:
            f["chain"] = c["chain_id"]
    for t in range(1, 7):
        sub = [r for r in rows if r["turn"] == t]
        if sub:
            print(f"turn {t}: mean object \u0394E {np.mean([r['object']['dE'] for r in sub]):.2f}, "
                  f"rest \u0394E {np.mean([r['rest']['dE'] for r in sub]):.2f} over {len(sub)} chains")
    if found is not None:
        verified(found)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "verify": found}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
