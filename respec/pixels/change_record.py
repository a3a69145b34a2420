"""A turn's change record C_t as a typed value (beyond the paper).

History Append keeps C_t as a TurnMask: an L image and a JSON-able `info` dict, which is what the
session store writes (respec/pixels/change_mask.py `ChangeResult.info` makes it). Everything that
reads the record in memory (the post-edit steps, the provenance index, the named region, run_turn,
the analysis cache) reads it through `ChangeRecord.of`, so the JSON is parsed in this one place
and nowhere else: `info["alignment"]` is read here only, by `_alignment_json`, which also reads a
turn's `meta["alignment"]` (the copy keep_turn puts there; `alignment_of`, `turn_alignment`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..history import CHANGE, TurnMask
from .alignment import Alignment
from .colour_fit import ColourFit

ALIGNMENT = "alignment"   # the key of the alignment record, in a change record's info and in a turn's meta


def _alignment_json(record: Any) -> Any:
    """The alignment record (JSON) under ALIGNMENT in a change record's info or a turn's meta,
    or None when there is none (records stored before alignment existed)."""
    rec = record.get(ALIGNMENT) if isinstance(record, Mapping) else None
    if not rec:
        return None
    return dict(rec) if isinstance(rec, Mapping) else rec    # not a dict: Alignment.from_record says so


def grid_from_info(info: Any) -> np.ndarray | None:
    """The stability measure's unstable block grid (bool) back from a change record's info ('0'/'1'
    rows, `Stability.info`); None when the record has none."""
    rows = info.get("unstable_grid") if isinstance(info, Mapping) else None
    if not rows:
        return None
    return np.array([[ch == "1" for ch in row] for row in rows], bool)


def _size(v: Any) -> tuple[int, int] | None:
    return (int(v[0]), int(v[1])) if v else None


@dataclass(frozen=True, eq=False)
class ChangeRecord:
    """C_t of turn t, I_{t-1} -> I_t: the stored mask and what its info says, typed."""

    stored: TurnMask                  # as History Append keeps it (the store's format)
    alignment: Alignment              # I_{t-1} -> I_t (the mask is in I_t's frame)
    fit: ColourFit                    # the editor's colour drift, I_{t-1} -> I_t
    fraction: float                   # the share of pixels the mask marks changed
    rerendered: bool                  # the stability measure found a re-rendered scene
    stable_fraction: float            # the share of blocks outside C_t that held (1.0: not measured)
    textured_stable_fraction: float | None   # ... of the judged textured blocks (None: not recorded)
    resized_from: tuple[int, int] | None     # (w, h) of I_t when it was resized to the history's size
    working_size: tuple[int, int] | None     # (w, h) it was analysed at, when below the history's size
    info: Mapping[str, Any]           # the whole JSON record, read-only

    @classmethod
    def of(cls, tm: "TurnMask | ChangeRecord") -> "ChangeRecord":
        """The typed record of a stored change mask (the one reader of its JSON); a ChangeRecord as it is."""
        if isinstance(tm, ChangeRecord):
            return tm
        info = dict(tm.info)
        tsf = info.get("textured_stable_fraction")
        return cls(stored=tm, alignment=Alignment.from_record(_alignment_json(info)),
                   fit=ColourFit.from_info(info),
                   fraction=float(info["fraction"] if "fraction" in info else tm.mask.mean()),
                   rerendered=bool(info.get("rerendered", False)),
                   stable_fraction=float(info.get("stable_fraction", 1.0)),
                   textured_stable_fraction=float(tsf) if tsf is not None else None,
                   resized_from=_size(info.get("resized_from")), working_size=_size(info.get("working_size")),
                   info=MappingProxyType(info))

    @property
    def mask(self) -> np.ndarray:
        """bool H×W: the changed pixels, in I_t's frame."""
        return self.stored.mask

    @cached_property
    def unstable_grid(self) -> np.ndarray | None:
        """The stability measure's block grid (True = moved / redrawn / no source); None when not recorded."""
        return grid_from_info(self.info)

    def alignment_record(self) -> dict | None:
        """The alignment as the store keeps it (JSON, as recorded), or None when the record has none."""
        return _alignment_json(self.info)


def alignment_of(meta: Any, change: "TurnMask | ChangeRecord | Mapping | None" = None) -> Alignment:
    """A stored turn's alignment I_{t-1} -> I_t: its meta["alignment"] (keep_turn's copy), else its
    change record's (a TurnMask, a ChangeRecord, or a record's info); the identity when neither has
    one (turns stored before alignment existed)."""
    rec = _alignment_json(meta)
    if rec is None and isinstance(change, Mapping):
        rec = _alignment_json(change)
    elif rec is None and change is not None:
        return ChangeRecord.of(change).alignment
    return Alignment.from_record(rec)


def turn_alignment(turn: Any) -> Alignment:
    """A history Turn's stored alignment I_{t-1} -> I_t (`alignment_of` its meta, else its stored
    `change` mask; the identity when it has neither)."""
    return alignment_of(turn.meta, turn.masks.get(CHANGE))
