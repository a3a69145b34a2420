"""The simulated world's layers: a photo background and sprite objects on top, with exact
bookkeeping of which pixel shows what.

A `WorldState` is what the scene holds after a turn (objects bottom to top, the styles applied
so far); it is a small immutable value, independent of the image size. `layer_map` renders it at
any size into an int map (-1 = the photo shows, i = object i is on top), from which every mask
of the ground truth follows. `apply_actions` is one turn of a scenario's geometry
(respec/occur/geometry.py). The pixel-level effects (styles, tints) are plain functions here so
that the editor (respec/sim/editor.py) and the tests use the same ones.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..occur.geometry import Action, Box
from ..pixels.analysis_cache import CACHE
from .sprites import draw_sprite, hex_colour

BACKGROUND = -1


@dataclass(frozen=True)
class SimObject:
    """An object in the scene: its label, role ('occluder' or 'new'), box (fractions of the image),
    the tint a recolor gave it and the styles applied since it was added."""

    label: str
    role: str
    box: Box
    tint: str = ""
    styles: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorldState:
    """The scene after a turn: objects bottom to top and the global styles applied so far."""

    objects: tuple[SimObject, ...] = ()
    styles: tuple[str, ...] = ()

    def labels(self) -> list[str]:
        """The labels of the objects in the scene, bottom to top."""
        return [o.label for o in self.objects]

    def get(self, label: str) -> SimObject | None:
        """The object with this label, or None when the scene has none."""
        return next((o for o in self.objects if o.label == label), None)


@dataclass(frozen=True)
class TurnEffect:
    """What a turn does, beyond the new state: objects to redraw, regions to tint, a style."""

    redraw: frozenset[str] = frozenset()
    tints: tuple[tuple[Box, str], ...] = ()
    style: str = ""


def pixel_box(box: Box, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """A normalised box in pixels (x0, y0, x1, y1) of a (width, height) image, at least 1 px."""
    w, h = size
    x0, y0 = int(round(box[0] * w)), int(round(box[1] * h))
    x1, y1 = max(x0 + 1, int(round(box[2] * w))), max(y0 + 1, int(round(box[3] * h)))
    return x0, y0, min(x1, w), min(y1, h)


def box_mask(box: Box, size: tuple[int, int]) -> np.ndarray:
    """bool H×W: the pixels of a normalised box."""
    x0, y0, x1, y1 = pixel_box(box, size)
    m = np.zeros((size[1], size[0]), bool)
    m[y0:y1, x0:x1] = True
    return m


def apply_actions(state: WorldState, actions: tuple[Action, ...], occluders: tuple[str, ...]) -> tuple[WorldState, TurnEffect]:
    """The state after one turn's actions, and the pixel effects the editor must apply."""
    objects = list(state.objects)
    styles = state.styles
    redraw: set[str] = set()
    tints: list[tuple[Box, str]] = []
    style = ""

    def index(label: str) -> int:
        for i, o in enumerate(objects):
            if o.label == label:
                return i
        raise KeyError(f"the sim world has no object {label!r} (objects: {[o.label for o in objects]})")

    for a in actions:
        if a.do == "add":
            objects.append(SimObject(a.label, "occluder" if a.label in occluders else "new", a.box))
            redraw.add(a.label)
        elif a.do == "remove":
            objects.pop(index(a.label))
        elif a.do in ("move", "resize"):
            i = index(a.label)
            objects[i] = replace(objects[i], box=a.box)
            redraw.add(a.label)
        elif a.do == "replace":
            i = index(a.label)
            objects[i] = SimObject(a.by, "new", a.box, styles=())
            redraw.add(a.by)
        elif a.do == "recolor" and a.label:
            i = index(a.label)
            objects[i] = replace(objects[i], tint=a.color)
            redraw.add(a.label)
        elif a.do == "recolor":
            tints.append((a.box, a.color))
        elif a.do == "style":
            style = a.style
            styles = styles + (a.style,)
            objects = [replace(o, styles=o.styles + (a.style,)) for o in objects]
    return WorldState(tuple(objects), styles), TurnEffect(frozenset(redraw), tuple(tints), style)


def layer_map(state: WorldState, size: tuple[int, int]) -> np.ndarray:
    """int16 H×W: BACKGROUND where the photo shows, else the index of the top object."""
    out = np.full((size[1], size[0]), BACKGROUND, np.int16)
    for i, obj in enumerate(state.objects):
        x0, y0, x1, y1 = pixel_box(obj.box, size)
        _, alpha = object_pixels(obj, x1 - x0, y1 - y0)
        region = out[y0:y1, x0:x1]
        region[alpha] = i
    return out


def object_pixels(obj: SimObject, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """The object's rgb patch (tint and styles applied) and alpha at a pixel size; drawn once, kept in
    the analysis cache's `sprites` (shared: callers copy before they change them)."""
    key = ("object", obj, width, height)
    hit = CACHE.sprites.get(key)
    if hit is None:
        hit = _draw_object(obj, width, height)
        CACHE.sprites.put(key, hit)
    return hit


def _draw_object(obj: SimObject, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """object_pixels' drawing: the sprite, then its tint and styles."""
    rgb, alpha = draw_sprite(obj.label, width, height, obj.role == "occluder")
    if obj.tint:
        rgb = tint(rgb, obj.tint)
    for s in obj.styles:
        rgb = apply_style(rgb, s)
    return rgb, alpha


def paint_objects(out: np.ndarray, state: WorldState, where: np.ndarray, lmap: np.ndarray) -> None:
    """Write each object's own pixels into `out` (float H×W×3) wherever `where` and it is on top."""
    size = (out.shape[1], out.shape[0])
    for i, obj in enumerate(state.objects):
        sel = where & (lmap == i)
        if not sel.any():
            continue
        x0, y0, x1, y1 = pixel_box(obj.box, size)
        rgb, _ = object_pixels(obj, x1 - x0, y1 - y0)
        full = np.zeros_like(out)
        full[y0:y1, x0:x1] = rgb
        out[sel] = full[sel]


def render_turn(pixels: np.ndarray, base: WorldState, new: WorldState, effect: TurnEffect) -> np.ndarray:
    """One turn's layer work on an image of `base` (float H×W×3): the style, the region tints on
    the photo, and every object pixel that changed, drawn from the object's own sprite. Revealed
    pixels (an object left, the photo shows) keep the base's pixels: the caller fills them."""
    size = (pixels.shape[1], pixels.shape[0])
    out = pixels.copy()
    lmap_base = layer_map(base, size)
    if effect.style:
        out = apply_style(out, effect.style)
    for box, colour in effect.tints:
        region = box_mask(box, size) & (lmap_base == BACKGROUND)
        out[region] = tint(out, colour)[region]
    lmap_new = layer_map(new, size)
    redraw = [i for i, o in enumerate(new.objects) if o.label in effect.redraw]
    base_labels = np.array([""] + base.labels(), object)[lmap_base.astype(np.int64) + 1]
    new_labels = np.array([""] + new.labels(), object)[lmap_new.astype(np.int64) + 1]
    repaint = (lmap_new != BACKGROUND) & ((new_labels != base_labels) | np.isin(lmap_new, redraw))
    paint_objects(out, new, repaint, lmap_new)
    return out


# ------------------------------------------------------------------------------ pixel effects

def tint(rgb: np.ndarray, colour: str, amount: float = 0.7) -> np.ndarray:
    """Paint an area `colour`, keeping its shading: luminance × colour, mixed in by `amount`."""
    c = np.array(hex_colour(colour), np.float32)
    lum = rgb @ np.array([0.299, 0.587, 0.114], np.float32)
    painted = np.clip(lum[..., None] * 1.6 * c[None, None, :] / max(float(c.max()), 1e-3) * 0.9, 0.0, 1.0)
    return ((1 - amount) * rgb + amount * painted).astype(np.float32)


def apply_style(rgb: np.ndarray, style: str) -> np.ndarray:
    """A global style filter (deterministic; float H×W×3 in 0..1)."""
    from scipy.ndimage import gaussian_filter, median_filter
    x = np.asarray(rgb, np.float32)
    lum = x @ np.array([0.299, 0.587, 0.114], np.float32)
    if style == "watercolor":
        soft = gaussian_filter(x, sigma=(1.2, 1.2, 0)) if x.shape[0] > 4 else x
        out = 0.6 * np.round(soft * 6) / 6 + 0.4 * soft
        out = 0.8 * out + 0.2 * lum[..., None] + 0.06
    elif style == "oil painting":
        smooth = median_filter(x, size=(3, 3, 1)) if x.shape[0] > 4 else x
        grey = smooth.mean(axis=2, keepdims=True)
        out = grey + 1.35 * (smooth - grey)
    elif style == "comic":
        out = np.round(x * 3) / 3
        gy, gx = np.gradient(lum)
        edge = np.clip(np.hypot(gx, gy) * 6, 0, 1)
        out = out * (1 - edge[..., None])
    elif style == "sepia":
        m = np.array([[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]], np.float32)
        out = x @ m.T
    elif style == "pastel":
        grey = x.mean(axis=2, keepdims=True)
        out = 0.65 * (grey + 0.6 * (x - grey)) + 0.35
    elif style == "black and white":
        out = np.repeat(lum[..., None], 3, axis=2)
    else:
        raise ValueError(f"unknown style {style!r}")
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def scenario_states(scenario) -> list[WorldState]:
    """The states after turns 0..N when every turn edits the previous image (the normal lineage)."""
    states = [WorldState()]
    for turn in scenario.turns:
        states.append(apply_actions(states[-1], turn.actions, scenario.occluders)[0])
    return states


def occluder_mask(state: WorldState, lmap: np.ndarray) -> np.ndarray:
    """Pixels where an occluder is on top."""
    idx = [i for i, o in enumerate(state.objects) if o.role == "occluder"]
    return np.isin(lmap, idx)


def new_object_mask(state: WorldState, lmap: np.ndarray) -> np.ndarray:
    """Pixels where a new (non-occluder) object is on top."""
    idx = [i for i, o in enumerate(state.objects) if o.role == "new"]
    return np.isin(lmap, idx)


def true_reference_turn(scenario, size: tuple[int, int]) -> int:
    """The ground-truth I_ref id of the world (appendix A.4): the latest image before an occluder
    first hides an occludee pixel (every edit that may touch the occludee comes before that)."""
    occ = box_mask(scenario.occludee_box, size)
    for t, state in enumerate(scenario_states(scenario)):
        if (occluder_mask(state, layer_map(state, size)) & occ).any():
            return t - 1
    raise ValueError(f"scenario {scenario.id!r}: no occluder ever hides the occludee box at {size}")
