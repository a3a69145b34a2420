"""Draw one sim scenario's turns: the baseline (re-invents), +HRS with the true I_ref (copies), and
the oracle masks (A.5 regions) — the figure in docs/sim.md.

    python scripts/bench/sim_figure.py [--scenario ID] [--dataset occur_sim] [--size 256] [--out docs/sim-turns.png]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from respec.occur.scenario import load_dataset  # noqa: E402
from respec.history import History  # noqa: E402
from respec.eval.metrics import occur_regions  # noqa: E402
from respec.sim import SimEditor  # noqa: E402


def run(scenario, editor, size, ref_ids):
    h = History.start(scenario.load_image(size))
    for t in range(1, scenario.num_turns + 1):
        ids = ref_ids + [t - 1] if (t == scenario.restoration_turn and ref_ids) else [t - 1]
        editor.begin_turn(scenario, t)
        h = h.append(editor.edit([h.image(i).rgb() for i in ids], scenario.turns[t - 1].instruction,
                                 output_size=h.current.image.size, seed=1000 + t), scenario.turns[t - 1].instruction)
    return h


def tile(img: Image.Image, caption: str, width: int) -> Image.Image:
    img = img.convert("RGB")
    img = img.resize((width, int(img.size[1] * width / img.size[0])))
    out = Image.new("RGB", (img.size[0], img.size[1] + 28), "white")
    out.paste(img, (0, 28))
    ImageDraw.Draw(out).text((4, 4), caption[:44], fill="black")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", default="occur_sim")
    p.add_argument("--scenario", default=None, help="scenario id (default: the first 5-turn v2 'remove' one)")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--out", default=str(ROOT / "docs" / "sim-turns.png"))
    a = p.parse_args()
    ds = load_dataset(a.dataset)
    s = ds.by_id(a.scenario) if a.scenario else next(x for x in ds if x.template == "5turn_v2"
                                                       and x.revelation_type == "remove")
    base_ed, hrs_ed = SimEditor(), SimEditor()
    base = run(s, base_ed, a.size, [])
    hrs = run(s, hrs_ed, a.size, [s.reference_turn])
    masks = hrs_ed.oracle_masks(s, [hrs.image(t).rgb() for t in range(1, len(hrs))])
    r_restore, r_preserve = occur_regions(masks)
    w = 200
    rows = []
    rows.append([tile(base.image(0).rgb(), "I_0 (photo)", w)] + [
        tile(base.image(t).rgb(), f"T{t} {s.turns[t - 1].stage}: {s.turns[t - 1].instruction}", w)
        for t in range(1, len(base))])
    last = s.num_turns
    ref = np.asarray(hrs.image(s.reference_turn).rgb()).copy()
    overlay = (0.5 * ref).astype(np.uint8)
    overlay[r_restore] = (0.4 * ref[r_restore] + [0, 150, 0]).clip(0, 255).astype(np.uint8)
    overlay[~r_restore & ~r_preserve] = [160, 40, 40]
    rows.append([tile(Image.fromarray(overlay), "green R_restore, red excluded", w)]
                + [tile(Image.new("RGB", (w, 10), "white"), "", w) for _ in range(last - 2)]
                + [tile(base.image(last).rgb(), "baseline I_N: re-invented", w),
                   tile(hrs.image(last).rgb(), f"+HRS I_N: copied from I_{s.reference_turn}", w)])
    width = sum(t.size[0] for t in rows[0])
    height = sum(max(t.size[1] for t in r) for r in rows)
    sheet = Image.new("RGB", (width, height), "white")
    y = 0
    for r in rows:
        x = 0
        for t in r:
            sheet.paste(t, (x, y))
            x += t.size[0]
        y += max(t.size[1] for t in r)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    sheet.save(a.out)
    print(f"{s.id}: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
