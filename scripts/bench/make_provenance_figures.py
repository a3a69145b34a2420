#!/usr/bin/env python
"""The pictures in docs/provenance.md (issue 20), made from the project's own synthetic scenes and
from the Apache-2.0 Step1X-Edit pairs only (never from the other real-data folders):

    python scripts/bench/make_provenance_figures.py --pairs ../shared/realdata/pairs [--out docs]

provenance-chain.png (derived from a Step1X-Edit input photo, Apache-2.0): the controlled chain of
scripts/bench/bench_real_pairs.py with a 1 %/call zoom-out: I_2 (the board, zoomed twice), the
remover's I_3 (zoomed again, the board's region re-invented without its detail), Reveal
Composite's output (I_0 warped by the composed alignment and pasted), and the paste without the
alignment (what the old reveal would have pasted), each with a crop around the region's edge.

provenance-rerender.png (synthetic scene of tests/synthetic_scenes.py): I_{t-1}, a re-rendered
I_t, its change mask (white) and the stability record's unstable blocks (red), and the same for
an edit that kept the scene.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import bench_real_pairs as brp  # noqa: E402
from respec.pixels.alignment import IDENTITY  # noqa: E402
from respec.pixels.change_mask import change_mask, unstable_mask  # noqa: E402
from respec.pixels.reveal import reveal_composite, reveal_for  # noqa: E402
from synthetic_scenes import background, draw_rect, drift, rerender_field, u8  # noqa: E402


def labelled(img: np.ndarray, text: str, w: int) -> Image.Image:
    im = Image.fromarray(img).resize((w, round(w * img.shape[0] / img.shape[1])), Image.LANCZOS)
    out = Image.new("RGB", (im.width, im.height + 18), "white")
    out.paste(im, (0, 18))
    ImageDraw.Draw(out).text((3, 3), text, fill="black")
    return out


def row(tiles: list[Image.Image]) -> Image.Image:
    h = max(t.height for t in tiles)
    out = Image.new("RGB", (sum(t.width for t in tiles) + 4 * (len(tiles) - 1), h), "white")
    x = 0
    for t in tiles:
        out.paste(t, (x, 0))
        x += t.width + 4
    return out


def chain_figure(pairs: Path, out: Path) -> None:
    index = json.loads((pairs / "index.json").read_text())
    it = [i for i in index["items"] if i["source"] == "step1x_edit"][0]
    im = Image.fromarray(brp.load(pairs / it["input"]["path"]))
    photo = np.asarray(im.resize((768, round(768 * im.size[1] / im.size[0])), Image.BICUBIC))
    captured = {}
    real = brp.reveal_for

    def spy(h, edited, covering_turn, params=brp.DEFAULT_REVEAL):
        captured["h"], captured["edited"] = h, edited
        return real(h, edited, covering_turn, params)
    brp.reveal_for = spy
    r = brp.chain(photo, "zoom", 1.0, None)
    brp.reveal_for = real
    h, edited = captured["h"], captured["edited"]
    res = reveal_for(h, edited, covering_turn=1)
    # the old behaviour: no alignment (I_0 pasted where the board was in I_0's frame)
    from respec.pixels.provenance import provenance_of
    prov = provenance_of(h)
    old = reveal_composite(h.image(0), h.current.image, edited, prov.changes[1], stable=prov.unchanged_since(0),
                           source_id=0, source_alignment=IDENTITY)
    hh, ww = photo.shape[:2]
    y0, y1, x0, x1 = int(hh * 0.30), int(hh * 0.45), int(ww * 0.30), int(ww * 0.50)   # the board's top-left edge
    crops = [(h.current.image.array, "I_2 (board, zoomed)"), (edited, "I_3: remover"),
             (res.image, f"Reveal: aligned, {r['gain_db']:+.0f} dB"),
             (old.image if old.applied else edited, "without alignment" + ("" if old.applied else ": refused"))]
    top = row([labelled(a, t, 230) for a, t in crops])
    bottom = row([labelled(a[y0:y1, x0:x1], t + " (crop)", 230) for a, t in crops])
    fig = Image.new("RGB", (top.width, top.height + bottom.height + 4), "white")
    fig.paste(top, (0, 0))
    fig.paste(bottom, (0, top.height + 4))
    fig.save(out / "provenance-chain.png", optimize=True)
    print("chain:", r, "| unaligned:", old.applied, old.reason[:80])


def rerender_figure(out: Path) -> None:
    shape, box = (192, 256), (60, 80, 110, 150)
    scene = background(4, shape)
    kept = drift(draw_rect(scene, box, (0.9, 0.1, 0.1)), noise=0.006)
    redrawn = rerender_field(draw_rect(scene, box, (0.9, 0.1, 0.1)))
    tiles = [labelled(u8(scene), "I_{t-1} (synthetic)", 200)]
    for img, name in ((kept, "kept"), (redrawn, "re-rendered")):
        res = change_mask(u8(scene), u8(img))
        vis = np.repeat((res.mask * 255).astype(np.uint8)[..., None], 3, axis=2)
        bad = unstable_mask(res.stability.unstable, shape)
        vis[bad & ~res.mask] = (200, 40, 40)
        st = res.stability
        tiles += [labelled(u8(img), f"I_t: {name}", 200),
                  labelled(vis, f"stable {st.stable_fraction:.2f}, rerendered {st.rerendered}", 200)]
    row(tiles).save(out / "provenance-rerender.png", optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", required=True, type=Path, help="the realdata/pairs folder (read only)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args(argv)
    chain_figure(args.pairs, args.out)
    rerender_figure(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
