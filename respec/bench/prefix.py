"""Shared prefixes: the configs of one scenario compute their common turns once.

Per-turn seeds do not depend on the config, so up to the revelation turn `baseline` and `hrs`
give the editor identical inputs, and `pti` and `respec` make identical controller calls and
edits (turn 1 is identical in all four). Rather than hard-coding which config shares what with
which, the parts the turn function calls are wrapped for the duration of one scenario: an edit
or a controller call whose inputs (image contents, text, seed, settings) were already seen in
this scenario returns the recorded answer instead of running again. What is shared is therefore
exactly what is identical, and a row computed this way equals the row of a separate run: the
editor and the controller are deterministic for given inputs and seed (greedy decoding, seeded
generators), which `tests/test_bench_prefix.py` checks on the real tiny models.

Scores are shared the same way: configs whose final image, reference image and masks are
identical (in the sim world baseline = pti and hrs = respec, since its editor ignores the text)
get the score computed for the first of them; the later rows say so (`scores_shared_with`).

The memo lives for one scenario (`SharedPrefix` is made per scenario and dropped after it), so
memory does not grow with the run.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
from PIL import Image


def _image_digest(img: Any) -> str:
    arr = np.ascontiguousarray(np.asarray(img))
    h = hashlib.blake2b(digest_size=16)
    h.update(str((arr.shape, arr.dtype.str)).encode())
    h.update(arr.tobytes())
    return h.hexdigest()


def _digest(value: Any) -> Any:
    """A hashable, content-based stand-in for an argument (images by their pixels)."""
    if isinstance(value, Image.Image) or isinstance(value, np.ndarray):
        return ("image", _image_digest(value))
    if hasattr(value, "array") and hasattr(value, "digest"):   # a history StoredImage
        return ("image", _image_digest(value.array))
    if isinstance(value, (list, tuple)):
        return tuple(_digest(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _digest(v)) for k, v in value.items()))
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)


def masks_digest(masks: Any) -> str:
    """A content digest of a TrajectoryMasks (every mask's pixels and the records)."""
    h = hashlib.blake2b(digest_size=16)
    for m in list(getattr(masks, "occ", [])) + list(getattr(masks, "new", [])):
        h.update(_image_digest(m).encode())
    rec = masks.to_record() if hasattr(masks, "to_record") else None
    h.update(json.dumps(rec, sort_keys=True, default=str).encode())
    return h.hexdigest()


class _Shared:
    """Delegates everything to the wrapped part; memoises one method."""

    def __init__(self, part: Any, prefix: "SharedPrefix"):
        object.__setattr__(self, "_part", part)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._part, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._part, name, value)   # e.g. a context the runner sets on the editor


class SharedEditor(_Shared):
    """An editor whose identical edits within one scenario run once."""

    def edit(self, images, instruction, **kwargs):
        """The wrapped editor's edit, run once per identical (images, instruction, options) in the scenario."""
        key = (_digest(list(images)), instruction, _digest(kwargs))
        memo = self._prefix.edits
        if key in memo:
            self._prefix.counts["edits_shared"] += 1
            image, last_run = memo[key]
            if last_run is not None:
                try:
                    self._part.last_run = dict(last_run)
                except AttributeError:
                    pass
            return image.copy() if hasattr(image, "copy") else image
        out = self._part.edit(images, instruction, **kwargs)
        self._prefix.counts["edits_run"] += 1
        last = getattr(self._part, "last_run", None)
        memo[key] = (out.copy() if hasattr(out, "copy") else out, dict(last) if isinstance(last, dict) else None)
        return out


class SharedController(_Shared):
    """A controller backend whose identical requests within one scenario are answered once."""

    def chat(self, parts, **kwargs):
        """The wrapped backend's answer, asked once per identical (parts, options) in the scenario."""
        key = (_digest(list(parts)), _digest(kwargs))
        memo = self._prefix.chats
        if key in memo:
            self._prefix.counts["vlm_calls_shared"] += 1
            return memo[key]
        out = self._part.chat(parts, **kwargs)
        self._prefix.counts["vlm_calls_run"] += 1
        memo[key] = out
        return out


class SharedPrefix:
    """The memo of one scenario's edits and controller calls, and what it saved."""

    def __init__(self):
        self.edits: dict = {}
        self.chats: dict = {}
        self.scores: dict = {}
        self.counts: dict[str, int] = {"edits_run": 0, "edits_shared": 0, "vlm_calls_run": 0, "vlm_calls_shared": 0,
                                       "scores_run": 0, "scores_shared": 0}

    def score(self, final: Any, reference: Any, masks: Any, config: str, compute) -> tuple[Any, str | None]:
        """(the OCCUR score of `final` against `reference` under `masks`, the config it was first
        computed for when it is shared, else None); compute() runs only for a new combination."""
        key = (_digest(final), _digest(reference), masks_digest(masks))
        hit = self.scores.get(key)
        if hit is not None:
            self.counts["scores_shared"] += 1
            return hit[0], hit[1]
        out = compute()
        self.counts["scores_run"] += 1
        self.scores[key] = (out, config)
        return out, None

    def editor(self, editor: Any) -> Any:
        """The editor to pass to the turn function for this scenario."""
        return None if editor is None else SharedEditor(editor, self)

    def controller(self, backend: Any) -> Any:
        """The controller backend to pass to the turn function for this scenario."""
        return None if backend is None else SharedController(backend, self)
