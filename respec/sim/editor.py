"""The simulated editor: a deterministic stand-in for an in-context editor, with known defects
and exact ground truth. A SIMULATION for measuring the pipeline, never a model of image quality.

What it does with one edit (turn t of a scenario with geometry):

1. Context. It reads no instruction text: the runner tells it which scenario turn it executes
   (`begin_turn(scenario, t)`), as a person would tell a test subject which step comes next.
   The images are all it gets, as a real editor: it recognises its own earlier outputs by their
   content hash (a registry of frames: image digest -> the scene state it showed), so it knows
   which input is I_{t-1} and which history image each reference is. An image it never made is
   unknown: it can be the I_0 of turn 1, and is otherwise ignored as a reference.
2. Layers. The base (the input it recognises as I_{t-1}; failing that, the latest frame it
   recognises) gets the turn's actions: sprites added / moved / resized / replaced / removed,
   regions or objects tinted, a global style filter. Pixels the actions do not touch keep the
   base's pixels.
3. Revealed pixels (an object was on top in the base, the photo shows now) are where editors
   differ. For each such pixel the editor takes the FIRST input image, in the order given (the
   plan's image_ids), that shows the photo there (its own scene state says no object covers
   that pixel) and copies that image's pixel with fidelity `copy_fidelity` (the rest is the
   re-invented fill). A reference from before a style or recolour turn therefore yields that
   image's (wrong) content. Pixels no input shows are RE-INVENTED: filled with the mean colour
   of the ring of visible photo pixels around each revealed component (an inpainter with no
   evidence).
4. Real-editor defects (all off by default; SimDefects): a pose change (the objects' pixels
   displaced by a smooth random field), a re-render field (spatially correlated texture change
   over the whole image, fine grain plus low-frequency shading, strengths as measured on real
   editors' outputs: docs/provenance.md), a smooth non-rigid local warp, and a zoom-out and
   sub-pixel shift per call. The geometric ones move the frame: each frame records its
   cumulative alignment from the world (I_0's frame), the next turn renders in the world frame
   (its base and references are warped back first) and the ground truth is warped into the
   image's frame, so masks and scores stay exact.
5. Drift. The whole output then passes a simulated VAE round trip: a per-channel colour gain in
   [1 - colour_shift, 1 + colour_shift], a Gaussian blur of `blur_sigma` px, Gaussian noise of
   `noise_std`, 8-bit quantisation; all drawn from the edit's seed, so configs that give the
   same turn the same inputs get the same pixels (the runner's per-turn seeds).

Ground truth: `frame(scenario, image)` gives the scene state an image shows; `truth(...)` the
masks (every object, occluder, new objects, occludee, hidden, revealed, where each revealed pixel
came from) and `oracle_masks(...)` the A.5 trajectory masks that the scorer consumes;
`untouched_psnr(...)` and `edit_fidelity_step(...)` the Drift Guard's measurements
(respec/sim/measures.py). The benchmark runner finds these hooks on the editor it was given.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
from PIL import Image

from ..editors.base import Editor, run_record
from ..errors import InputError
from ..images import as_array, as_rgb, content_hash
from ..lru import LRU
from ..pixels.alignment import IDENTITY, Alignment, warp
from .world import (BACKGROUND, WorldState, apply_actions, box_mask, layer_map, new_object_mask, occluder_mask,
                    render_turn)

REINVENTED = -2     # filled_from value of a re-invented pixel
NOT_REVEALED = -1   # filled_from value of every other pixel


@dataclass(frozen=True)
class SimDefects:
    """The simulated editor's defects, each a named knob (docs/sim.md).

    colour_shift   per-turn per-channel colour gain drawn from [1 - s, 1 + s] (VAE drift)
    blur_sigma     per-turn Gaussian blur in pixels (VAE softening)
    noise_std      per-turn Gaussian noise, in 0..1 units (VAE grain)
    copy_fidelity  share of a reference's pixel kept when copying hidden content (< 1: the copy
                   is pulled towards the re-invented fill by 1 - fidelity)
    ring_px        width of the ring of visible pixels whose mean colour re-invents a component

    Real-editor defects (beyond the paper; 0 = off, the default):
    zoom_pct          zoom-out per call, % (the frame shrinks about its centre; the border is
                      the edge repeated, an outpainting stand-in)
    shift_px          shift per call, px (sub-pixel allowed): dx = shift_px, dy = shift_px / 2
    local_warp_px     a smooth non-rigid displacement of the whole image per call, amplitude px
                      (correlation length a quarter of the shorter side)
    rerender          re-render field: std (0..1 units) of a spatially correlated texture change
                      over the whole image, correlation `rerender_corr_px`
    rerender_corr_px  ... its correlation length in px
    rerender_shading  ... plus a low-frequency shading change of this std (correlation an
                      eighth of the shorter side)
    pose_px           pose change: the objects' pixels (and 3 px around them) displaced by a
                      smooth field of this amplitude, px
    zoom_jitter_pct   the call's zoom-out drawn from zoom_pct ± this, % (from the edit's seed)
    shift_random      each call's shift drawn per axis from ±shift_px (from the edit's seed)
                      instead of the fixed dx = shift_px, dy = shift_px / 2
    subject_warp_px   a local warp around the subject per call (a face warped by an editor by
                      0.6-1 px): a smooth displacement whose largest value, drawn from the edit's
                      seed in [0.4, 1] x this many px, fades as a Gaussian of a quarter of the
                      shorter side around the centre of the scenario's occludee box
    """

    colour_shift: float = 0.01
    blur_sigma: float = 0.5
    noise_std: float = 0.004
    copy_fidelity: float = 0.9
    ring_px: int = 3
    zoom_pct: float = 0.0
    shift_px: float = 0.0
    local_warp_px: float = 0.0
    rerender: float = 0.0
    rerender_corr_px: float = 1.0
    rerender_shading: float = 0.0
    pose_px: float = 0.0
    zoom_jitter_pct: float = 0.0
    shift_random: bool = False
    subject_warp_px: float = 0.0

    def __post_init__(self):
        if not 0.0 <= self.colour_shift < 0.5:
            raise InputError(f"colour_shift must be in [0, 0.5), got {self.colour_shift}")
        if self.blur_sigma < 0 or self.noise_std < 0:
            raise InputError("blur_sigma and noise_std must be >= 0")
        if not 0.0 <= self.copy_fidelity <= 1.0:
            raise InputError(f"copy_fidelity must be in [0, 1], got {self.copy_fidelity}")
        if self.ring_px < 1:
            raise InputError(f"ring_px must be >= 1, got {self.ring_px}")
        if not 0.0 <= self.zoom_pct < 20.0:
            raise InputError(f"zoom_pct must be in [0, 20), got {self.zoom_pct}")
        if not 0.0 <= self.zoom_jitter_pct <= self.zoom_pct:
            raise InputError(f"zoom_jitter_pct must be in [0, zoom_pct={self.zoom_pct}], got {self.zoom_jitter_pct}")
        for name in ("local_warp_px", "rerender", "rerender_shading", "pose_px", "subject_warp_px"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.rerender_corr_px <= 0:
            raise InputError(f"rerender_corr_px must be > 0, got {self.rerender_corr_px}")

    @property
    def geometric(self) -> bool:
        """Whether the editor moves the frame (zoom or shift per call)."""
        return self.zoom_pct != 0.0 or self.shift_px != 0.0

    @property
    def real_defects(self) -> bool:
        """Whether any of the real-editor defects is on."""
        return self.geometric or any((self.local_warp_px, self.rerender, self.rerender_shading, self.pose_px,
                                      self.subject_warp_px))

    @classmethod
    def none(cls) -> "SimDefects":
        """A perfect editor: no drift, exact copies (for known-answer tests)."""
        return cls(colour_shift=0.0, blur_sigma=0.0, noise_std=0.0, copy_fidelity=1.0)

    @classmethod
    def realistic(cls) -> "SimDefects":
        """What real editors were measured doing per call (`--sim-defects realistic`, the
        drift-guard issue): a zoom-out of 0.5-1.5 %, a sub-pixel shift in ±1.5 px per axis, a
        re-render texture field (std 0.003, about ±3/255 at its peaks, correlation 4 px), a
        colour gain of ±2 %, a 0.6 px blur and noise."""
        return cls(colour_shift=0.02, blur_sigma=0.6, noise_std=0.004, zoom_pct=1.0, zoom_jitter_pct=0.5,
                   shift_px=1.5, shift_random=True, rerender=0.003, rerender_corr_px=4.0)

    def step(self, seed: int) -> Alignment:
        """The frame's move of one call (I_{t-1} -> I_t): zoom and shift, drawn from the edit's
        seed when jittered / random."""
        zoom, dx, dy = self.zoom_pct, self.shift_px, self.shift_px / 2.0
        if self.zoom_jitter_pct or self.shift_random:
            rng = np.random.default_rng([int(seed), 21])   # its own stream: the other draws stay as they were
            zoom += float(rng.uniform(-self.zoom_jitter_pct, self.zoom_jitter_pct))
            if self.shift_random:
                dx, dy = (float(v) for v in rng.uniform(-self.shift_px, self.shift_px, 2))
        return Alignment(dx, dy, 1.0 - zoom / 100.0)


@dataclass(frozen=True)
class Frame:
    """What the sim knows about an image it made: the scenario turn, the scene state, its size,
    and for each revealed pixel where its content came from (image id, REINVENTED, NOT_REVEALED)."""

    turn: int
    state: WorldState
    size: tuple[int, int]
    filled_from: np.ndarray | None = None       # in the world frame (I_0's)
    alignment: Alignment = IDENTITY             # world -> this image (zoom / shift defects)


@dataclass
class FrameTruth:
    """The ground truth of one image (bool H×W masks; object_masks by label)."""

    turn: int
    object_masks: dict
    occluder: np.ndarray
    new_objects: np.ndarray
    occludee: np.ndarray
    hidden: np.ndarray          # occludee pixels an object covers
    revealed: np.ndarray        # pixels this turn uncovered
    filled_from: np.ndarray     # per pixel: image id copied from, REINVENTED or NOT_REVEALED
    reference_turn: int         # the world's true I_ref id

    def summary(self) -> dict:
        """JSON-able ground truth of this frame: areas, hidden and revealed pixels, where revealed pixels came from."""
        ids, counts = np.unique(self.filled_from[self.revealed], return_counts=True) if self.revealed.any() else ([], [])
        return {"turn": self.turn, "occluder_area": float(self.occluder.mean()),
                "new_area": float(self.new_objects.mean()), "hidden_px": int(self.hidden.sum()),
                "revealed_px": int(self.revealed.sum()),
                "filled_from": {("reinvented" if int(i) == REINVENTED else f"I_{int(i)}"): int(c)
                                for i, c in zip(ids, counts)},
                "reference_turn": self.reference_turn}


def _world_key(scenario) -> tuple[str, str]:
    return (scenario.dataset or "", scenario.id)


class SimEditor(Editor):
    """The simulated editor (see the module docstring). `defects` sets its known defects."""

    name = "sim"
    min_side = 16
    multiple = 1
    max_aspect = 16.0
    default_steps = 0
    default_guidance = 0.0

    def __init__(self, defects: SimDefects | None = None, max_frames: int = 100_000):
        super().__init__()
        self.defects = defects or SimDefects()
        self.max_frames = int(max_frames)
        self._frames = LRU(self.max_frames)   # read with peek: the latest registered are kept
        self._context: tuple | None = None

    def describe(self) -> dict:
        """JSON-able record of the editor for results rows (marked simulated, with its defects)."""
        return {"editor": self.name, "simulation": True, "defects": asdict(self.defects)}

    # -- the context ----------------------------------------------------------------------
    def begin_turn(self, scenario, t: int) -> None:
        """Tell the editor which scenario turn the next edit executes (the runner calls this)."""
        if not getattr(scenario, "has_geometry", False):
            raise InputError(f"the sim editor needs a scenario with geometry (occludee_box and per-turn actions); "
                             f"scenario {getattr(scenario, 'id', scenario)!r} has none. Use the sim set "
                             f"(--dataset occur_sim) or add the geometry (docs/sim.md).")
        if not 1 <= int(t) <= scenario.num_turns:
            raise InputError(f"scenario {scenario.id!r} has turns 1..{scenario.num_turns}, not {t}")
        self._context = (scenario, int(t))

    # -- registry -------------------------------------------------------------------------
    def _remember(self, scenario, digest: str, frame: Frame) -> None:
        self._frames.put((_world_key(scenario), digest), frame)

    def frame(self, scenario, image) -> Frame | None:
        """The frame of an image this editor made for `scenario` (or registered as its I_0)."""
        return self._frames.peek((_world_key(scenario), content_hash(as_array(getattr(image, "array", image)))))

    def register_original(self, scenario, image) -> Frame:
        """Register I_0 of a scenario (done automatically by the first edit of turn 1)."""
        arr = np.asarray(as_rgb(as_array(getattr(image, "array", image))))
        frame = Frame(0, WorldState(), (arr.shape[1], arr.shape[0]))
        self._remember(scenario, content_hash(arr), frame)
        return frame

    def register_derived(self, scenario, image, from_image, frame_of=None) -> Frame:
        """Register an image that a post-edit step (Reveal Composite) made from one of this editor's
        outputs by changing pixels, not the scene: it shows the same scene state, so its ground truth
        is that output's and the next turn recognises it as its base. `frame_of`: a known image whose
        frame (zoom / shift) it is in instead of the output's (the Drift Guard returns I_(t-1)'s)."""
        fr = self.frame(scenario, from_image)
        if fr is None:
            raise InputError(f"the sim editor did not make the image this one was derived from (scenario {scenario.id!r})")
        if frame_of is not None:
            other = self.frame(scenario, frame_of)
            if other is None:
                raise InputError(f"the sim editor does not know the image whose frame this one is in (scenario {scenario.id!r})")
            fr = replace(fr, alignment=other.alignment)
        arr = np.asarray(as_rgb(as_array(getattr(image, "array", image))))
        self._remember(scenario, content_hash(arr), fr)
        return fr

    def register_from_history(self, scenario, image, previous, source, region) -> Frame:
        """Register an image the pack took from the history instead of an edit (history first,
        respec/pixels/undo.py): the turn begin_turn named is executed on `previous`'s scene (its actions
        applied) with no edit; the pixels it reveals inside `region` (bool, I_(t-1)'s frame) come from
        `source` (I_(k-1)) where that image shows the background, the rest count as re-invented. An
        image this editor knows already (I_(k-1) itself, taken back whole) keeps its frame."""
        if self._context is None:
            raise InputError("register_from_history needs the turn: call begin_turn(scenario, t) first")
        _, t = self._context
        self._context = None
        arr = np.asarray(as_rgb(as_array(getattr(image, "array", image))))
        known = self.frame(scenario, arr)
        if known is not None:
            return known
        base, src = self.frame(scenario, previous), self.frame(scenario, source)
        if base is None or src is None:
            raise InputError(f"the sim editor did not make the images history first used (scenario {scenario.id!r})")
        new_state, _ = apply_actions(base.state, scenario.turns[t - 1].actions, scenario.occluders)
        size = base.size
        revealed = (layer_map(base.state, size) != BACKGROUND) & (layer_map(new_state, size) == BACKGROUND)
        inside = np.asarray(region, bool)
        inside = inside if base.alignment.is_identity else warp(inside, base.alignment.inverse(), order=0)
        shows = revealed & inside & (layer_map(src.state, size) == BACKGROUND)
        filled = np.where(shows, np.int8(src.turn), np.where(revealed, np.int8(REINVENTED), np.int8(NOT_REVEALED)))
        frame = Frame(t, new_state, size, filled.astype(np.int8) if revealed.any() else None, base.alignment)
        self._remember(scenario, content_hash(arr), frame)
        return frame

    def _to_world(self, arr: np.ndarray, frame: Frame | None) -> np.ndarray:
        """An image of `frame` warped back into the world frame (identity: itself)."""
        if frame is None or frame.alignment.is_identity:
            return arr
        return warp(arr, frame.alignment.inverse())

    # -- the edit -------------------------------------------------------------------------
    def edit(self, images: list, instruction: str, *, output_size: tuple[int, int], seed: int,
             steps: int | None = None, guidance: float | None = None, **extra) -> Image.Image:
        """Execute the context's scenario turn on the images (see the module docstring)."""
        if self._context is None:
            raise InputError("the sim editor does not know which scenario turn to execute: call "
                             "begin_turn(scenario, t) before each edit (the benchmark runner does)")
        scenario, t = self._context
        self._context = None
        start = time.perf_counter()
        if not images:
            raise InputError("the sim editor got no images")
        size = (int(output_size[0]), int(output_size[1]))
        arrays = [self._array(im, size) for im in images]
        digests = [content_hash(np.asarray(as_rgb(as_array(getattr(im, "array", im))))) for im in images]
        frames = [self._frames.peek((_world_key(scenario), d)) for d in digests]
        if t == 1 and all(f is None for f in frames):
            frames[-1] = self.register_original(scenario, images[-1])
        known = [i for i, f in enumerate(frames) if f is not None]
        if not known:
            raise InputError(f"the sim editor recognises none of the {len(images)} image(s) it got for turn {t} of "
                             f"{scenario.id!r}: it edits only images of its own world (start at turn 1 with I_0)")
        exact = [i for i in known if frames[i].turn == t - 1]
        base_i = exact[-1] if exact else max(known, key=lambda i: frames[i].turn)
        base = frames[base_i]
        arrays = [self._to_world(a, f) for a, f in zip(arrays, frames)]
        turn = scenario.turns[t - 1]
        new_state, effect = apply_actions(base.state, turn.actions, scenario.occluders)

        out = render_turn(arrays[base_i], base.state, new_state, effect)
        lmap_base, lmap_new = layer_map(base.state, size), layer_map(new_state, size)
        revealed = (lmap_base != BACKGROUND) & (lmap_new == BACKGROUND)
        filled = np.full(revealed.shape, NOT_REVEALED, np.int8)
        if revealed.any():
            self._fill_revealed(out, revealed, lmap_new, filled, arrays, frames, size)
        alignment = base.alignment
        if self.defects.real_defects:
            out, alignment = self._real_defects(out, lmap_new, base.alignment, seed, scenario.occludee_box)
        out = self._drift(out, seed)
        result = Image.fromarray(out)
        frame = Frame(t, new_state, size, filled if revealed.any() else None, alignment)
        self._remember(scenario, content_hash(np.asarray(result)), frame)
        copied = {f"I_{frames[i].turn}": int((filled == frames[i].turn).sum()) for i in known
                  if (filled == frames[i].turn).any()}
        self.last_run = run_record(editor=self.name, simulation=True, seed=int(seed), turn=t,
                                   base_image=frames[base_i].turn, revealed_px=int(revealed.sum()),
                                   copied_px=copied, reinvented_px=int((filled == REINVENTED).sum()),
                                   seconds=time.perf_counter() - start)
        return result

    def _array(self, image, size) -> np.ndarray:
        pil = as_rgb(as_array(getattr(image, "array", image)))
        if pil.size != size:
            pil = pil.resize(size, Image.NEAREST)
        return np.asarray(pil, np.float32) / 255.0

    def _fill_revealed(self, out, revealed, lmap_new, filled, arrays, frames, size) -> None:
        from scipy.ndimage import binary_dilation, label
        d = self.defects
        fill = np.zeros_like(out)
        components, n = label(revealed)
        visible_photo = (lmap_new == BACKGROUND) & ~revealed
        for k in range(1, n + 1):
            comp = components == k
            ring = binary_dilation(comp, iterations=d.ring_px) & visible_photo
            if not ring.any():
                ring = visible_photo if visible_photo.any() else np.ones_like(comp)
            fill[comp] = out[ring].mean(axis=0)
        todo = revealed.copy()
        for arr, fr in zip(arrays, frames):
            if fr is None or not todo.any():
                continue
            shows = todo & (layer_map(fr.state, size) == BACKGROUND)
            if shows.any():
                out[shows] = d.copy_fidelity * arr[shows] + (1.0 - d.copy_fidelity) * fill[shows]
                filled[shows] = fr.turn
                todo &= ~shows
        out[todo] = fill[todo]
        filled[todo] = REINVENTED

    def _real_defects(self, out: np.ndarray, lmap: np.ndarray, base_alignment: Alignment,
                      seed: int, subject=None) -> tuple[np.ndarray, Alignment]:
        """The real-editor defects on a world-frame float image: pose change, re-render field,
        local warp, then the frame's zoom / shift. (image in the new frame, world -> new frame)."""
        from scipy import ndimage
        d = self.defects
        rng = np.random.default_rng([int(seed), 20])     # its own stream: the drift's draws stay as they were
        h, w = out.shape[:2]
        side = min(h, w)

        def field(corr: float, amp: float) -> np.ndarray:
            f = ndimage.gaussian_filter(rng.normal(0.0, 1.0, (h, w)), corr, mode="wrap")
            return f / (f.std() + 1e-12) * amp

        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)

        def displace(img, dy, dx):
            return np.stack([ndimage.map_coordinates(img[:, :, c], [yy + dy, xx + dx], order=1, mode="nearest")
                             for c in range(img.shape[2])], axis=2).astype(np.float32)

        if d.pose_px > 0:
            objs = ndimage.binary_dilation(lmap != BACKGROUND, iterations=3)
            if objs.any():
                moved = displace(out, field(side / 16.0, d.pose_px), field(side / 16.0, d.pose_px))
                out = np.where(objs[..., None], moved, out)
        if d.rerender > 0 or d.rerender_shading > 0:
            tex = np.zeros(out.shape, np.float32)
            if d.rerender > 0:
                tex += np.stack([field(d.rerender_corr_px, d.rerender) for _ in range(3)], axis=2)
            if d.rerender_shading > 0:
                tex += field(side / 8.0, d.rerender_shading)[..., None]
            out = out + tex.astype(np.float32)
        if d.local_warp_px > 0:
            out = displace(out, field(side / 4.0, d.local_warp_px), field(side / 4.0, d.local_warp_px))
        if d.subject_warp_px > 0 and subject is not None:
            # a smooth warp around the subject (the occludee box's centre), fading with a quarter of the side
            wrng = np.random.default_rng([int(seed), 22])     # its own stream: the other draws stay as they were
            cx, cy = (subject[0] + subject[2]) / 2 * w, (subject[1] + subject[3]) / 2 * h
            env = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * (side / 4.0) ** 2))
            fy, fx = (ndimage.gaussian_filter(wrng.normal(0, 1, (h, w)), side / 8.0, mode="wrap") * env
                      for _ in range(2))
            peak = float(np.hypot(fx, fy).max()) or 1.0
            amp = d.subject_warp_px * float(wrng.uniform(0.4, 1.0))
            out = displace(out, fy / peak * amp, fx / peak * amp)
        alignment = base_alignment
        if d.geometric:
            alignment = base_alignment.compose(d.step(seed))
            out = warp(np.clip(out, 0.0, 1.0).astype(np.float32), alignment)
        return np.clip(out, 0.0, 1.0).astype(np.float32), alignment

    def _drift(self, out: np.ndarray, seed: int) -> np.ndarray:
        d = self.defects
        rng = np.random.default_rng(int(seed))
        gains = 1.0 + rng.uniform(-d.colour_shift, d.colour_shift, 3).astype(np.float32)
        out = out * gains[None, None, :]
        if d.blur_sigma > 0:
            from scipy.ndimage import gaussian_filter
            out = gaussian_filter(out, sigma=(d.blur_sigma, d.blur_sigma, 0), mode="nearest")
        if d.noise_std > 0:
            out = out + rng.normal(0.0, d.noise_std, out.shape).astype(np.float32)
        return np.clip(np.round(out * 255.0), 0, 255).astype(np.uint8)

    # -- ground truth ---------------------------------------------------------------------
    def truth(self, scenario, image) -> FrameTruth:
        """The ground truth of an image this editor made for `scenario` (InputError otherwise)."""
        from .world import true_reference_turn
        fr = self.frame(scenario, image)
        if fr is None:
            raise InputError(f"the sim editor did not make this image for scenario {scenario.id!r}")
        lmap = layer_map(fr.state, fr.size)
        occludee = box_mask(scenario.occludee_box, fr.size)
        masks = {o.label: lmap == i for i, o in enumerate(fr.state.objects)}
        filled = fr.filled_from if fr.filled_from is not None else np.full(lmap.shape, NOT_REVEALED, np.int8)
        occ, new = occluder_mask(fr.state, lmap), new_object_mask(fr.state, lmap)
        hidden = occludee & (lmap != BACKGROUND)
        if not fr.alignment.is_identity:    # the world's masks in this image's frame
            a = fr.alignment
            masks = {k: warp(v, a, order=0) for k, v in masks.items()}
            occ, new, occludee, hidden = (warp(m, a, order=0) for m in (occ, new, occludee, hidden))
            filled = warp(filled, a, order=0)
        return FrameTruth(turn=fr.turn, object_masks=masks, occluder=occ,
                          new_objects=new, occludee=occludee,
                          hidden=hidden, revealed=filled != NOT_REVEALED,
                          filled_from=filled, reference_turn=true_reference_turn(scenario, fr.size))

    def oracle_masks(self, scenario, images: list):
        """Appendix A.5's M_occ^t and M_new^t of turns 1..N from the recorded layers (no detector)."""
        from ..eval.masks import TrajectoryMasks
        occ, new, records = [], [], []
        for t, img in enumerate(images, start=1):
            tr = self.truth(scenario, img)
            occ.append(tr.occluder)
            new.append(tr.new_objects)
            records.append({"turn": t, "source": "sim oracle (recorded layers)", **tr.summary()})
        return TrajectoryMasks(occ, new, records, scenario.occluder, list(range(1, len(images) + 1)))

    # -- the benchmark's measurements with that ground truth (respec/sim/measures.py) -------------
    def edit_fidelity_step(self, scenario):
        """A post-edit step for guard configs that only measures (it returns the image unchanged): the
        Drift Guard's output against this editor's own output on the turn's ground-truth edit region
        (measures.EditFidelity)."""
        from .measures import EditFidelity
        return EditFidelity(self, scenario)

    def untouched_psnr(self, scenario, original, image) -> float | None:
        """PSNR (dB, 8-bit) of `image` against I_0 (`original`, an H×W×C array) on the pixels no turn
        of `scenario` touched (measures.untouched_region); None when there are none."""
        from .measures import untouched_psnr, untouched_region
        return untouched_psnr(original, image, untouched_region(scenario, (original.shape[1], original.shape[0])))
