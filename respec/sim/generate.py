"""A scenario generator (paper appendix A.2, figures 9-10): valid OCCUR scenarios with geometry
from a folder of photos.

Every scenario gets a table-3 template and a revelation type (cells are visited in a shuffled
round so any count spreads evenly), an occludee box (for the pack's shipped photos a box we
chose by hand; for other photos the most textured window, since hidden texture is what a
re-inventing editor gets wrong), occluder(s) placed over it, intermediate turns away from it, and
a revelation that uncovers at least part of it. Instructions come from word lists and phrase
templates; they never name the occludee from the occlusion on and never ask for anything back;
I_ref is the image just before the occlusion (appendix A.4).

With a controller backend, the intermediate turns after the occlusion are asked of the VLM with
our own prompts in the shape of figures 9 (two-turn generation) and 10 (two-turn extension),
shown the image with the occluder in place; what comes back is validated (JSON, two concise
instructions, no restoration words, no occludee, the occluder neither moved nor removed) and
turned into geometry; a turn that fails validation falls back to the word lists, and the
scenario's notes say which turns came from the VLM and why others did not.

Every scenario is checked with the dataset validator before it is kept.
"""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..occur.geometry import Box, box_intersection
from ..occur.scenario import (FORMAT, FORMAT_VERSION, REVELATION_TYPES, TEMPLATES, ScenarioError, load_image_ref,
                              validate_dataset)
from ..errors import InputError
from ..images import content_hash
from ..pixels.analysis_cache import CACHE
from .sprites import COLOURS

OCCLUDERS = ("wooden crate", "bouquet", "beach umbrella", "cardboard box", "suitcase", "stack of books",
             "flower pot", "road sign", "picnic basket", "gift box", "pillow", "lampshade", "backpack",
             "basket of apples", "teddy bear", "barrel", "toolbox", "birdhouse")
NEW_OBJECTS = ("kite", "butterfly", "balloon", "lantern", "clock", "star", "leaf", "apple", "ball",
               "candle", "hat", "shell", "coin", "bird", "cup", "flag pennant", "paper plane", "snail")
TINT_NAMES = ("red", "blue", "green", "yellow", "purple", "orange", "pink")
STYLE_PHRASES = {"watercolor": "Turn the photo into a watercolor painting.",
                 "oil painting": "Make the picture look like an oil painting.",
                 "comic": "Render the photo in a bright comic-book style.",
                 "sepia": "Give the whole photo an old sepia look.",
                 "pastel": "Make the whole picture soft pastel colours.",
                 "black and white": "Make the photo black and white."}

# Occludee boxes chosen by hand for the photos that ship with the pack (fractions of the image).
SHIPPED_OCCLUDEES: dict[str, tuple[tuple[str, Box], ...]] = {
    "astronaut": (("round mission patch", (0.25, 0.65, 0.41, 0.82)), ("name tag", (0.53, 0.64, 0.65, 0.74)),
                  ("space shuttle model", (0.68, 0.02, 0.92, 0.48)), ("flag", (0.0, 0.0, 0.17, 0.44))),
    "chelsea": (("green left eye", (0.27, 0.28, 0.47, 0.52)), ("pink nose", (0.50, 0.74, 0.68, 0.92)),
                ("forehead stripes", (0.36, 0.02, 0.64, 0.28))),
    "coffee": (("cup handle", (0.66, 0.14, 0.82, 0.36)), ("spoon", (0.50, 0.55, 0.70, 0.85)),
               ("coffee crema", (0.36, 0.15, 0.64, 0.40))),
    "rocket": (("middle of the rocket", (0.44, 0.35, 0.56, 0.75)), ("launch lights", (0.10, 0.82, 0.45, 0.98)),
               ("top of the rocket", (0.45, 0.10, 0.55, 0.38))),
    "camera": (("film camera", (0.45, 0.25, 0.68, 0.45)), ("tripod", (0.43, 0.56, 0.74, 0.98)),
               ("distant buildings", (0.75, 0.26, 1.0, 0.45))),
    "grace_hopper": (("medal ribbons", (0.60, 0.82, 0.90, 0.92)), ("name tag", (0.15, 0.78, 0.42, 0.88)),
                     ("cap badge", (0.36, 0.02, 0.70, 0.17)), ("glasses", (0.30, 0.28, 0.78, 0.41))),
}
PHOTO_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
_RESTORE_WORDS = re.compile(r"\b(restor\w*|recover\w*|reveal\w*|uncover\w*|reappear\w*|unhid\w*|back)\b", re.I)
_FORBIDDEN_OCCLUDER_VERBS = re.compile(r"\b(remove|delete|erase|move|shift|relocate|resize|shrink|enlarge|"
                                       r"bigger|smaller|reshape|rotate|scale)\w*\b", re.I)


@dataclass(frozen=True)
class Photo:
    """A source photo: its image reference (as written in the dataset) and occludee candidates."""

    ref: str
    name: str
    occludees: tuple[tuple[str, Box], ...]
    base_dir: str = ""      # what a relative ref resolves against

    def load(self):
        """The photo's image, its ref resolved against base_dir."""
        return photo_image(self.ref, self.base_dir or None)


def photo_name(ref: str) -> str:
    """'skimage:astronaut' / 'matplotlib:grace_hopper.jpg' / 'photos/astronaut.png' -> 'astronaut' ..."""
    tail = ref.split(":", 1)[1] if re.match(r"^[a-z]+:", ref) else ref
    return Path(tail).stem


def shipped_photo_refs() -> list[str]:
    """The image references of the pack's sample set (the photos that ship with the pack), in the
    relocatable 'sample:<file>' form, so a generated file holds no path of this machine."""
    from ..occur.scenario import load_dataset, sample_photo_ref
    refs = dict.fromkeys(s.image for s in load_dataset("occur_sample"))
    return [r if ":" in r else sample_photo_ref(r) for r in refs]


def photo_image(ref: str, base_dir: str | Path | None = None):
    """A photo as load_image_ref gives it, decoded once and kept in the analysis cache's `decoded`
    (generating a set renders each photo again for every scenario drawn on it)."""
    key = (ref, str(base_dir or ""))
    img = CACHE.decoded.get(key)
    if img is None:
        img = load_image_ref(ref, base_dir)
        CACHE.decoded.put(key, img)
    return img.copy()


def _shipped_by_content() -> dict[str, str]:
    """The content hash of each photo that ships with the pack -> its name ('astronaut'); hashed
    once, kept with the decoded images in the analysis cache (a read-only mapping)."""
    from ..occur.scenario import SAMPLE_PHOTOS_DIR, sample_photo_ref
    key = ("shipped photos by content", str(SAMPLE_PHOTOS_DIR))
    known = CACHE.decoded.get(key)
    if known is None:
        known = MappingProxyType({content_hash(np.asarray(photo_image(sample_photo_ref(p)))): p.stem
                                  for p in sorted(SAMPLE_PHOTOS_DIR.iterdir()) if p.suffix.lower() in PHOTO_SUFFIXES})
        CACHE.decoded.put(key, known)
    return known


def shipped_photo_name(ref: str, base_dir: str | Path | None = None) -> str | None:
    """Which shipped photo `ref` is ('astronaut'), or None for any other image. A packaged sample
    ('sample:', 'skimage:', 'matplotlib:') is known by its name; a file only by its pixels, so a
    user's own photo called astronaut.png never gets the shipped one's occludees or credit."""
    if re.match(r"^(sample|skimage|matplotlib):", ref):
        return photo_name(ref)
    return _shipped_by_content().get(content_hash(np.asarray(photo_image(ref, base_dir))))


def shipped_sources(refs: list[str], base_dir: str | Path | None = None) -> dict:
    """The sample set's source and licence records of those `refs` that are shipped photos
    (recognised as `shipped_photo_name` does; relative refs resolve against `base_dir`)."""
    from ..occur.scenario import load_dataset
    known = {photo_name(r): info for r, info in load_dataset("occur_sample").sources.items()}
    out = {}
    for ref in dict.fromkeys(refs):
        name = shipped_photo_name(ref, base_dir)
        if name in known:
            out[ref] = known[name]
    return out


def textured_box(image, rng: random.Random, side: float = 0.2) -> Box:
    """The window (side × side of the image) with the most gradient energy: hidden texture is what
    re-invention gets wrong, so it makes the most telling occludee for a photo we know nothing of."""
    grey = np.asarray(image.convert("L").resize((64, 64)), np.float32) / 255.0
    gy, gx = np.gradient(grey)
    energy = np.hypot(gx, gy)
    k = max(2, int(round(64 * side)))
    integral = np.pad(energy.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    sums = integral[k:, k:] - integral[:-k, k:] - integral[k:, :-k] + integral[:-k, :-k]
    flat = np.argsort(sums.ravel())[::-1][:5]
    y, x = np.unravel_index(flat[rng.randrange(len(flat))], sums.shape)
    return (x / 64.0, y / 64.0, (x + k) / 64.0, (y + k) / 64.0)


def load_photos(refs: list[str], seed: int = 0, base_dir: str | Path | None = None) -> list[Photo]:
    """Photos with occludee candidates: the hand-chosen boxes of a shipped photo, else a textured box."""
    rng = random.Random(seed)
    base = str(base_dir or "")
    out = []
    for ref in refs:
        name = photo_name(ref)
        shipped = shipped_photo_name(ref, base_dir)
        if shipped in SHIPPED_OCCLUDEES:
            out.append(Photo(ref, name, SHIPPED_OCCLUDEES[shipped], base))
        else:
            img = photo_image(ref, base_dir)
            boxes = tuple((f"textured region {i + 1}", textured_box(img, rng)) for i in range(2))
            out.append(Photo(ref, name, boxes, base))
    if not out:
        raise InputError("no photos to build scenarios from: give --photos DIR with .png/.jpg files")
    return out


def photos_in(folder: str | Path) -> list[str]:
    """Image files directly inside `folder` (sorted)."""
    p = Path(folder)
    if not p.is_dir():
        raise InputError(f"--photos {str(folder)!r} is not a folder")
    files = sorted(str(f.resolve()) for f in p.iterdir() if f.suffix.lower() in PHOTO_SUFFIXES and f.is_file())
    if not files:
        raise InputError(f"--photos {str(folder)!r} holds no {'/'.join(PHOTO_SUFFIXES)} files")
    return files


# ------------------------------------------------------------------------------ placement

def where(box: Box) -> str:
    """A location phrase for a box ('in the top left corner', 'at the bottom', 'in the middle')."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    v = "top" if cy < 0.34 else ("bottom" if cy > 0.66 else "")
    h = "left" if cx < 0.34 else ("right" if cx > 0.66 else "")
    if v and h:
        return f"in the {v} {h} corner"
    if v:
        return f"at the {v} of the picture"
    if h:
        return f"on the {h} side of the picture"
    return "in the middle of the picture"


def _clip(b) -> Box:
    x0, y0, x1, y1 = (min(max(v, 0.0), 1.0) for v in b)
    return (x0, y0, x1, y1)


def free_box(rng: random.Random, w: float, h: float, avoid: list[Box], tries: int = 300) -> Box | None:
    """A w × h box that overlaps none of `avoid` (None when none was found)."""
    for _ in range(tries):
        x0, y0 = rng.uniform(0.0, 1.0 - w), rng.uniform(0.0, 1.0 - h)
        b = (x0, y0, x0 + w, y0 + h)
        if all(box_intersection(b, a) == 0 for a in avoid):
            return b
    return None


def cover_box(rng: random.Random, target: Box) -> Box:
    """An occluder box that covers `target` with a margin of 5-30 % of its size on each side."""
    w, h = target[2] - target[0], target[3] - target[1]
    m = [rng.uniform(0.05, 0.3) for _ in range(4)]
    return _clip((target[0] - m[0] * w, target[1] - m[1] * h, target[2] + m[2] * w, target[3] + m[3] * h))


def shrink_box(rng: random.Random, box: Box, target: Box) -> Box:
    """A box about half the size of `box`, inside it, pushed to the side away from the target's centre."""
    w, h = box[2] - box[0], box[3] - box[1]
    s = rng.uniform(0.4, 0.55)
    nw, nh = w * s, h * s
    tx, ty = (target[0] + target[2]) / 2, (target[1] + target[3]) / 2
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    x0 = box[0] if tx >= cx else box[2] - nw
    y0 = box[1] if ty >= cy else box[3] - nh
    return (x0, y0, x0 + nw, y0 + nh)


# ------------------------------------------------------------------------------ the VLM path

_RULES_AND_FORMAT = """The image shows a specific object called the occluder: "{occluder}".
Write TWO {more}short editing instructions (turn {a} and turn {b}) that follow the current image.
Allowed: add a completely new object to the image; change the colour, texture or pattern of an object.
Forbidden: changing the position, size or shape of the occluder; removing the occluder; asking to bring
anything back. Keep each instruction short and direct (at most 20 words), without flowery adjectives.
Answer with JSON only:
{{"instruction_turn{a}": "...", "new_object_turn{a}": "<the added object's name, or empty>",
  "instruction_turn{b}": "...", "new_object_turn{b}": "<the added object's name, or empty>"}}"""

# Figure 9 (two-turn generation) and figure 10 (two-turn extension), in our own words.
TWO_TURN_GENERATION = ("You write instructions for a multi-turn image editing test.\n"
                       + _RULES_AND_FORMAT.replace("{more}", ""))
TWO_TURN_EXTENSION = ("You extend a multi-turn image editing test. The edits so far were:\n{so_far}\n"
                      + _RULES_AND_FORMAT.replace("{more}", "more "))


def check_vlm_turns(raw: str, turns: tuple[int, int], occluder: str, occludee: str) -> tuple[list[dict], list[str]]:
    """Validate the VLM's two-turn answer. Returns ([{"instruction", "new_object"}, ...] of the
    turns that passed, [why each failed])."""
    from ..controller.parsing import extract_json
    found, value, _ = extract_json(raw)
    if not found or not isinstance(value, dict):
        return [], ["the answer holds no JSON object"]
    ok, why = [], []
    for t in turns:
        ins = value.get(f"instruction_turn{t}")
        obj = value.get(f"new_object_turn{t}", "")
        if not isinstance(ins, str) or not ins.strip():
            why.append(f"turn {t}: no instruction")
            continue
        ins = " ".join(ins.split())
        obj = " ".join(obj.split()).lower() if isinstance(obj, str) else ""
        if len(ins.split()) > 25:
            why.append(f"turn {t}: longer than 25 words")
        elif _RESTORE_WORDS.search(ins):
            why.append(f"turn {t}: asks for something back")
        elif occludee and occludee.lower() in ins.lower():
            why.append(f"turn {t}: names the occludee")
        elif occluder.lower() in ins.lower() and _FORBIDDEN_OCCLUDER_VERBS.search(ins):
            why.append(f"turn {t}: changes the occluder's place, size or shape")
        elif obj and (len(obj.split()) > 3 or obj not in ins.lower() or obj == occluder.lower()):
            why.append(f"turn {t}: new_object {obj!r} is not a short name found in the instruction")
        else:
            ok.append({"turn": t, "instruction": ins if ins.endswith(".") else ins + ".", "new_object": obj})
    return ok, why


# ------------------------------------------------------------------------------ one scenario

class _Builder:
    """Draws one scenario for a (template, revelation type, photo) cell."""

    def __init__(self, rng: random.Random, photo: Photo, template: str, rtype: str, index: int,
                 backend: Any = None, image_size: int = 256):
        self.rng, self.photo, self.template, self.rtype = rng, photo, template, rtype
        self.index, self.backend, self.image_size = index, backend, image_size
        self.notes: list[str] = []
        self.vlm_calls = 0

    def build(self) -> dict:
        rng = self.rng
        stages = TEMPLATES[self.template]
        occ_turn = stages.index("O") + 1
        occludee, obox = rng.choice(self.photo.occludees)
        n_occ = 2 if self.rtype == "multi" else 1
        clash = lambda o: o in occludee.lower() or occludee.lower() in o  # noqa: E731
        occluders = rng.sample([o for o in OCCLUDERS if not clash(o)], n_occ)
        new_pool = [o for o in NEW_OBJECTS if not clash(o)]
        rng.shuffle(new_pool)
        placed: dict[str, Box] = {}
        turns: list[dict] = []
        for t, stage in enumerate(stages, start=1):
            if stage == "S":
                style = rng.choice(list(STYLE_PHRASES))
                turns.append(self._turn(STYLE_PHRASES[style], "S", [], [{"do": "style", "style": style}]))
            elif stage == "O":
                if n_occ == 1:
                    boxes = [cover_box(rng, obox)]
                else:
                    mid = (obox[0] + obox[2]) / 2
                    boxes = [cover_box(rng, (obox[0], obox[1], mid, obox[3])),
                             cover_box(rng, (mid, obox[1], obox[2], obox[3]))]
                    boxes[0] = (boxes[0][0], boxes[0][1], min(boxes[0][2], mid), boxes[0][3])
                    boxes[1] = (max(boxes[1][0], mid), boxes[1][1], boxes[1][2], boxes[1][3])
                acts = [{"do": "add", "label": o, "box": list(b)} for o, b in zip(occluders, boxes)]
                placed.update({o: b for o, b in zip(occluders, boxes)})
                if n_occ == 1:
                    text = f"Add a large {occluders[0]} {where(boxes[0])}."
                else:
                    text = f"Add a large {occluders[0]} {where(boxes[0])} and a {occluders[1]} {where(boxes[1])}."
                turns.append(self._turn(text, "O", [], acts))
            elif stage == "M" and t < occ_turn:
                turns.append(self._pre_occlusion_edit(occludee, obox, placed, new_pool))
            elif stage == "M":
                turns.append(None)    # filled below (VLM or word lists)
            else:
                turns.append(self._revelation(occluders, obox, placed, new_pool))
        post = [i for i, t in enumerate(turns) if t is None]
        vlm = self._vlm_turns(turns, post, occluders, occludee, occ_turn) if self.backend is not None and post else {}
        for i in post:
            turns[i] = vlm.get(i) or self._post_occlusion_edit(occluders, obox, placed, new_pool)
            if i in vlm:
                self._place_vlm(turns[i], occluders, obox, placed)
        sid = f"sim{self.index:04d}_{self.photo.name}_{self.template}_{self.rtype}"
        notes = f"Generated by respec.sim.generate (seed-determined). {' '.join(self.notes)}".strip()
        return {"id": re.sub(r"[^A-Za-z0-9_.-]", "_", sid)[:80], "image": self.photo.ref, "template": self.template,
                "revelation_type": self.rtype, "occluders": occluders, "occludee": occludee,
                "reference_turn": occ_turn - 1, "occludee_box": [round(v, 4) for v in obox],
                "turns": turns, "notes": notes}

    @staticmethod
    def _turn(text: str, stage: str, new: list[str], actions: list[dict]) -> dict:
        for a in actions:
            if "box" in a:
                a["box"] = [round(float(v), 4) for v in a["box"]]
        return {"instruction": text, "stage": stage, "new_objects": new, "actions": actions}

    def _add_new(self, avoid: list[Box], placed: dict, new_pool: list[str]) -> dict | None:
        label = next((o for o in new_pool if o not in placed), None)
        if label is None:
            return None
        side = self.rng.uniform(0.1, 0.18)
        b = free_box(self.rng, side, side, avoid + list(placed.values()))
        if b is None:
            return None
        placed[label] = b
        return self._turn(f"Add a small {label} {where(b)}.", "M", [label], [{"do": "add", "label": label, "box": list(b)}])

    def _pre_occlusion_edit(self, occludee: str, obox: Box, placed: dict, new_pool: list[str]) -> dict:
        # Before the occlusion an edit may change the occludee itself (then I_0 is a wrong reference).
        if self.rng.random() < 0.5:
            colour = self.rng.choice(TINT_NAMES)
            return self._turn(f"Make the {occludee} {colour}.", "M", [],
                              [{"do": "recolor", "box": list(obox), "color": _hex(colour)}])
        colour = self.rng.choice(TINT_NAMES)
        return self._add_new([obox], placed, new_pool) or self._turn(
            f"Make the {occludee} {colour}.", "M", [], [{"do": "recolor", "box": list(obox), "color": _hex(colour)}])

    def _post_occlusion_edit(self, occluders: list[str], obox: Box, placed: dict, new_pool: list[str]) -> dict:
        r = self.rng.random()
        news = [k for k in placed if k not in occluders]
        if r < 0.55:
            turn = self._add_new([obox], placed, new_pool)
            if turn:
                return turn
        colour = self.rng.choice(TINT_NAMES)
        if r < 0.8:
            target = self.rng.choice(news + occluders)
            return self._turn(f"Make the {target} {colour}.", "M", [], [{"do": "recolor", "label": target, "color": _hex(colour)}])
        b = free_box(self.rng, 0.2, 0.2, [obox] + list(placed.values()))
        if b is None:
            target = self.rng.choice(occluders)
            return self._turn(f"Make the {target} {colour}.", "M", [], [{"do": "recolor", "label": target, "color": _hex(colour)}])
        return self._turn(f"Tint the background {where(b)} {colour}.", "M", [], [{"do": "recolor", "box": list(b), "color": _hex(colour)}])

    def _revelation(self, occluders: list[str], obox: Box, placed: dict, new_pool: list[str]) -> dict:
        kinds = ([self.rtype] if self.rtype != "multi"
                 else self.rng.sample(["remove", "move", "resize", "replace"], 2))
        acts, parts, new = [], [], []
        for occ, kind in zip(occluders, kinds):
            box = placed[occ]
            if kind == "move":
                w, h = box[2] - box[0], box[3] - box[1]
                others = [b for k, b in placed.items() if k != occ]
                dest = free_box(self.rng, w, h, [obox] + others)
                if dest is None:
                    kind = "resize"
                else:
                    acts.append({"do": "move", "label": occ, "box": list(dest)})
                    parts.append(f"move the {occ} so it stands {where(dest)}")
                    placed[occ] = dest
                    continue
            if kind == "remove":
                acts.append({"do": "remove", "label": occ})
                parts.append(f"remove the {occ}")
                del placed[occ]
            elif kind == "resize":
                small = shrink_box(self.rng, box, obox)
                acts.append({"do": "resize", "label": occ, "box": list(small)})
                parts.append(f"make the {occ} about half as big, keeping it in the same corner of its spot")
                placed[occ] = small
            elif kind == "replace":
                by = next(o for o in new_pool if o not in placed)
                small = shrink_box(self.rng, box, obox)
                acts.append({"do": "replace", "label": occ, "by": by, "box": list(small)})
                parts.append(f"replace the {occ} with a small {by}")
                new.append(by)
                del placed[occ]
                placed[by] = small
        text = " and ".join(parts)
        return self._turn(text[0].upper() + text[1:] + ".", "R", new, acts)

    # -- the VLM (figures 9-10) ---------------------------------------------------------
    def _vlm_turns(self, turns: list, post: list[int], occluders: list[str], occludee: str, occ_turn: int) -> dict:
        image = self._image_after(turns[:occ_turn], occluders)
        out: dict[int, dict] = {}
        remaining = list(post)
        first = True
        while remaining:
            pair = remaining[:2]
            ids = (pair[0] + 1, (pair[1] if len(pair) > 1 else pair[0] + 1) + 1)
            if first:
                prompt = TWO_TURN_GENERATION.format(occluder=" and ".join(occluders), a=ids[0], b=ids[1])
            else:
                so_far = "\n".join(f"turn {i + 1}: {out[i]['instruction'] if i in out else '(word list)'}" for i in post
                                   if i < pair[0])
                prompt = TWO_TURN_EXTENSION.format(so_far=so_far, occluder=" and ".join(occluders), a=ids[0], b=ids[1])
            raw = self.backend.chat([image, prompt], max_new_tokens=200)
            self.vlm_calls += 1
            got, why = check_vlm_turns(raw if isinstance(raw, str) else str(raw), ids, " and ".join(occluders), occludee)
            for g in got:
                i = g["turn"] - 1
                if i in pair:
                    new = [g["new_object"]] if g["new_object"] else []
                    out[i] = {"instruction": g["instruction"], "stage": "M", "new_objects": new, "actions": [],
                              "note": "instruction written by the VLM (figure 9/10 prompt)"}
            if why:
                self.notes.append(f"VLM answer for turns {ids[0]}-{ids[1]} not used for: {'; '.join(why)} "
                                  f"(word lists instead).")
            remaining = remaining[2:]
            first = False
        return out

    def _place_vlm(self, turn: dict, occluders: list[str], obox: Box, placed: dict) -> None:
        """Geometry for a VLM-written intermediate turn: the named new object at a free box, or a
        recolour of the object (or, failing that, a free region) the instruction names."""
        text = turn["instruction"].lower()
        colour = next((c for c in TINT_NAMES if re.search(rf"\b{c}\b", text)), self.rng.choice(TINT_NAMES))
        if turn["new_objects"]:
            label = turn["new_objects"][0]
            side = self.rng.uniform(0.1, 0.18)
            b = free_box(self.rng, side, side, [obox] + list(placed.values()))
            if b is not None and label not in placed:
                placed[label] = b
                turn["actions"] = [{"do": "add", "label": label, "box": [round(v, 4) for v in b]}]
                return
            turn["new_objects"] = []
        named = [k for k in placed if k.lower() in text]
        if named:
            turn["actions"] = [{"do": "recolor", "label": named[0], "color": _hex(colour)}]
            return
        b = free_box(self.rng, 0.2, 0.2, [obox] + list(placed.values())) or (0.0, 0.0, 0.05, 0.05)
        turn["actions"] = [{"do": "recolor", "box": [round(v, 4) for v in b], "color": _hex(colour)}]

    def _image_after(self, turns: list[dict], occluders: list[str]):
        """The image the VLM is shown: I_0 with the turns up to the occlusion applied (no defects)."""
        from PIL import Image
        from ..occur.geometry import parse_actions
        from .world import WorldState, apply_actions, render_turn
        img = self.photo.load()
        s = self.image_size / max(img.size)
        img = img.resize((max(16, int(img.size[0] * s)), max(16, int(img.size[1] * s))))
        out = np.asarray(img, np.float32) / 255.0
        state = WorldState()
        for t in turns:
            new, effect = apply_actions(state, parse_actions(t["actions"], "actions", []), tuple(occluders))
            out, state = render_turn(out, state, new, effect), new
        return Image.fromarray(np.clip(out * 255 + 0.5, 0, 255).astype(np.uint8))


def _hex(name: str) -> str:
    r, g, b = COLOURS[name]
    return "#{:02x}{:02x}{:02x}".format(int(r * 255), int(g * 255), int(b * 255))


# ------------------------------------------------------------------------------ the dataset

def cells(seed: int) -> list[tuple[str, str]]:
    """Table 3's templates × the revelation types, in a seeded order (visited round by round)."""
    all_cells = [(t, r) for t in TEMPLATES for r in REVELATION_TYPES]
    random.Random(seed).shuffle(all_cells)
    return all_cells


def generate_scenarios(photo_refs: list[str], count: int, seed: int = 0, backend: Any = None,
                       name: str = "occur_generated", base_dir: str | Path | None = None,
                       max_tries: int = 30) -> dict:
    """A validated dataset object of `count` scenarios (see the module docstring).

    photo_refs: image references as the dataset will hold them; base_dir: the folder relative
    references resolve against (the output file's folder). backend: a controller backend for the
    figure 9/10 path (None: word lists only)."""
    if count < 1:
        raise InputError(f"--count must be at least 1, got {count}")
    photos = load_photos(photo_refs, seed, base_dir)
    order = cells(seed)
    rng = random.Random(seed)
    scenarios, vlm_calls = [], 0
    for i in range(count):
        template, rtype = order[i % len(order)]
        last: Exception | None = None
        for attempt in range(max_tries):
            photo = photos[(i + attempt) % len(photos)] if attempt else photos[rng.randrange(len(photos))]
            b = _Builder(random.Random(rng.getrandbits(64)), photo, template, rtype, i, backend)
            try:
                raw = b.build()
                vlm_calls += b.vlm_calls
                validate_dataset({"format": FORMAT, "scenarios": [raw]}, f"generated scenario {i}", base_dir)
            except (ScenarioError, StopIteration, KeyError) as e:
                last = e
                continue
            scenarios.append(raw)
            break
        else:
            raise InputError(f"could not build a valid {template}/{rtype} scenario in {max_tries} tries: {last}")
    return _dataset(name, f"{count} OCCUR scenarios with geometry for the simulated editor, generated by "
                          f"`python -m respec scenarios generate` (seed {seed}; "
                          f"{'instructions of intermediate turns from the VLM where valid' if backend else 'word lists'}"
                          f"{f'; {vlm_calls} VLM calls' if backend else ''}).", scenarios, base_dir)


def _dataset(name: str, description: str, scenarios: list[dict], base_dir) -> dict:
    """A generated dataset file's content (its photos' sources listed when the pack ships them), validated."""
    data = {"format": FORMAT, "version": FORMAT_VERSION, "name": name, "description": description,
            "licence": "Scenario text and annotations: same licence as the pack (GPL-3.0-or-later). Photos: see 'sources'.",
            "sources": shipped_sources([s["image"] for s in scenarios], base_dir),
            "scenarios": scenarios}
    if not data["sources"]:
        del data["sources"]
    validate_dataset(data, name, base_dir)
    return data


# ------------------------------------------------------------------------------ conversations that repeat themselves

CONVERSATION_KINDS = ("readd", "two_objects")
BALL_COLOURS = ("red", "blue", "green", "yellow")


def _conversation(rng: random.Random, photo: Photo, kind: str, index: int) -> dict:
    """One scenario of a conversation that repeats itself (issue 32), with geometry:

    readd        an object is added off the occludee, removed, added again (the same kind, another
                 colour's neighbour, another place) over the occludee, and removed: "MMOR". The last
                 removal undoes the second addition (I_ref = I_2), not the first.
    two_objects  two objects of one kind are in the picture and the request names one of them
                 (its size and material words): the occluder added over the occludee, another of
                 its kind added elsewhere before or after it ("MOR" or "OMR")."""
    occludee, obox = rng.choice(photo.occludees)
    cover = cover_box(rng, obox)
    side = rng.uniform(0.12, 0.18)
    elsewhere = free_box(rng, side, side, [obox, cover])
    if elsewhere is None:
        raise ScenarioError(f"no free place on {photo.name} for a second object")
    if kind == "readd":
        colour = rng.choice(BALL_COLOURS)
        first, second = f"{colour} beach ball", f"{colour} ball"
        turns = [_Builder._turn(f"Add a {first} {where(elsewhere)}.", "M", [first],
                                [{"do": "add", "label": first, "box": list(elsewhere)}]),
                 _Builder._turn(f"Remove the {first}.", "M", [], [{"do": "remove", "label": first}]),
                 _Builder._turn(f"Add a {second} {where(cover)}.", "O", [],
                                [{"do": "add", "label": second, "box": list(cover)}]),
                 _Builder._turn(f"Remove the {second}.", "R", [], [{"do": "remove", "label": second}])]
        occluder, ref_turn, template = second, 2, "custom"
    else:
        noun = rng.choice(("crate", "basket", "box"))
        occluder, other = f"wooden {noun}", f"small {noun}"
        add_occ = _Builder._turn(f"Add a large {occluder} {where(cover)}.", "O", [],
                                 [{"do": "add", "label": occluder, "box": list(cover)}])
        add_other = _Builder._turn(f"Add a {other} {where(elsewhere)}.", "M", [other],
                                   [{"do": "add", "label": other, "box": list(elsewhere)}])
        other_first = rng.random() < 0.5
        turns = [add_other, add_occ] if other_first else [add_occ, add_other]
        turns.append(_Builder._turn(f"Remove the {occluder}.", "R", [], [{"do": "remove", "label": occluder}]))
        ref_turn, template = (1, "custom") if other_first else (0, "3turn")
    sid = f"conv{index:04d}_{photo.name}_{kind}"
    return {"id": re.sub(r"[^A-Za-z0-9_.-]", "_", sid)[:80], "image": photo.ref, "template": template,
            "revelation_type": "remove", "occluders": [occluder], "occludee": occludee,
            "reference_turn": ref_turn, "occludee_box": [round(v, 4) for v in obox], "turns": turns,
            "notes": f"Generated by respec.sim.generate (seed-determined): a conversation that repeats itself ({kind})."}


def conversation_scenarios(photo_refs: list[str], count: int, seed: int = 0, name: str = "occur_conversation",
                           base_dir: str | Path | None = None, max_tries: int = 30) -> dict:
    """A validated dataset of `count` scenarios of conversations that repeat themselves (kinds
    `CONVERSATION_KINDS` in turn; see `_conversation`): the covering-turn rules are tested on them
    in the sim world (docs/sim.md)."""
    if count < 1:
        raise InputError(f"--count must be at least 1, got {count}")
    photos = load_photos(photo_refs, seed, base_dir)
    rng = random.Random(seed)
    scenarios = []
    for i in range(count):
        kind = CONVERSATION_KINDS[i % len(CONVERSATION_KINDS)]
        last: Exception | None = None
        for attempt in range(max_tries):
            photo = photos[(i + attempt) % len(photos)]
            try:
                raw = _conversation(random.Random(rng.getrandbits(64)), photo, kind, i)
                validate_dataset({"format": FORMAT, "scenarios": [raw]}, f"generated scenario {i}", base_dir)
            except (ScenarioError, KeyError) as e:
                last = e
                continue
            scenarios.append(raw)
            break
        else:
            raise InputError(f"could not build a valid {kind} conversation in {max_tries} tries: {last}")
    return _dataset(name, f"{count} conversations that repeat themselves (an object added, removed and added "
                          f"again; two objects of one kind, one removed), with geometry for the simulated editor, "
                          f"generated by `python -m respec scenarios generate --kind conversation` (seed {seed}).",
                    scenarios, base_dir)


def dataset_text(data: dict) -> str:
    """The dataset as JSON laid out for reading and diffs: one line per field, one line per turn."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    lines = ["{"]
    for k, v in data.items():
        if k != "scenarios":
            lines.append(f"  {dump(k)}: {dump(v)},")
    lines.append('  "scenarios": [')
    for i, sc in enumerate(data["scenarios"]):
        head = [f"{dump(k)}: {dump(v)}" for k, v in sc.items() if k != "turns"]
        turns = ",\n".join(f"      {dump(t)}" for t in sc["turns"])
        lines.append("    {" + ", ".join(head) + ',\n     "turns": [\n' + turns + "\n    ]}"
                     + ("," if i < len(data["scenarios"]) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def write_dataset(data: dict, out: str | Path) -> Path:
    """Write a dataset file atomically (a folder or other non-file at `out` is refused, and no
    temporary file is left behind when the write fails)."""
    out = Path(out)
    if out.is_dir() or (os.path.lexists(out) and not out.is_file()):
        raise InputError(f"{out} is {'a folder' if out.is_dir() else 'not a regular file'}; give the path of the "
                         f"dataset file to write (e.g. {out / 'my_scenarios.json'})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    try:
        tmp.write_text(dataset_text(data), encoding="utf-8")
        os.replace(tmp, out)
    except BaseException as e:
        if tmp.is_file():
            tmp.unlink()
        if isinstance(e, OSError):
            raise InputError(f"could not write the dataset file {out}: {e}") from e
        raise
    return out


def cell_counts(scenarios) -> dict[tuple[str, str], int]:
    """(template, revelation type) -> number of scenarios."""
    counts: dict[tuple[str, str], int] = {}
    for s in scenarios:
        key = (s["template"], s["revelation_type"]) if isinstance(s, dict) else (s.template, s.revelation_type)
        counts[key] = counts.get(key, 0) + 1
    return counts


def cell_table(scenarios) -> str:
    """A markdown table: templates × revelation types with counts."""
    counts = cell_counts(scenarios)
    lines = ["| template | " + " | ".join(REVELATION_TYPES) + " | all |",
             "|---|" + "---:|" * (len(REVELATION_TYPES) + 1)]
    for t in TEMPLATES:
        row = [counts.get((t, r), 0) for r in REVELATION_TYPES]
        lines.append(f"| {t} | " + " | ".join(str(v) for v in row) + f" | {sum(row)} |")
    return "\n".join(lines)
