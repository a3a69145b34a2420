"""Render the template browser's thumbnails: workflows/<title>.jpg beside each UI workflow, a picture of
what the graph does, not of its nodes.

    python scripts/workflows/render_thumbnails.py                # every shipped graph
    python scripts/workflows/render_thumbnails.py --only conversational_qwen_image_edit_2511   # a new one

Each thumbnail is one turn of the simulated world (respec/sim: sprites on the pack's public-domain sample
photos, an editor with named defects; a test instrument, docs/sim.md), run through the pack's own
benchmark runner: scenario SCENARIO of occur_sim (an umbrella added over the astronaut's mission patch,
a cup, then "remove the umbrella"), cropped around the patch, as a 2 x 2 grid: 1 the photo, 2 the
umbrella added, 3 the turn that removes it as this graph's configuration makes it, 4 what that shows,
with the run's own S_restore. A graph's KIND (by its key, the builder's name in build_workflows.py)
decides the configuration and the words, and a conversation's own entry in CHAT_CARDS says what it
does differently (its editor, files and route); a new graph of an existing kind needs nothing but this
command. Same inputs, same pictures: the sim world is seeded.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # a script: the repository's core (respec) and its sibling build script
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("RESPEC_PROGRESS", "0")

from respec.bench.configs import CONFIGS  # noqa: E402
from respec.bench.runner import load_models, run_one  # noqa: E402
from respec.occur.scenario import load_dataset  # noqa: E402
from respec.bench.settings import BenchSettings  # noqa: E402
from respec.eval.metrics import occur_regions  # noqa: E402
from respec.bench.sim_models import load_sim_models  # noqa: E402

SCENARIO = "sim0032_astronaut_3turn_remove"
SIZE = 512              # longer side of the sim run's images
THUMB = 512             # the thumbnail is square: the browser shows it in a square box of ~260 CSS px
GAP = 6
GREEN, PURPLE, RED, BLUE = (46, 204, 113), (155, 89, 182), (231, 76, 60), (52, 152, 219)
# Kinds by key prefix (first match wins): (prefix, kind). The configuration each kind runs and what
# its last tiles say.
KIND_RULES = (("conversational_provenance", "reveal"), ("benchmark_native_baseline", "baseline"),
              ("benchmark_baseline", "baseline"), ("benchmark", "eval"), ("conversational", "chat"),
              ("occluder_mask", "mask"))
KINDS = {
    "chat": {"config": "respec", "outline": GREEN, "step": "3 remove it",
             "text": ["ReSpec:", "the history gives", "the hidden patch", "back to the editor"]},
    "reveal": {"config": "respec-prov+reveal", "outline": PURPLE, "step": "3 remove it",
               "text": ["No VLM:", "Reveal pastes the", "hidden pixels back", "from the history"]},
    "eval": {"config": "respec", "outline": GREEN, "step": "3 scored", "region": True,
             "text": ["OCCUR-Bench:", "ReSpec's edit,", "scored where it", "had to restore"]},
    "baseline": {"config": "baseline", "outline": RED, "step": "3 re-invented",
                 "text": ["Baseline:", "the editor alone", "re-invents what", "was hidden"]},
    # an occluder mask graph: the third tile is turn 2 with the umbrella's mask tinted (the sim's own
    # recorded mask, which the graph's SAM3 + B.1 rules stand for: no model runs here)
    "mask": {"config": "respec", "outline": BLUE, "step": "3 its mask", "occluder": True,
             "score": "the sim's own mask",
             "text": ["SAM3 masks:", "the object you", "name, by the", "paper's B.1 rules"]},
}


# The chat graphs differ in their editor, their files and their route, not in the picture: each says
# what it does differently (its config and words override its kind's; issue 44: seven cards looked alike).
ORANGE, TEAL = (230, 126, 34), (26, 188, 156)
CHAT_CARDS = {
    "conversational_flux2": {"text": ["klein 9B:", "a VLM plans;", "ComfyUI's own", "klein 9B files"]},
    "conversational_flux2_klein4b": {
        "config": "respec-prov+undo+reveal+guard", "outline": TEAL,
        "text": ["klein 4B:", "no VLM; undo,", "Reveal + guard;", "ComfyUI 4B files"]},
    "conversational_omnigen2": {"outline": ORANGE, "text": ["OmniGen2:", "a VLM plans;", "ComfyUI's own", "OmniGen2 files"]},
    "conversational_textgen_flux2": {"outline": BLUE,
                                     "text": ["TextGenerate:", "ComfyUI's own", "LLM plans; klein", "9B files"]},
    "conversational_flux2_diffusers": {"text": ["Paper-exact:", "a VLM plans;", "the pack's own", "diffusers klein 9B"]},
    "conversational_qwen_image_edit_2511": {
        "config": "respec-prov+undo+reveal+guard", "outline": TEAL,
        "text": ["Qwen Edit 2511:", "no VLM; undo,", "Reveal + guard;", "ComfyUI's files"]},
    "conversational_provenance_flux2": {"text": ["No VLM:", "Reveal pastes the", "hidden pixels;",
                                                 "diffusers klein 9B"]},
}


def card_of(key: str) -> dict:
    """What `key`'s thumbnail shows: its kind's spec (KINDS), with CHAT_CARDS' overrides."""
    return {**KINDS[kind_of(key)], **CHAT_CARDS.get(key, {})}


def kind_of(key: str) -> str:
    """The thumbnail kind of the graph `key` (KIND_RULES); a clear error for a key no rule covers."""
    for prefix, kind in KIND_RULES:
        if key.startswith(prefix):
            return kind
    raise KeyError(f"no thumbnail kind for {key!r}: add a rule to KIND_RULES in {Path(__file__).name}")


def run_sim(out: Path, scenario, configs: list[str]) -> tuple[dict[str, dict], np.ndarray, list]:
    """The scenario under `configs`: ({config: results row}, R_restore, the occluder masks of turns
    1..N) (images under `out`; the masks from the sim's recorded layers, appendix A.5; R_restore on
    I_0's grid)."""
    settings = BenchSettings(dataset="occur_sim", editor="sim", masks="oracle", size=SIZE, out=str(out),
                             configs=configs)
    models = load_models(settings, load_sim_models)
    rows = {c: run_one(scenario, CONFIGS[c], models, settings, out_dir=out) for c in configs}
    frames = [Image.open(out / p).convert("RGB") for p in rows[configs[0]]["images"][1:]]
    masks = models.editor.oracle_masks(scenario, frames)
    r_restore, _ = occur_regions(masks)
    return rows, r_restore, list(masks.occ)


def crop_box(scenario, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """A square around the first occluder the scenario adds, 2.4 times its size, inside the image."""
    x0, y0, x1, y1 = next(a.box for t in scenario.turns for a in t.actions if a.do == "add")
    w, h = size
    cx, cy = (x0 + x1) / 2 * w, (y0 + y1) / 2 * h
    side = min(w, h, 2.4 * max((x1 - x0) * w, (y1 - y0) * h))
    left = min(max(0.0, cx - side / 2), w - side)
    top = min(max(0.0, cy - side / 2), h - side)
    return round(left), round(top), round(left + side), round(top + side)


def font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def tile(image: Image.Image, box, side: int, label: str, outline=None, region=None, mask=None) -> Image.Image:
    """A crop of `image` to `box`, `side` px square, `label` on a dark band at the top; `region`
    (a box in the image's pixels) outlined in `outline`, or `mask` (bool, the image's grid) tinted."""
    image = image.convert("RGB")
    if mask is not None:
        a = np.asarray(image).astype(np.float32)
        a[mask] = 0.45 * a[mask] + 0.55 * np.asarray(outline, np.float32)
        image = Image.fromarray(a.round().astype(np.uint8))
    crop = image.crop(box).resize((side, side), Image.LANCZOS)
    d = ImageDraw.Draw(crop, "RGBA")
    if region is not None and outline is not None:
        scale = side / (box[2] - box[0])
        r = [round((region[0] - box[0]) * scale), round((region[1] - box[1]) * scale),
             round((region[2] - box[0]) * scale), round((region[3] - box[1]) * scale)]
        d.rectangle(r, outline=outline, width=5)
    # the label at the bottom: the browser puts its own badge ("Node graph") on the top-left corner
    d.rectangle([0, side - 40, side, side], fill=(0, 0, 0, 170))
    d.text((10, side - 33), label, font=font(24), fill="white")
    return crop


def text_tile(side: int, lines: list[str], score: str, colour) -> Image.Image:
    """The verdict: what the graph does, in a few words, and the run's own number."""
    out = Image.new("RGB", (side, side), (32, 32, 36))
    d = ImageDraw.Draw(out)
    d.rectangle([0, 0, 8, side], fill=colour)
    y = 22
    for k, line in enumerate(lines):
        d.text((24, y), line, font=font(30 if k == 0 else 26), fill="white" if k == 0 else (220, 220, 220))
        y += 40 if k == 0 else 34
    d.text((24, side - 66), score, font=font(24), fill=colour)
    d.text((24, side - 34), "simulated world", font=font(20), fill=(150, 150, 150))
    return out


def thumbnail(spec: dict, rows: dict[str, dict], r_restore: np.ndarray, out: Path, scenario,
              occluders: list | None = None) -> Image.Image:
    """The 2 x 2 grid of a card `spec` (card_of) from the sim run's rows (their images are under `out`;
    `occluders`: the occluder masks of turns 1..N, for the mask kind)."""
    row = rows[spec["config"]]
    frames = [Image.open(out / p) for p in row["images"]]
    box = crop_box(scenario, frames[0].size)
    hidden = next(a.box for t in scenario.turns for a in t.actions if a.do == "add")
    w, h = frames[0].size
    region = (hidden[0] * w, hidden[1] * h, hidden[2] * w, hidden[3] * h)
    cover = next(i for i, t in enumerate(scenario.turns, start=1) if any(a.do == "add" for a in t.actions))
    side = (THUMB - GAP) // 2
    if spec.get("occluder"):
        last = tile(frames[cover], box, side, spec["step"], spec["outline"], mask=np.asarray(occluders[cover - 1], bool))
    elif spec.get("region"):
        last = tile(frames[-1], box, side, spec["step"], spec["outline"], mask=r_restore)
    else:
        last = tile(frames[-1], box, side, spec["step"], spec["outline"], region)
    score = spec.get("score") or f"S_restore {row['S_restore']:.2f}"
    tiles = [tile(frames[0], box, side, "1 photo"), tile(frames[cover], box, side, "2 + umbrella"), last,
             text_tile(side, spec["text"], score, spec["outline"])]
    sheet = Image.new("RGB", (THUMB, THUMB), (24, 24, 28))
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % 2) * (side + GAP), (i // 2) * (side + GAP)))
    return sheet


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", metavar="KEY", help="graph keys (default: every shipped graph)")
    ap.add_argument("--out", type=Path, default=ROOT / "workflows", help="folder to write <title>.jpg into")
    a = ap.parse_args(argv)
    index = json.loads((ROOT / "workflows" / "api" / "index.json").read_text(encoding="utf-8"))["workflows"]
    keys = a.only or list(index)
    unknown = [k for k in keys if k not in index]
    if unknown:
        raise SystemExit(f"not a shipped graph: {unknown} (run scripts/workflows/build_workflows.py after adding it)")
    cards = {k: card_of(k) for k in keys}
    scenario = load_dataset("occur_sim").by_id(SCENARIO)
    with tempfile.TemporaryDirectory(prefix="respec-thumbs-") as tmp:
        rows, r_restore, occluders = run_sim(Path(tmp), scenario, sorted({c["config"] for c in cards.values()}))
        a.out.mkdir(parents=True, exist_ok=True)
        for key, card in cards.items():
            path = a.out / f"{index[key]['title']}.jpg"
            thumbnail(card, rows, r_restore, Path(tmp), scenario, occluders).save(path, quality=88, optimize=True)
            print(f"{kind_of(key):<8} {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
