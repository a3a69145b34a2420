"""Occluder and new-object masks for OCCUR-Bench (paper appendix B.1).

Per query image and label: YOLO-World v2 open-vocabulary detection (internal confidence 0.001,
a detection is accepted at >= 0.2, the highest-confidence box wins, one class per query), the
query fallback chain label -> last word -> simple singular of the last word, then SAM prompted
with the box (clipped to the image). No accepted detection, an invalid box or a SAM failure give
an all-zero mask of the image's size. Every mask carries a record of what happened.

YOLO-World's class text embeddings come from open_clip's ViT-B-32-quickgelu (OpenAI's CLIP
B/32 weights, the text encoder YOLO-World was trained with), so ultralytics never tries to
pip-install OpenAI's `clip` package. Every call into ultralytics runs inside
`ultralytics_scope()` (respec/ultralytics_scope.py): offline, no auto-install, no analytics and
safe (weights_only) loading of `.pt` files, all restored afterwards, so other packs' ultralytics use
is unchanged.
"""
from __future__ import annotations

import json
import logging
import math
import re
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import comfy, models
from ..errors import CorruptWeightsError, InputError
from ..images import content_hash, rgb_array
from ..lru import LRU
from ..models import resolve_device
from ..records import json_safe
from ..timing import StageTimer
from .metric_models import CLIP_ARCH, DEFAULT_CLIP, load_clip_model
from ..ultralytics_scope import ultralytics_scope

log = logging.getLogger("respec")

DEFAULT_YOLO = "yolov8l-worldv2.pt"
YOLO_URL = "https://github.com/ultralytics/assets/releases/download/v8.3.0/yolov8l-worldv2.pt"
SAM_FILES = {"vit_h": "sam_vit_h_4b8939.pth", "vit_l": "sam_vit_l_0b3195.pth", "vit_b": "sam_vit_b_01ec64.pth"}
SAM_URL = "https://dl.fbaipublicfiles.com/segment_anything/{}"
DETECT_CONF = 0.001     # B.1: YOLO-World's internal threshold, low so no candidate is dropped early
ACCEPT_CONF = 0.2       # B.1: a detection counts only at this confidence or above
DETECT_IMGSZ = 640      # ultralytics' default inference size
STAGES = ("label", "last_word", "singular")

HOW_TO_GET_YOLO = (f"download {DEFAULT_YOLO} ({YOLO_URL}) into ComfyUI/models/ultralytics/ "
                   "(or RESPEC_MODELS_DIR/ultralytics/), or allow downloads. Licence: AGPL-3.0")
HOW_TO_GET_SAM = ("download {name} from https://dl.fbaipublicfiles.com/segment_anything/{name} into "
                  "ComfyUI/models/sams/ (or RESPEC_MODELS_DIR/sams/), or allow downloads")

_YOLO_LOCK = threading.RLock()   # the YOLO model's class embeddings are set per query: one query at a time


# --------------------------------------------------------------------------- the query chain

def simple_singular(word: str) -> str:
    """A deliberately simple English singular: berries->berry, boxes->box, cups->cup; glass, bus stay."""
    w = word.strip()
    low = w.lower()
    if len(low) <= 3:
        return w
    if low.endswith("ies") and len(low) > 4:
        return w[:-3] + ("Y" if w[-3:].isupper() else "y")
    if low.endswith(("ches", "shes", "sses", "xes", "zes")):
        return w[:-2]
    if low.endswith(("ss", "us", "is")):
        return w
    if low.endswith("s"):
        return w[:-1]
    return w


def query_chain(label: str) -> list[tuple[int, str, str]]:
    """(stage, stage name, query) for the label, its last word, and the last word's singular,
    skipping a query already tried (case-insensitively). Stage numbers keep their meaning."""
    clean = " ".join(str(label).split())
    if not clean:
        return []
    words = clean.split(" ")
    last = words[-1].strip(".,;:!?\"'()[]{}")
    chain, seen = [], set()
    for stage, query in ((0, clean), (1, last), (2, simple_singular(last))):
        if query and query.lower() not in seen:
            seen.add(query.lower())
            chain.append((stage, STAGES[stage], query))
    return chain


def clip_box(box: Sequence[float] | None, size: tuple[int, int], normalized: bool = False) -> list[float] | None:
    """[x0, y0, x1, y1] in pixels clipped to a (width, height) image; None for a missing,
    non-finite or empty box. `normalized` boxes (0..1) are converted to pixels first."""
    if box is None or len(box) != 4:
        return None
    try:
        x0, y0, x1, y1 = (float(v) for v in box)
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        return None
    w, h = size
    if normalized:
        x0, x1, y0, y1 = x0 * w, x1 * w, y0 * h, y1 * h
    x0, x1 = min(max(x0, 0.0), w), min(max(x1, 0.0), w)
    y0, y1 = min(max(y0, 0.0), h), min(max(y1, 0.0), h)
    if x1 - x0 < 1.0 or y1 - y0 < 1.0:
        return None
    return [x0, y0, x1, y1]


def labels_per_turn(per_turn: Any, n_turns: int) -> list[list[str]]:
    """The new-object labels of turns 1..N, one list per turn (what M_new^t looks for, A.5 / B.1).

    per_turn: a list in turn order (turns left out at the end have none) or a {turn: labels}
    mapping; a turn's labels are a list, or one string "a, b" (commas or semicolons between
    labels). Labels are whitespace-normalised; empty ones, "-" and "none" are dropped. InputError
    when a turn outside 1..N is named or more than N turns are given. (The node's text format,
    JSON or one line per turn, is read in nodes/common.py.)
    """
    def labels_of(v) -> list[str]:
        if v is None:
            return []
        if isinstance(v, str):
            v = [p for p in re.split(r"[,;]", v)]
        out = []
        for item in v:
            s = " ".join(str(item).split())
            if s and s.lower() not in ("-", "none"):
                out.append(s)
        return out

    if isinstance(per_turn, Mapping):
        out = [[] for _ in range(n_turns)]
        for k, v in per_turn.items():
            try:
                t = int(k)
            except (TypeError, ValueError):
                raise InputError(f"new-object labels: {k!r} is not a turn number") from None
            if not 1 <= t <= n_turns:
                raise InputError(f"new-object labels name turn {t}, but the trajectory has turns 1..{n_turns}")
            out[t - 1] = labels_of(v)
        return out
    if isinstance(per_turn, (list, tuple)):
        items = list(per_turn)
        while len(items) > n_turns and (items[-1] in ("", None, []) or (isinstance(items[-1], str) and not items[-1].strip())):
            items.pop()
        if len(items) > n_turns:
            raise InputError(f"new-object labels are given for {len(items)} turns, but the trajectory has "
                             f"{n_turns} (turns 1..{n_turns}; turn 0 is the original image)")
        items += [[]] * (n_turns - len(items))
        return [labels_of(v) for v in items]
    raise InputError(f"new-object labels: expected a list per turn or a {{turn: labels}} mapping, "
                     f"got {type(per_turn).__name__}")


# --------------------------------------------------------------------------- results

@dataclass
class MaskResult:
    """A bool H×W mask and the record of how it was made (B.1: prompt, fallback stage, confidence, box)."""

    mask: np.ndarray
    record: dict


@dataclass
class TrajectoryMasks:
    """M_occ^t and M_new^t for turns 1..N (lists in turn order; the last entry is turn N)."""

    occ: list[np.ndarray]
    new: list[np.ndarray]
    records: list[dict] = field(default_factory=list)
    occluder_label: str = ""
    turns: list[int] = field(default_factory=list)

    def to_record(self) -> dict:
        """JSON-able summary (no pixels): labels, turns and every mask's record."""
        return json_safe({"occluder_label": self.occluder_label, "turns": self.turns,
                          "occluder_area": [float(np.mean(m)) for m in self.occ],
                          "new_area": [float(np.mean(m)) for m in self.new],
                          "records": self.records})

    def save(self, path: str | Path) -> None:
        """Masks (.npz, compressed) with the records as JSON inside."""
        np.savez_compressed(path, occ=np.stack(self.occ), new=np.stack(self.new),
                            meta=np.array(json.dumps(self.to_record())))

    @classmethod
    def load(cls, path: str | Path) -> "TrajectoryMasks":
        """Read masks written by `save` (an .npz; no pickles)."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            return cls(list(z["occ"].astype(bool)), list(z["new"].astype(bool)), meta.get("records", []),
                       meta.get("occluder_label", ""), meta.get("turns", []))


@dataclass
class Detection:
    """One YOLO-World query's outcome on one image: its best box and confidence, and how many boxes came back."""
    query: str
    confidence: float | None     # best confidence among the returned boxes, None when no box came back
    box: list[float] | None      # xyxy pixels of the best box
    n_boxes: int


# --------------------------------------------------------------------------- the masker

def _set_single_class(world_model, feats, query: str) -> None:
    """Make a YOLO-World network detect `query` alone (its CLIP text embedding as the one class)."""
    world_model.txt_feats = feats.to(next(world_model.parameters()).device)
    world_model.model[-1].nc = 1
    world_model.names = [query]


def _predictor_network(predictor):
    """The (fused) YOLO-World network an ultralytics predictor runs, or None when there is no
    predictor or its layout is one this code does not know (then a new predictor is built)."""
    backend = getattr(predictor, "model", None)
    for net in (getattr(getattr(backend, "backend", None), "model", None), getattr(backend, "model", None)):
        if net is not None and hasattr(net, "txt_feats") and hasattr(net, "model"):
            return net
    return None


class Masker:
    """YOLO-World v2 + SAM, as in appendix B.1. Construct with `load_masker` (or the tiny builders)."""

    def __init__(self, yolo, sam, clip_model, *, conf: float = DETECT_CONF, accept: float = ACCEPT_CONF,
                 imgsz: int = DETECT_IMGSZ, device=None, sam_cache_size: int = 8, name: str = "masker"):
        import torch
        from open_clip.tokenizer import SimpleTokenizer
        from segment_anything import SamPredictor
        self.yolo = yolo
        self.sam = sam
        self.clip_model = clip_model
        self.conf, self.accept, self.imgsz = float(conf), float(accept), int(imgsz)
        self.device = torch.device(device) if device is not None else next(sam.parameters()).device
        self.name = name
        # Inside ComfyUI its memory manager places (and on /free unloads) the three networks.
        self._managed = [comfy.manage(m, self.device, name=n) for m, n in
                         ((yolo.model, "yolo-world"), (sam, "sam"), (clip_model, "clip"))]
        self._tokenizer = SimpleTokenizer()  # OpenAI CLIP's BPE, shipped inside open_clip
        self._predictor = SamPredictor(sam)
        self._sam_cache = LRU(max(1, int(sam_cache_size)))
        self._text_cache: dict[str, Any] = {}
        self._det_cache = LRU(512)   # read with peek: the latest 512 detections are kept
        self._lock = threading.RLock()
        self.stats = {"sam_encodes": 0, "sam_prompts": 0, "detections": 0, "text_encodes": 0}
        self.timer = StageTimer()

    def clear_caches(self) -> None:
        """Forget cached text embeddings, detections and SAM image embeddings (after changing weights)."""
        self._text_cache.clear()
        self._det_cache.clear()
        self._sam_cache.clear()

    # -- detection ----------------------------------------------------------------------
    def text_features(self, query: str):
        """YOLO-World class embedding of one query: normalised CLIP text features, shape (1, 1, 512)."""
        import torch
        if query not in self._text_cache:
            comfy.use_models(self._managed[2:])
            with self.timer.measure("text_embed"), torch.inference_mode():
                dev = next(self.clip_model.parameters()).device
                feats = self.clip_model.encode_text(self._tokenizer([query]).to(dev)).float()
                feats = torch.nn.functional.normalize(feats, dim=-1).reshape(1, 1, -1).cpu()
            self._text_cache[query] = feats
            self.stats["text_encodes"] += 1
        return self._text_cache[query]

    def _yolo_device(self) -> str:
        d = self.device
        return str(d.index or 0) if d.type == "cuda" else d.type

    def detect(self, image: Any, query: str, digest: str | None = None) -> Detection:
        """Run YOLO-World with this one query as its only class; the best box (any confidence >= conf)."""
        from PIL import Image
        arr = rgb_array(image)
        digest = digest or content_hash(arr)
        key = (digest, query.lower())
        hit = self._det_cache.peek(key)
        if hit is not None:
            return hit
        import torch
        from ultralytics.utils import torch_utils
        feats = self.text_features(query)
        threads = torch.get_num_threads()
        with _YOLO_LOCK:
            # The query becomes the only class: on the model itself (what a new predictor copies)
            # and on the fused copy an existing predictor runs, so that copy (built once per loaded
            # model: copying and fusing cost more than a forward) serves every query. The copy is
            # a model of its own under the memory manager, so ComfyUI sees and can unload it.
            running = _predictor_network(self.yolo.predictor)
            comfy.use_models([comfy.manage(running, self.device, name="yolo-world (fused)")] if running is not None
                             else self._managed[:1])
            with ultralytics_scope(), self.timer.measure("yolo_detect"):
                _set_single_class(self.yolo.model, feats, query)
                if running is not None:
                    _set_single_class(running, feats, query)
                    self.yolo.predictor.model.names = {0: query}
                else:
                    self.yolo.predictor = None
                # On a CPU, ultralytics' device selection sets torch's thread count (for the whole
                # process) to its own default (cores - 1, at most 8); keep the process's setting.
                torch_utils.NUM_THREADS = threads
                try:
                    res = self.yolo.predict(Image.fromarray(arr), conf=self.conf, imgsz=self.imgsz,
                                            device=self._yolo_device(), verbose=False)[0]
                finally:
                    if torch.get_num_threads() != threads:
                        torch.set_num_threads(threads)
        speed = getattr(res, "speed", None) or {}
        for part in ("preprocess", "inference", "postprocess"):
            if speed.get(part) is not None:
                self.timer.add(f"yolo_{part}", float(speed[part]) / 1000.0)
        self.stats["detections"] += 1
        boxes = res.boxes
        if boxes is None or len(boxes) == 0:
            det = Detection(query, None, None, 0)
        else:
            confs = boxes.conf.detach().cpu().numpy()
            i = int(np.argmax(confs))
            det = Detection(query, float(confs[i]), [float(v) for v in boxes.xyxy[i].detach().cpu().numpy()], len(confs))
        self._det_cache.put(key, det)
        return det

    # -- segmentation -------------------------------------------------------------------
    def _sam_features(self, arr: np.ndarray, digest: str):
        """SAM's image embedding, computed once per image content (LRU over recent images)."""
        import torch
        hit = self._sam_cache.get(digest)
        if hit is not None:
            return hit
        comfy.use_models(self._managed[1:2])
        with self.timer.measure("sam_encode"), torch.inference_mode():
            p = self._predictor
            transformed = p.transform.apply_image(arr)
            x = torch.as_tensor(transformed, device=self.device).permute(2, 0, 1).contiguous()[None]
            input_size = tuple(x.shape[-2:])
            x = self.sam.preprocess(x)
            with self.timer.measure("sam_encoder_forward"):
                feats = self.sam.image_encoder(x)
        self.stats["sam_encodes"] += 1
        entry = (feats, tuple(arr.shape[:2]), input_size)
        self._sam_cache.put(digest, entry)
        return entry

    def segment(self, image: Any, box: Sequence[float] | None, digest: str | None = None) -> MaskResult:
        """SAM mask for one box (clipped to the image); zero mask + reason for an invalid box or a SAM failure."""
        import torch
        arr = rgb_array(image)
        h, w = arr.shape[:2]
        digest = digest or content_hash(arr)
        clipped = clip_box(box, (w, h))
        zero = np.zeros((h, w), dtype=bool)
        if clipped is None:
            return MaskResult(zero, {"status": "invalid_box", "box": None, "box_raw": json_safe(list(box) if box is not None else None),
                                     "reason": f"the box {box} is not a finite box with positive area inside the {w}×{h} image"})
        try:
            feats, original_size, input_size = self._sam_features(arr, digest)
            comfy.use_models(self._managed[1:2])  # the prompt decoder runs on SAM's device too
            p = self._predictor
            p.features, p.original_size, p.input_size, p.is_image_set = feats, original_size, input_size, True
            with self.timer.measure("sam_decode"):
                masks, scores, _ = p.predict(box=np.asarray(clipped, dtype=np.float32), multimask_output=False)
            self.stats["sam_prompts"] += 1
        except torch.cuda.OutOfMemoryError:
            raise  # the machine's problem, not this input's: say so instead of scoring a zero mask
        except Exception as e:  # B.1: a SAM failure gives the zero mask, recorded
            log.warning("SAM failed on box %s: %s", clipped, e)
            return MaskResult(zero, {"status": "sam_failed", "box": clipped, "reason": f"SAM failed: {type(e).__name__}: {e}"})
        mask = np.asarray(masks[0], dtype=bool)
        if mask.shape != (h, w):
            return MaskResult(zero, {"status": "sam_failed", "box": clipped,
                                     "reason": f"SAM returned a {mask.shape} mask for a {h}×{w} image"})
        return MaskResult(mask, {"status": "ok", "box": clipped, "sam_score": float(np.asarray(scores).reshape(-1)[0])})

    # -- the B.1 procedure ----------------------------------------------------------------
    def mask(self, image: Any, label: str) -> MaskResult:
        """The mask of `label` in `image` (B.1): fallback chain, best accepted box, SAM, or a zero mask."""
        with self._lock:
            arr = rgb_array(image)
            h, w = arr.shape[:2]
            digest = content_hash(arr)
            record: dict = {"label": label, "image": digest[:16], "size": [w, h], "accepted_prompt": None,
                            "fallback_stage": None, "fallback_stage_name": None, "confidence": None,
                            "box": None, "attempts": []}
            chain = query_chain(label)
            if not chain:
                record.update(status="no_label", reason="empty label: nothing to detect", mask_area=0)
                return MaskResult(np.zeros((h, w), bool), record)
            accepted: tuple[int, str, Detection] | None = None
            for stage, stage_name, query in chain:
                comfy.check_interrupted()
                det = self.detect(arr, query, digest)
                record["attempts"].append({"query": query, "stage": stage, "stage_name": stage_name,
                                           "best_confidence": det.confidence, "boxes": det.n_boxes})
                if det.confidence is not None and det.confidence >= self.accept:
                    accepted = (stage, stage_name, det)
                    break
            if accepted is None:
                best = max((a["best_confidence"] or 0.0) for a in record["attempts"])
                record.update(status="no_detection", mask_area=0,
                              reason=f"no detection reached confidence {self.accept} for "
                                     f"{[q for _, _, q in chain]} (best {best:.4f})")
                return MaskResult(np.zeros((h, w), bool), record)
            stage, stage_name, det = accepted
            record.update(accepted_prompt=det.query, fallback_stage=stage, fallback_stage_name=stage_name,
                          confidence=det.confidence, box_raw=det.box)
            seg = self.segment(arr, det.box, digest)
            record.update(seg.record)
            record["mask_area"] = int(seg.mask.sum())
            return MaskResult(seg.mask, json_safe(record))

    def trajectory_masks(self, images: Sequence[Any], occluder_label: str,
                         new_labels_per_turn: Any, *, turns: Sequence[int] | None = None,
                         cumulative_new: bool = True) -> TrajectoryMasks:
        """M_occ^t and M_new^t for every image of turns 1..N (A.5).

        `images[i]` is turn `turns[i]` (default i+1). `new_labels_per_turn[i]` are the objects newly
        introduced at that turn (a list per turn or a {turn: labels} mapping; see labels_per_turn). With
        `cumulative_new` (default) turn t looks for every object introduced at turns <= t, so
        M_new^N covers all new objects still in the final image; an absent object gives an empty mask.
        """
        images = list(images)
        if not images:
            raise InputError("no trajectory images: the masks need the images of turns 1..N")
        n = len(images)
        turns = list(turns) if turns is not None else list(range(1, n + 1))
        if len(turns) != n:
            raise InputError(f"{len(turns)} turn numbers for {n} images")
        per_turn = labels_per_turn(new_labels_per_turn, n)
        asked: list[list[str]] = []
        so_far: list[str] = []
        for labels in per_turn:
            if cumulative_new:
                so_far += [l for l in labels if l.lower() not in {s.lower() for s in so_far}]
                asked.append(list(so_far))
            else:
                asked.append(list(labels))
        total = n + sum(len(a) for a in asked)
        occ, new, records = [], [], []
        with comfy.progress(total, "occluder / new-object masks") as bar:
            for img, t, labels in zip(images, turns, asked):
                arr = rgb_array(img)
                occ_res = self.mask(arr, occluder_label)
                bar.update()
                new_mask = np.zeros(arr.shape[:2], bool)
                new_records = []
                for label in labels:
                    res = self.mask(arr, label)
                    new_mask |= res.mask
                    new_records.append(res.record)
                    bar.update()
                occ.append(occ_res.mask)
                new.append(new_mask)
                records.append({"turn": t, "occluder": occ_res.record, "new_labels": labels,
                                "new_objects": new_records})
        return TrajectoryMasks(occ, new, records, occluder_label, turns)

    def history_masks(self, history: Any, occluder_label: str, new_labels_per_turn: Any,
                      *, cumulative_new: bool = True) -> TrajectoryMasks:
        """trajectory_masks over a History's turns 1..N (turn 0, the original image, is not a turn of A.5)."""
        if len(history.turns) < 2:
            raise InputError("the history has only the original image; masks need at least one edited turn")
        return self.trajectory_masks([t.image for t in history.turns[1:]], occluder_label, new_labels_per_turn,
                                     turns=[t.index for t in history.turns[1:]], cumulative_new=cumulative_new)


# --------------------------------------------------------------------------- loading

def load_yolo_world(path: str | Path, device=None):
    """An ultralytics YOLOWorld from a weight file, always by absolute path (a bare name would download)."""
    path = Path(path).resolve()
    with ultralytics_scope():
        from ultralytics import YOLOWorld
        try:
            model = YOLOWorld(str(path))
        except Exception as e:  # safe loading refuses pickled code; a damaged file fails here too
            raise CorruptWeightsError(
                f"Could not load {path} as YOLO-World weights ({type(e).__name__}: {str(e)[:300]}). It is loaded "
                f"with weights_only=True, so a file that needs arbitrary pickled objects is refused; use the "
                f"official {DEFAULT_YOLO} ({YOLO_URL}).") from e
    model.model.eval()
    if device is not None:
        model.model.to(device)
    return model


def build_sam(sam_type: str, state: dict | None = None, device=None, source: str | Path | None = None):
    """segment-anything's model of `sam_type` (vit_h / vit_l / vit_b) with `state` loaded (random if
    None); `source` (the checkpoint's path) is named when the state does not fit."""
    from segment_anything import sam_model_registry
    if sam_type not in SAM_FILES:
        raise InputError(f"unknown SAM type {sam_type!r}; use one of {sorted(SAM_FILES)}")
    sam = sam_model_registry[sam_type](checkpoint=None)
    if state is not None:
        try:
            sam.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise CorruptWeightsError(f"The SAM checkpoint {source or '(given as a state dict)'} does not fit SAM "
                                      f"{sam_type} ({str(e)[:300]}); pick the sam_type that matches the file "
                                      f"({SAM_FILES}), or use the official file for {sam_type}.") from e
    sam.eval().requires_grad_(False)
    return sam.to(device or "cpu")


@dataclass(frozen=True)
class DetectSettings:
    """How a Masker detects (appendix B.1): they shape the Masker, never the cached weights."""
    conf: float = DETECT_CONF     # YOLO-World's internal threshold
    accept: float = ACCEPT_CONF   # a detection counts from this confidence on
    imgsz: int = DETECT_IMGSZ     # YOLO-World's inference size in pixels

    @classmethod
    def take(cls, options: dict) -> "DetectSettings":
        """The settings named in a dict of masker options (BenchSettings.masker_options), taken out of
        it, so that the rest are load_masker's own keyword arguments."""
        return cls(**{f.name: options.pop(f.name) for f in fields(cls) if f.name in options})


def load_masker(yolo_weights: str = DEFAULT_YOLO, sam_type: str = "vit_h", sam_weights: str | None = None,
                clip_weights: str = DEFAULT_CLIP, *, source: str | None = None, clip_arch: str | dict = CLIP_ARCH,
                allow_download: bool | None = None, device=None, detect: DetectSettings = DetectSettings()) -> Masker:
    """YOLO-World v2 + SAM + the CLIP text encoder from local files (downloads only with consent).

    source "tiny" / "tiny:<seed>": the same classes at toy sizes with random weights, built in
    code on the CPU (respec/tiny; the weight arguments are then unused; the tiny CLIP is the one
    the tiny scorer holds). Weights are cached (models.cached) by path and device; `detect`'s
    thresholds and size only shape the Masker.
    """
    conf, accept, imgsz = detect.conf, detect.accept, detect.imgsz
    seed = models.tiny_seed(source)
    if seed is not None:
        return models.cached(("masker", models.TINY, seed, conf, accept, imgsz),
                             lambda: build_tiny_masker(seed, load_clip_model(source), conf=conf, accept=accept,
                                                       imgsz=imgsz))
    dev = resolve_device(device)
    if sam_type not in SAM_FILES:
        raise InputError(f"unknown SAM type {sam_type!r}; use one of {sorted(SAM_FILES)}")
    sam_name = sam_weights or SAM_FILES[sam_type]
    yolo_path = models.resolve("ultralytics", yolo_weights, HOW_TO_GET_YOLO, allow_download=allow_download,
                               url=YOLO_URL if Path(yolo_weights).name == DEFAULT_YOLO else None)
    sam_path = models.resolve("sams", sam_name, HOW_TO_GET_SAM.format(name=sam_name), allow_download=allow_download,
                              url=SAM_URL.format(sam_name) if sam_name in SAM_FILES.values() else None)
    clip = load_clip_model(clip_weights, arch=clip_arch, allow_download=allow_download, device=dev)
    yolo = models.cached(("yolo_world", str(yolo_path), str(dev)), lambda: load_yolo_world(yolo_path, dev))
    sam = models.cached(("sam", sam_type, str(sam_path), str(dev)),
                        lambda: build_sam(sam_type, models.load_torch_file(sam_path), dev, source=sam_path))
    return models.cached(("masker", str(yolo_path), str(sam_path), repr(clip_weights), str(dev), conf, accept, imgsz),
                         lambda: Masker(yolo, sam, clip, conf=conf, accept=accept, imgsz=imgsz, device=dev,
                                        name=f"yolo:{yolo_path.name}+sam:{sam_path.name}"))


def build_tiny_masker(seed: int = 0, clip_model=None, **options) -> Masker:
    """A Masker of respec/tiny's random networks, built anew on the CPU: YOLO-World v2 n from its yaml
    (class biases zeroed, so every query is accepted), a one-block SAM and `clip_model` (default: a
    new tiny CLIP). options: the Masker's (conf, accept, imgsz, ...)."""
    return Masker(models.build_tiny("yolo_world", seed), models.build_tiny("sam", seed),
                  clip_model if clip_model is not None else models.build_tiny("open_clip", seed),
                  device="cpu", name="tiny", **options)
