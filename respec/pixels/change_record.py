"""A turn's change record C_t as a typed value (beyond the paper).

History Append keeps C_t as a TurnMask: an L image and a JSON-able `info` dict, which is what the
session store writes. Everything that reads the record in memory (the post-edit steps, the
provenance index, the named region, run_turn) reads it through `ChangeRecord.of`, so the JSON is
parsed in this one place and nowhere else: `info["alignment"]` is read here only.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..history import TurnMask
from .alignment import Alignment
from .colour_fit import ColourFit


@dataclass(frozen=True, eq=False)
class ChangeRecord:
    """C_t of turn t, I_{t-1} -> I_t: the stored mask and what its info says, typed."""

    stored: TurnMask                  # as History Append keeps it (the store's format)
    alignment: Alignment              # I_{t-1} -> I_t (the mask is in I_t's frame)
    fit: ColourFit                    # the editor's colour drift, I_{t-1} -> I_t
    fraction: float                   # the share of pixels the mask marks changed
    rerendered: bool                  # the stability measure found a re-rendered scene
    info: Mapping[str, Any]           # the whole JSON record, read-only

    @classmethod
    def of(cls, tm: TurnMask) -> "ChangeRecord":
        """The typed record of a stored change mask (the one reader of its JSON)."""
        info = dict(tm.info)
        return cls(stored=tm, alignment=Alignment.from_record(info.get("alignment")),
                   fit=ColourFit.from_info(info),
                   fraction=float(info.get("fraction", tm.mask.mean())),
                   rerendered=bool(info.get("rerendered", False)),
                   info=MappingProxyType(info))

    @property
    def mask(self) -> np.ndarray:
        """bool H×W: the changed pixels, in I_t's frame."""
        return self.stored.mask

    def alignment_record(self) -> dict | None:
        """The alignment as the store keeps it (JSON), or None when the record has none."""
        rec = self.info.get("alignment")
        return dict(rec) if isinstance(rec, Mapping) else None
