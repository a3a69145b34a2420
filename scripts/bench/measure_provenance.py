#!/usr/bin/env python
"""Measure the provenance selector and Reveal Composite in the simulated world (not a test; docs/provenance.md).

    python scripts/bench/measure_provenance.py [--dataset occur_sim] [--size 256] [--limit N] [--shift 6] [--out DIR]

For every scenario of the sim set (oracle masks, the sim editor with its default defects):

1. respec-prov: the whole scenario with the provenance planner and selector (0 VLM calls); its
   restoration source is compared with the world's recorded I_ref (reference accuracy).
2. + reveal: Reveal Composite on the revelation turn's output (the same editor output as
   respec-prov+reveal gets: same inputs, same seed), S_restore before and after.
3. The ceiling: the same output with I_ref's true pixels pasted into the true R_restore (oracle
   A.5 region), colour-matched the same way (a robust per-channel fit of I_ref onto I_N on the
   pixels no turn since changed), scored the same way: what any seamless paste of the right
   pixels can reach given the editor's drift (blur and noise stay).
4. A shifted scene: the revelation turn's output rolled by (--shift, --shift/2) px, as if the
   occluder's removal had also moved the scene; the geometry check should refuse.

Prints the tables of docs/provenance.md and writes per-scenario rows to <out>/provenance.jsonl.
The scorer is LPIPS + CLIP from the model folders when their files are there, else the tiny
random-weight one (then only the PSNR part is calibrated; the PSNR column is given beside).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script, not part of the pack

from respec.bench.configs import CONFIGS  # noqa: E402
from respec.bench.runner import run_turns  # noqa: E402
from respec.bench.settings import BenchModels, BenchSettings  # noqa: E402
from respec.occur.scenario import load_dataset  # noqa: E402
from respec.controller.covering import locate_covering_turn  # noqa: E402
from respec.errors import MissingWeightsError, DownloadNotAllowedError  # noqa: E402
from respec.eval.metrics import occur_regions  # noqa: E402
from respec.pixels.colour_fit import fit_colour  # noqa: E402
from respec.pixels.change_mask import change_of  # noqa: E402
from respec.pixels.provenance import provenance_of  # noqa: E402
from respec.pixels.work_images import as_float_rgb  # noqa: E402
from respec.pixels.reveal import reveal_for  # noqa: E402
from respec.sim import SimEditor  # noqa: E402


def _scorer():
    try:
        from respec.eval.metric_models import load_scorer
        return load_scorer(), "lpips+clip"
    except (MissingWeightsError, DownloadNotAllowedError):
        from respec.eval.metric_models import build_tiny_scorer
        from respec.tiny.eval_models import build_tiny_clip
        return build_tiny_scorer(0, build_tiny_clip(0)), "tiny lpips+clip (random weights; PSNR part calibrated)"


def ceiling_image(history_before, final, ref_id: int, k: int, r_restore: np.ndarray) -> np.ndarray:
    """I_N with I_ref's pixels in the true R_restore, colour-matched as Reveal Composite matches."""
    cur = as_float_rgb(final)
    size = (cur.shape[1], cur.shape[0])
    src = as_float_rgb(history_before.image(ref_id), size)
    prev = as_float_rgb(history_before.current.image, size)
    prov = provenance_of(history_before)
    stable = prov.unchanged_since(k - 1) & ~prov.changes[k]
    fit = fit_colour(src, cur, use=stable & ~change_of(prev, cur).mask)
    out = cur.copy()
    out[r_restore] = np.clip(fit.apply(src), 0, 1)[r_restore]
    return np.clip(np.round(out * 255), 0, 255).astype(np.uint8)


class ShiftOnReveal:
    """The sim editor, but its revelation-turn output is rolled by (dy, dx): the scene moved."""

    def __init__(self, inner: SimEditor, dy: int, dx: int):
        self.inner, self.dy, self.dx = inner, dy, dx
        self.name, self.last_run = inner.name, {}
        self._t = None

    def begin_turn(self, scenario, t):
        self._t = (scenario, t)
        self.inner.begin_turn(scenario, t)

    def register_derived(self, *a):
        return self.inner.register_derived(*a)

    def edit(self, images, instruction, **kw):
        out = self.inner.edit(images, instruction, **kw)
        self.last_run = self.inner.last_run
        scenario, t = self._t
        if scenario.is_restoration(t):
            from PIL import Image
            return Image.fromarray(np.roll(np.asarray(out), (self.dy, self.dx), axis=(0, 1)))
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="occur_sim")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--shift", type=int, default=6, help="scene shift in px for the refusal check (0: skip)")
    ap.add_argument("--out", default="runs/provenance")
    ap.add_argument("--scenario", action="append", default=None, metavar="ID", help="only this scenario (repeatable)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(args.dataset)
    scenarios = [s for s in ds.scenarios if s.has_geometry and (not args.scenario or s.id in args.scenario)]
    scenarios = scenarios[: args.limit]
    scorer, scorer_name = _scorer()
    settings = BenchSettings(dataset=args.dataset, editor="sim", size=args.size, save_images=False)
    editor = SimEditor()
    models = BenchModels(editor=editor, scorer=scorer, masks="oracle")
    rows = []
    for i, sc in enumerate(scenarios, 1):
        hist = run_turns(sc, CONFIGS["respec-prov"], models, settings)
        final = hist.current.image
        before = hist.with_turns(hist.turns[:-1])
        plan = hist.current.plan
        truth = editor.truth(sc, final)
        masks = editor.oracle_masks(sc, [im.rgb() for im in hist.images[1:]])
        ref_id = truth.reference_turn
        ref = hist.image(ref_id).rgb()
        r_restore, _ = occur_regions(masks, ref.size)
        found = locate_covering_turn(before, hist.current.instruction)
        k = found.turn
        row = {"scenario": sc.id, "type": sc.revelation_type, "turns": sc.num_turns, "true_reference": ref_id,
               "chosen": plan.restoration_source_id, "correct": plan.restoration_source_id == ref_id,
               "vlm_calls": sum(int(t.meta.get("vlm_calls", 0)) for t in hist.turns[1:]),
               "evidence": found.evidence, "ambiguous": found.ambiguous, "covering_turn": k,
               "restore_area": float(r_restore.mean())}
        base = scorer.occur_score(final.rgb(), ref, masks)
        row.update(S_restore=base["S_restore"], psnr=base["restore"]["psnr_db"])
        if k is not None:
            rev = reveal_for(before, final, k)
            row.update(applied=rev.applied, reason=rev.reason, checks=rev.checks)
            if rev.applied:
                editor.register_derived(sc, rev.image, final)
                s = scorer.occur_score(rev.image, ref, masks)
                row.update(S_restore_reveal=s["S_restore"], psnr_reveal=s["restore"]["psnr_db"],
                           region_iou=float((rev.region & r_restore).sum() / max(1, (rev.region | r_restore).sum())),
                           missed=float((r_restore & ~rev.region).sum() / max(1, r_restore.sum())))
            ceil = ceiling_image(before, final, ref_id, k, r_restore)
            editor.register_derived(sc, ceil, final)
            c = scorer.occur_score(ceil, ref, masks)
            row.update(S_restore_ceiling=c["S_restore"], psnr_ceiling=c["restore"]["psnr_db"])
        if args.shift and k is not None:
            shifted = ShiftOnReveal(SimEditor(), args.shift // 2, args.shift)
            h2 = run_turns(sc, CONFIGS["respec-prov"], BenchModels(editor=shifted, scorer=scorer, masks="oracle"),
                           settings)
            r2 = reveal_for(h2.with_turns(h2.turns[:-1]), h2.current.image, k)
            row.update(shift_refused=not r2.applied, shift_reason=r2.reason)
        rows.append(row)
        print(f"[{i}/{len(scenarios)}] {sc.id}: ref {row['chosen']} (true {ref_id}) "
              f"S_restore {row['S_restore']:.3f} -> {row.get('S_restore_reveal', float('nan')):.3f} "
              f"(ceiling {row.get('S_restore_ceiling', float('nan')):.3f}) {row.get('reason', '')}", flush=True)
    with open(out / "provenance.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=float) + "\n")
    report(rows, scorer_name)
    return 0


def _mean(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.fmean(xs) if xs else float("nan")


def report(rows: list[dict], scorer_name: str) -> None:
    n = len(rows)
    acc = sum(r["correct"] for r in rows) / n
    print(f"\nScorer: {scorer_name}. Scenarios: {n}.\n")
    print("| measure | value |\n|---|---|")
    print(f"| reference accuracy (provenance, vs the world's I_ref) | {acc:.1%} ({sum(r['correct'] for r in rows)}/{n}) |")
    print(f"| VLM calls per scenario | {_mean([r['vlm_calls'] for r in rows]):.2f} |")
    print(f"| evidence: request+provenance / request / provenance alone | "
          f"{sum(r['evidence'] == 'request+provenance' for r in rows)} / {sum(r['evidence'] == 'request' for r in rows)} / "
          f"{sum(r['evidence'] == 'provenance' for r in rows)} |")
    print(f"| ambiguous | {sum(bool(r['ambiguous']) for r in rows)} |")
    held = [r for r in rows if r.get("applied")]
    print(f"| Reveal Composite applied (geometry held) | {len(held)}/{n} |")
    if held:
        sr, sc, s0 = (_mean([r[k] for r in held]) for k in ("S_restore_reveal", "S_restore_ceiling", "S_restore"))
        print(f"| S_restore where it held: respec-prov / + reveal / ceiling | {s0:.3f} / {sr:.3f} / {sc:.3f} |")
        print(f"| + reveal as a share of the ceiling | {sr / sc:.3f} |")
        print(f"| restoration PSNR (dB) there: respec-prov / + reveal / ceiling | "
              f"{_mean([r['psnr'] for r in held]):.1f} / {_mean([r['psnr_reveal'] for r in held]):.1f} / "
              f"{_mean([r['psnr_ceiling'] for r in held]):.1f} |")
        print(f"| revealed region vs true R_restore: IoU / share of R_restore missed | "
              f"{_mean([r['region_iou'] for r in held]):.3f} / {_mean([r['missed'] for r in held]):.3f} |")
    shifted = [r for r in rows if "shift_refused" in r]
    if shifted:
        print(f"| shifted scene refused by the geometry check | {sum(r['shift_refused'] for r in shifted)}/{len(shifted)} |")
    by_type = defaultdict(list)
    for r in rows:
        by_type[r["type"]].append(r)
    print("\n| revelation type | N | ref. acc. | applied | S_restore prov | + reveal (applied) | ceiling |")
    print("|---|---|---|---|---|---|---|")
    for t, rs in sorted(by_type.items()):
        ap = [r for r in rs if r.get("applied")]
        print(f"| {t} | {len(rs)} | {sum(r['correct'] for r in rs) / len(rs):.0%} | {len(ap)} | "
              f"{_mean([r['S_restore'] for r in rs]):.3f} | {_mean([r.get('S_restore_reveal') for r in ap]):.3f} | "
              f"{_mean([r.get('S_restore_ceiling') for r in rs]):.3f} |")
    print("\nFailures and refusals:")
    for r in rows:
        if not r["correct"]:
            print(f"- {r['scenario']}: chose I_{r['chosen']}, the world's I_ref is I_{r['true_reference']} "
                  f"({r['evidence']}, ambiguous={r['ambiguous']})")
        if r.get("applied") is False:
            print(f"- {r['scenario']}: not applied: {r.get('reason')}")
        if r.get("shift_refused") is False:
            print(f"- {r['scenario']}: shifted scene NOT refused: {r.get('shift_reason')}")


if __name__ == "__main__":
    raise SystemExit(main())
