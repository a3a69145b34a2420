"""Real-editor drift in the simulated world (beyond the paper; what the Drift Guard is measured
against, docs/drift-guard.md). A SIMULATION, never a model of image quality.

`--sim-defects`:

    none       a perfect editor (SimDefects.none())
    default    today's sim editor (1 % colour gain, 0.5 px blur, a little noise): the paper's rows
    realistic  what real editors were measured doing (the real-editors issue, ../shared/realdata):
               per call a zoom-out of 0.5-1.5 %, a sub-pixel shift of up to ±1.5 px, a re-render
               texture field (spatially correlated, ±3/255), a colour gain of ±2 %, a 0.6 px blur
               and noise, all drawn from the edit's seed
    subject-warp  the default drift plus a local warp of up to 1.5 px per call around the subject
               (the occludee box's centre; SimDefects.subject_warp_px): what FLUX.1 Kontext did to a
               face in the real conversations of issue 32

`realistic` is a preset of SimDefects' real-editor fields (SimDefects.realistic()): the sim
editor moves the frame per call (its ground truth follows the frame) and re-renders the texture
before its own VAE drift. The untouched-pixel truth (respec/sim/measures.py) stays in I_0's frame:
a conversation whose images drift away from I_0 loses untouched PSNR, which is what the Drift Guard
measures.
"""
from __future__ import annotations

from ..errors import InputError
from .editor import SimDefects, SimEditor

SIM_DEFECTS = ("none", "default", "realistic", "subject-warp")


def sim_editor(defects: str = "default") -> SimEditor:
    """The sim editor of a `--sim-defects` level."""
    if defects == "default":
        return SimEditor()
    if defects == "none":
        return SimEditor(SimDefects.none())
    if defects == "realistic":
        return SimEditor(SimDefects.realistic())
    if defects == "subject-warp":
        return SimEditor(SimDefects(subject_warp_px=1.5))
    raise InputError(f"unknown --sim-defects {defects!r}; use one of {', '.join(SIM_DEFECTS)}")
