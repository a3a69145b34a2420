"""Which history images the controller is shown (beyond the paper, for long conversations).

The paper shows the controller every image I_0 .. I_{t-1}: at turn 50 that is 50 images, ~13k
visual tokens for Qwen3-VL at 512², and O(T²) tokens over a conversation. Two modes:

- PAPER ("paper"): every image, as in the paper (the benchmark's default, so rows stay
  comparable with it);
- BOUNDED ("bounded"): at most `max_images` (default 6) images: I_0, the images provenance marks
  relevant to the request, and the latest I_{t-1}, in history order. On a restoration turn the
  relevant ones are, from the covering turn k that provenance locates (the turn that hid what
  the request reveals): I_{k-1} and I_k, then, latest first, each other turn j whose change
  touches the region k changed, with I_{j-1} and I_j. What budget is left goes to the most
  recent images. The conversational graphs' default.

Each image keeps its true id ("Image k:"), and the prompt's text lists every turn's instruction
and says which images are shown, so restoration_source_id and image_ids still name history ids.
`shown_images` is the one place this choice is made: the Preservation Target (plan_turn) and a
node building the same prompt for ComfyUI's own TextGenerate both call it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..history import History
from ..pixels.provenance import provenance_of
from .covering import locate_covering_turn

PAPER = "paper"
BOUNDED = "bounded"
HISTORY_MODES = (BOUNDED, PAPER)
DEFAULT_MAX_HISTORY_IMAGES = 6
MIN_HISTORY_IMAGES = 2          # I_0 and the latest


@dataclass(frozen=True)
class ShownImages:
    """The history ids the controller is shown, in history order, and why each one."""

    ids: tuple[int, ...]
    mode: str
    max_images: int | None          # None in paper mode
    why: dict                       # {id: reason}

    @property
    def all_shown(self) -> bool:
        """Whether every image I_0..I_{t-1} is shown (no history image was left out)."""
        return not self.ids or self.ids == tuple(range(self.ids[-1] + 1))

    def record(self) -> dict:
        """JSON-able (for plan.meta["history_images"])."""
        return {"mode": self.mode, "max_images": self.max_images, "ids": list(self.ids),
                "why": {str(k): v for k, v in sorted(self.why.items())}}


def check_history_mode(mode: str, max_images: int | None = None) -> tuple[str, int]:
    """(mode, max_images) checked: mode one of HISTORY_MODES, max_images >= 2 (default 6)."""
    m = (mode or PAPER).strip().lower() if isinstance(mode, str) else mode
    if m not in HISTORY_MODES:
        raise InputError(f"unknown controller history mode {mode!r}; use {' or '.join(HISTORY_MODES)}")
    n = DEFAULT_MAX_HISTORY_IMAGES if max_images is None else max_images
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_HISTORY_IMAGES:
        raise InputError(f"max_history_images must be a whole number of at least {MIN_HISTORY_IMAGES} "
                         f"(I_0 and the latest image), got {max_images!r}")
    return m, n


def shown_images(history: History, request: str, is_restoration: bool, mode: str = PAPER,
                 max_images: int | None = None) -> ShownImages:
    """The ids of the history images the controller is shown this turn (see the module docstring)."""
    mode, n = check_history_mode(mode, max_images)
    last = history.next_turn - 1
    if mode == PAPER:
        return ShownImages(tuple(range(last + 1)), PAPER, None, {})
    if last + 1 <= n:
        return ShownImages(tuple(range(last + 1)), BOUNDED, n, {k: "all fit" for k in range(last + 1)})
    why: dict[int, str] = {0: "I_0, the original", last: "the latest, the image the editor edits"}

    def add(k: int, reason: str) -> None:
        if 0 <= k <= last and k not in why and len(why) < n:
            why[k] = reason

    if is_restoration and last >= 1:
        found = locate_covering_turn(history, request)
        ks = [found.turn] if found.turn is not None else []
        ks += [c for c in found.candidates if c not in ks]
        for k in ks:
            add(k - 1, f"before turn {k}, which covered what the request reveals")
            add(k, f"turn {k}, which covered what the request reveals")
        if found.turn is not None:
            idx = provenance_of(history).index
            for j in sorted(idx.turns_touching(found.turn), reverse=True):
                add(j - 1, f"before turn {j}, which also changed turn {found.turn}'s region")
                add(j, f"turn {j}, which also changed turn {found.turn}'s region")
    for k in range(last - 1, 0, -1):
        add(k, "recent")
    return ShownImages(tuple(sorted(why)), BOUNDED, n, why)
