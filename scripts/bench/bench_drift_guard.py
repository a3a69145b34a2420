"""Drift Guard measurements (docs/drift-guard.md): a long simulated conversation, real pictures
and the cost.

    python scripts/bench/bench_drift_guard.py chain --turns 20 --out runs/drift_chain   # figure + table
    python scripts/bench/bench_drift_guard.py cost --size 1024                           # seconds per turn
    python scripts/bench/bench_drift_guard.py real --pairs ../shared/realdata/pairs --out runs/drift_real
    python scripts/bench/bench_drift_guard.py editors --pairs ../shared/realdata/pairs --out runs/drift_editors

chain: one sim scene (the sim editor with --sim-defects realistic, a SIMULATION) edited for N turns
(an object added, then moved a little on every turn), without the guard, with it (the default
membrane seam) and with the multiband seam (respec.post_edit.guard_step.GuardStep in run_turn); after every turn
the untouched PSNR (the image against I_0 on the pixels no turn's ground-truth edit touched,
respec.sim.measures), how many untouched pixels differ from I_0 and the edit's fidelity (the guard's
output against the editor's on the turn's true edit region). Writes chain.csv and
untouched_psnr_vs_turn.png.

real: real pictures (scripts/bench/drift_guard_real.py): controlled chains on the Step1X-Edit photos with
the drift measured on real editors, the Step1X-Edit pairs, and every call of the MC-Edit sequences.

editors: every step of index_more.json (Qwen-Image-Edit, FLUX.2 [klein], LongCat-Image-Edit) through the
guard as a user's graph runs it, with per step applied or stepped aside (why), the far pixels changed,
the edit kept and the seconds (scripts/bench/drift_guard_editors.py).

cost: the guard's own CPU seconds (time.process_time) and wall seconds on 1024² edits (a small and
a large added box, a small one among drifted fine detail all over the picture, a small one in a
scene the editor re-rendered (the structure warp and the local flow run), and a new background;
a realistic zoom / shift / blur / gain), the turn's change record (which History Append computes
anyway) computed first and shared, against the 30 s of an edit. Not a test: the figure depends on
the machine.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def chain_scenario(turns: int):
    """An N-turn sim scenario on a shipped photo: the first sim scenario's added object, then moved a
    little on every turn."""
    from respec.occur.scenario import load_dataset
    base = next(s for s in load_dataset("occur_sim") if s.turns[0].actions and s.turns[0].actions[0].do == "add")
    from dataclasses import replace
    from respec.occur import geometry
    first = base.turns[0]
    act = first.actions[0]
    x0, y0, x1, y1 = act.box
    w, h = x1 - x0, y1 - y0
    out = [first]
    rng = np.random.default_rng(0)
    for t in range(1, turns):
        nx = float(np.clip(x0 + rng.uniform(-0.15, 0.15), 0.0, 1.0 - w))
        ny = float(np.clip(y0 + rng.uniform(-0.05, 0.05), 0.0, 1.0 - h))
        box = (round(nx, 4), round(ny, 4), round(nx + w, 4), round(ny + h, 4))
        a = replace(act, do="move", box=box)
        out.append(replace(first, instruction=f"move the {act.label} a little", actions=(a,)))
    del geometry
    return replace(base, id=f"drift_chain_{turns}", turns=tuple(out))


CHAIN_RUNS = (("baseline", "", "without the guard"),
              ("baseline+guard", "membrane", "with the Drift Guard (membrane seam, the default)"),
              ("baseline+guard", "multiband", "with the Drift Guard, multiband seam"))


def run_chain(turns: int, out: Path, size: int) -> list[dict]:
    """The chain without the guard, with it (the default seam) and with the multiband seam: per
    turn the untouched PSNR, how many untouched pixels differ from I_0, the edit's fidelity."""
    from functools import partial
    from unittest import mock
    from respec.bench import runner
    from respec.bench.settings import BenchModels, BenchSettings
    from respec.bench.configs import CONFIGS
    from respec.pixels.guard import GuardParams
    from respec.post_edit.guard_step import GuardStep
    from respec.sim.drift import sim_editor
    from respec.sim.measures import untouched_psnr, untouched_region
    sc = chain_scenario(turns)
    rows = []
    for cname, seam, label in CHAIN_RUNS:
        step = partial(GuardStep, GuardParams(seam=seam)) if seam else GuardStep
        with mock.patch.object(runner, "GuardStep", step):      # the bench's guard, with this seam
            h = runner.run_turns(sc, CONFIGS[cname], BenchModels(editor=sim_editor("realistic")),
                                 BenchSettings(dataset="occur_sim", editor="sim", size=size))
        i0 = h.image(0).array
        for t in range(1, len(h.turns)):
            reg = untouched_region(sc, (i0.shape[1], i0.shape[0]), t)
            steps = h.turns[t].meta.get("post_edit", [])
            pe = [p for p in steps if p.get("step") == "drift_guard"]
            fid = [p.get("edit_region_psnr") for p in steps if p.get("step") == "sim_edit_fidelity"]
            img = h.image(t).array
            rows.append({"config": cname, "seam": seam, "label": label, "turn": t,
                         "untouched_psnr": untouched_psnr(i0, img, reg),
                         "untouched_px_differing": int((np.asarray(img) != i0).any(axis=-1)[reg].sum()),
                         "untouched_px": int(reg.sum()), "edit_region_psnr": fid[0] if fid else None,
                         "guard": ("kept" if pe[0]["applied"] else "stepped aside") if pe else ""})
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "chain.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4.2))
        for (cname, seam, label), style in zip(CHAIN_RUNS, ("o-", "s-", "^--")):
            sub = [r for r in rows if (r["config"], r["seam"]) == (cname, seam)]
            ax.plot([r["turn"] for r in sub], [r["untouched_psnr"] for r in sub], style, ms=3, label=label)
            bx.plot([r["turn"] for r in sub], [max(1e-3, 100.0 * r["untouched_px_differing"] / r["untouched_px"])
                                               for r in sub], style, ms=3, label=label)
        ax.set_ylabel("untouched PSNR vs I_0 (dB; 100 = exact)")
        ax.set_ylim(0, 105)
        bx.set_yscale("log")
        bx.set_ylabel("untouched px differing from I_0 (%, log)")
        for a_ in (ax, bx):
            a_.set_xlabel("turn")
            a_.set_xticks(range(1, turns + 1, max(1, turns // 10)))
            a_.grid(alpha=0.3)
        fig.suptitle(f"{turns}-turn sim chain, --sim-defects realistic (SIMULATION)", fontsize=10)
        handles, labels = ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        fig.savefig(out / "untouched_psnr_vs_turn.png", dpi=120)
    except ImportError:
        print("matplotlib is not installed: no figure (chain.csv has the numbers)")
    return rows


def run_cost(size: int, repeats: int) -> list[dict]:
    """The guard's own CPU seconds (time.process_time: what a busy machine barely changes) and wall
    seconds per turn at size², on three synthetic edits: a small box (4 % of the picture), a large
    one (25 %), and a small box with drifted fine detail all over the picture (the change record's
    mask then spans the whole picture, so the guard's crop is the whole picture)."""
    import os
    from synthetic_scenes import background, draw_rect, drift, moved, u8   # tests/ helpers
    from scipy import ndimage
    from respec.pixels.change_record import ChangeRecord
    from respec.pixels.guard import drift_guard, guard_change, guarded_change
    from respec.post_edit.guard_step import edit_scope
    from respec.history import StoredImage
    scene = background(0, (size, size))
    fine = scene.copy()
    rng = np.random.default_rng(0)
    for _ in range(12):                     # emblems: 3-px checkers an editor's resampling changes
        y, x = (int(v) for v in rng.integers(0, size - size // 16, 2))
        n = size // 16
        yy, xx = np.mgrid[:n, :n]
        chk = (((yy // 3) + (xx // 3)) % 2).astype(float)[..., None]
        fine[y:y + n, x:x + n] = chk * np.array([0.95, 0.85, 0.3]) + (1 - chk) * 0.05
    from synthetic_scenes import rerender_field
    small = (size // 3, size // 3, size // 2, size // 2)
    cases = {"small box (4 %)": (scene, small, "add a red box", None),
             "large box (25 %)": (scene, (size // 4, size // 4, 3 * size // 4, 3 * size // 4), "add a red box", None),
             "small box, drifted detail all over": (fine, small, "add a red box", None),
             "small box, the scene re-rendered (structure warp, local flow)": (scene, small, "add a red box", "rerender"),
             "a new background (the subject kept)": (scene, small, "change the background to a beach", "background")}
    out = []
    for name, (img, box, request, kind) in cases.items():
        prev = StoredImage.of(u8(img))
        if kind == "background":        # everything but the box (the subject) re-drawn
            yy = np.linspace(0.0, 1.0, size)[:, None, None]
            beach = np.where(yy < 0.5, [0.45, 0.65, 0.95], [0.85, 0.75, 0.5]) + 0.05 * (scene - 0.5)   # sky over sand
            target = draw_rect(np.clip(beach, 0, 1), box, (0.9, 0.1, 0.1))
            prev = StoredImage.of(u8(draw_rect(img, box, (0.9, 0.1, 0.1))))
        else:
            target = draw_rect(img, box, (0.9, 0.1, 0.1))
            if kind == "rerender":
                target = rerender_field(target, strength=0.3)
        edit = ndimage.gaussian_filter(moved(target, 1.3, -0.7, 0.99), (0.6, 0.6, 0))
        cur = StoredImage.of(u8(drift(edit, gain=(1.02, 0.99, 1.01), bias=(0, 0, 0), noise=0.004)))
        c0, w0 = time.process_time(), time.perf_counter()
        change = guard_change(prev, cur)
        c_change, w_change = time.process_time() - c0, time.perf_counter() - w0
        cpu, wall = [], []
        for _ in range(repeats):
            c0, w0 = time.process_time(), time.perf_counter()
            res = drift_guard(prev, cur, ChangeRecord.of(change), scope=edit_scope(request))
            guarded_change(res, ChangeRecord.of(change), prev.size)     # History Append's record of the output
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        c, w = float(np.min(cpu)), float(np.min(wall))     # the least disturbed of the repeats
        out.append({"case": name, "size": size, "guard_cpu_s": round(c, 3), "guard_wall_s": round(w, 3),
                    "guard_cpu_s_median": round(float(np.median(cpu)), 3),
                    "share_of_30s_edit (cpu)": f"{100 * c / 30:.2f} %",
                    "change_record_cpu_s": round(c_change, 3),
                    "change_record_wall_s": round(w_change, 3), "applied": res.applied,
                    "edit_fraction": res.record.get("edit_fraction"), "route": res.record.get("route"),
                    "load_1min": round(os.getloadavg()[0], 2)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("chain")
    c.add_argument("--turns", type=int, default=20)
    c.add_argument("--size", type=int, default=256)
    c.add_argument("--out", type=Path, default=Path("runs/drift_chain"))
    r = sub.add_parser("real", help="real pictures: chains on the Step1X-Edit photos, the Step1X pairs, MC-Edit")
    r.add_argument("--pairs", type=Path, required=True, help="the realdata/pairs folder (read only)")
    r.add_argument("--out", type=Path, default=Path("runs/drift_real"))
    r.add_argument("--quick", action="store_true", help="two photos only")
    e = sub.add_parser("editors", help="the index_more.json steps: Qwen-Image-Edit, klein, LongCat")
    e.add_argument("--pairs", type=Path, required=True, help="the realdata/pairs folder (read only)")
    e.add_argument("--out", type=Path, default=Path("runs/drift_editors"))
    e.add_argument("--content-sigma", type=float, default=None,
                   help="the content scale's blur, a share of the shorter side (default 0.006): how much the count "
                        "depends on it")
    k = sub.add_parser("cost")
    k.add_argument("--size", type=int, default=1024)
    k.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    if a.cmd == "real":
        import drift_guard_real
        return drift_guard_real.main(a.pairs, a.out, a.quick)
    if a.cmd == "editors":
        import drift_guard_editors
        if a.content_sigma is not None:
            drift_guard_editors.CONTENT_SIGMA = a.content_sigma
        return drift_guard_editors.main(a.pairs, a.out)
    if a.cmd == "chain":
        rows = run_chain(a.turns, a.out, a.size)
        print("| turn | without the guard (dB) | with the guard (dB) | untouched px differing from I_0 | "
              "edit region PSNR (dB) | with the multiband seam (dB) | its px differing |")
        print("|---|---|---|---|---|---|---|")
        by = {(r["seam"], r["config"], r["turn"]): r for r in rows}
        for t in range(1, a.turns + 1):
            g, m = by[("membrane", "baseline+guard", t)], by[("multiband", "baseline+guard", t)]
            print(f"| {t} | {by[('', 'baseline', t)]['untouched_psnr']} | {g['untouched_psnr']} | "
                  f"{g['untouched_px_differing']} of {g['untouched_px']} | {g['edit_region_psnr']} | "
                  f"{m['untouched_psnr']} | {m['untouched_px_differing']} |")
        print(f"wrote {a.out / 'chain.csv'} and {a.out / 'untouched_psnr_vs_turn.png'}")
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
        rows = run_cost(a.size, a.repeats)
        print("| case | guard CPU s, min (median) | guard wall s, min | CPU share of a 30 s edit | change record CPU s (shared) | "
              "edit fraction | route | load (1 min) |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['case']} | {r['guard_cpu_s']} ({r['guard_cpu_s_median']}) | {r['guard_wall_s']} | {r['share_of_30s_edit (cpu)']} | "
                  f"{r['change_record_cpu_s']} | {r['edit_fraction']} | {r['route']} | {r['load_1min']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
