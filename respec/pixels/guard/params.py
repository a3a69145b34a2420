"""The Drift Guard's settings and the constants its parts share (pixel sizes are fractions of the
picture's shorter side, so that a setting means the same at every size)."""
from __future__ import annotations

from dataclasses import dataclass

METHOD = "drift-guard-v2"          # the records' method (and the derived change record's suffix)
GUARD_MASK = "guard_edit"          # the kept-edit weights stored with the turn (1 = the editor's pixel)
SEAMS = ("membrane", "multiband", "feather")     # how the edit meets I_(t-1) (compose.py)
MIN_PX = 2                         # the margin and the band are at least this wide: a seam needs a pixel each side
NO_MOTION_FOUND = "identity (no consistent"     # how alignment.py's method starts when no motion agreed (a re-render)
NEAR_FRAC = 0.04          # a change within this share of the shorter side of the request's change is part of it


@dataclass(frozen=True)
class GuardParams:
    """Settings of the drift guard (pixel sizes are fractions of the image's shorter side)."""

    margin_frac: float = 0.012       # the change mask is grown by this (at least 2 px)
    rim_frac: float = 0.002          # within this of the change (at least 2 px; 0: off) the editor's pixels are
                                     # kept where I_(t-1) has an edge they have not (region.dropped_edges): an old
                                     # object's anti-aliased outline, under drift's level, left beside the edit
                                     # as a visible line (a letter's dark edge beside the new word, step1x_0004)
    band_frac: float = 0.012         # seam band beyond the edit region (at least 2 px)
    global_share: float = 0.5        # an edit region above this share of the picture is a global edit
    global_colour: float = 0.1       # the whole picture's colour map moves a grey level by more: global
    max_residual_px: float = 1.0     # an alignment explaining the motion worse than this is not trusted
    min_inliers: float = 0.5         # ... or one that fewer blocks than this share agree with
    max_scale_dev: float = 0.08      # a zoom beyond this is a reframing, not drift
    max_motion_frac: float = 0.06    # ... as is a corner motion beyond this share of the shorter side
    keywords: bool = True            # the keyword rule for global requests (the EditScope's kind, scope.py):
                                     # a request is global when a global word (lighting, night, style, ...)
                                     # governs one of its clauses; a global edit the words miss is still
                                     # caught by what the change record measures (coverage, colour map)
    drift_residual: float = 10.0 / 255.0  # a change component the previous image, blurred, explains this well is drift
    max_moved_around: float = 0.25   # more of the ring around the edit in moved blocks: a pose change, left alone
    seam: str = "membrane"           # how the edit meets I_(t-1): one of SEAMS (see `compose`)
    coherent: bool = True            # a faint change coherent in colour, in or next to the edit, is kept (a tint)
    coherent_level: float = 3.0 / 255.0   # coherent: the residual smoothed over coherent_sigma px at least this
                                     # (and COHERENT_OVER_DRIFT x the drift around the change, coherent_level()),
    coherent_ratio: float = 0.7      # ... at least this share of the smoothed residual magnitude, and the
    coherent_sigma: float = 2.0      # ... pixel's own (3x3) residual as strong and in that direction
    coherent_open: int = 5           # opened by a square this wide: an area, not the band along an edge
    coherent_min_share: float = 0.002  # an area next to the change joins from this share of the picture ...
    coherent_max_share: float = 0.25  # ... up to this one (larger: drift the colour fit missed, not joined)

    def pixels(self, shape: tuple[int, int]) -> dict[str, int]:
        """Margin and band widths in pixels for an image of `shape` (H, W)."""
        side = min(shape)
        return {"margin": max(MIN_PX, round(self.margin_frac * side)),
                "band": max(MIN_PX, round(self.band_frac * side)),
                "rim": max(MIN_PX, round(self.rim_frac * side)) if self.rim_frac > 0 else 0}

DEFAULT_GUARD = GuardParams()
