"""Beyond the paper: Drift Guard, after any editor, and history first before it (issue 43). The logic
lives in respec/post_edit/guard_step.py (over the pixel rules of respec/pixels/guard/) and
respec/post_edit/undo_step.py (over respec/pixels/undo.py); this class only translates.

History first in a graph: the editor's image reaches the guard through a lazy input (`edited`, and
`mask` and `reveal`, which come from it), asked for in check_lazy_status only when the history does
not answer the turn. On a turn it answers, ComfyUI then never runs the editor's branch (sampler, VAE
decode, Reveal Composite), provided no output node hangs on that branch (tests/test_workflows.py
checks the shipped chat graphs)."""
from __future__ import annotations

import json

import numpy as np

from ..respec.comfy import io, node_schema
from ..respec.errors import InputError
from ..respec.pixels.undo import UNDO_SOURCE
from ..respec.post_edit.guard_step import guard_images, guard_result
from ..respec.post_edit.reveal_step import RevealStep
from ..respec.post_edit.undo_step import answers_turn, history_answer
from .boundary import (UNCONNECTED, history_in, optional_plan_in, plan_for_history, step_in, switch_in,
                       unevaluated)
from .common import History, Plan, image_from_comfy, images_to_comfy, mask_from_comfy, masks_to_comfy, read_only
from .provenance_nodes import REVEAL

CATEGORY = "ReSpec/provenance"
GUARD = "RESPEC_GUARD"   # what the guard did (for History Append to keep with the turn)
# The guard's record and Reveal Composite's, as V3 socket types (History Append takes both).
GuardRecord, Reveal = io.Custom(GUARD), io.Custom(REVEAL)


class ReSpecDriftGuard(io.ComfyNode):
    """Keep the previous image's own pixels wherever the edit did not change the picture."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecDriftGuard", display_name="Drift Guard (ReSpec)", category=CATEGORY,
            search_aliases=["drift", "guard", "preserve", "composite", "paste back", "zoom", "shift", "colour drift"],
            description=(
                "After any editor: aligns the edit to the previous image (undoing a zoom-out or a shift), finds "
                "the pixels the edit changed (grown by a small margin, holes filled; your MASK instead when you "
                "connect one), and returns the editor's pixels there and the previous image's own pixels "
                "everywhere else, with a colour-matched seam. So colours, detail and framing do not drift over a "
                "conversation. On a local request a re-render, a zoom or a whole-picture colour shift is drift: the "
                "edit is read on the scene's structure and put back in the picture's own colours, and re-drawn "
                "detail far from what the request names is restored. A new background keeps the subject. It steps "
                "aside and keeps the edit as it is on a global edit (lighting, style, season), when the scene's "
                "structure moved (a new pose, a re-framing), or on an alignment it does not trust; the report says "
                "why. With history_first on and the history connected, a request that removes what an earlier turn "
                "added is answered from the history before any of this, and the editor is not run."),
            inputs=[
                io.Image.Input(id="previous", tooltip="The image the edit was made from, I_(t-1) (one image)."),
                io.Image.Input(id="edited", lazy=True, tooltip=(
                    "The editor's output I_t (any editor; after Reveal "
                    "Composite when it runs). Resized to the previous image's size when it differs. "
                    "Not asked for on a turn history first answers: the editor does not run.")),
                io.Boolean.Input(id="enabled", default=True, tooltip=(
                    "On by default: outside the edit the previous image's pixels are kept. Off: the "
                    "editor's image passes through unchanged (compare with and without).")),
                io.Mask.Input(id="mask", optional=True, lazy=True, tooltip=(
                    "Optional: your own mask of what this turn may change (in the "
                    "previous image's frame). It wins over the change mask: only these pixels keep "
                    "the editor's, and the global-edit rules are skipped.")),
                io.String.Input(id="instruction", optional=True, force_input=True, default="", multiline=None,
                                tooltip=(
                    "Optional: this turn's request, read clause by clause: a lighting, style or season "
                    "request makes the guard step aside; 'keep the same ...' clauses do not; a new "
                    "background keeps the subject; the objects it names bound the edit region.")),
                Plan.Input(id="plan", optional=True,
                           tooltip="Optional: this turn's plan (its instruction goes through the same rule)."),
                Reveal.Input(id="reveal", optional=True, lazy=True, tooltip=(
                    "Optional: Reveal Composite's record of this "
                    "turn. Its pasted pixels count as the edit, and inside the paste the output is I_(k-1)'s "
                    "own pixels (not colour-matched to the editor's drift: around them the guard keeps yours).")),
                History.Input(id="history", optional=True, tooltip=(
                    "Optional: the history before this turn (the one 'previous' is the "
                    "current image of). Needed by history_first.")),
                io.Boolean.Input(id="history_first", optional=True, default=False, tooltip=(
                    "On (the chat graphs): a request that removes or takes back what an earlier turn "
                    "added is answered from 'history' (the picture before that turn, in its region), "
                    "and the editor's image is never asked for, so ComfyUI does not run the editor. "
                    "Other turns go through the guard as before. Off: the editor always runs. "
                    "Independent of 'enabled'.")),
            ],
            outputs=[
                io.Image.Output(id="image", tooltip=(
                    "The edit inside its region and the previous image's own pixels everywhere else, in the "
                    "previous image's frame (the editor's image unchanged when the guard stepped aside; the "
                    "history's answer when history first answered the turn).")),
                io.Mask.Output(id="edit_mask", tooltip=(
                    "The kept edit per pixel (1 = the editor's pixel, 0 = the previous image's; in between, "
                    "the seam). All 1 when the guard stepped aside. When history first answered: the pixels "
                    "taken from the picture before the turn it took back.")),
                io.String.Output(id="report",
                                 tooltip="One line of what it did or why it stepped aside, then its record as JSON."),
                GuardRecord.Output(id="guard", tooltip=(
                    "Its record for History Append's 'guard' input: kept with the turn (meta.post_edit, "
                    "and the kept-edit mask; history first's record before it when that switch is on).")),
            ])

    @classmethod
    def check_lazy_status(cls, previous, edited=None, enabled=True, mask=UNCONNECTED, instruction="", plan=None,
                          reveal=UNCONNECTED, history=None, history_first=False):
        """Ask ComfyUI for the editor's image (and the mask and record made from it) unless history first
        answers the turn (computed once: history_answer keeps it for execute())."""
        if answers_turn(_history_first(previous, history, history_first, plan, instruction)):
            return []
        return unevaluated(edited=edited, mask=mask, reveal=reveal)

    @classmethod
    def execute(cls, previous, edited=None, enabled=True, mask=None, instruction="", plan=None, reveal=None,
                history=None, history_first=False):
        undo = _history_first(previous, history, history_first, plan, instruction)
        if answers_turn(undo):
            return io.NodeOutput(images_to_comfy([undo.image]), masks_to_comfy([undo.masks[UNDO_SOURCE].mask]),
                                 undo.entry["words"] + "\n" + json.dumps(undo.record()), undo)
        if edited is None:
            raise InputError("the Drift Guard needs 'edited': connect the editor's image")
        if not switch_in(enabled, "enabled"):
            cur = image_from_comfy(edited, "edited")
            image_from_comfy(previous, "previous")
            entry = {"applied": False, "reason": "switched off"}
            return io.NodeOutput(edited, masks_to_comfy([np.ones(cur.shape[:2], np.float32)]),
                                 "Drift Guard switched off\n" + json.dumps(entry),
                                 _record(undo, guard_result(None, entry)))
        res = _guarded(previous, edited, mask, instruction, optional_plan_in(plan), reveal)
        # The weight has the size of the image returned (the editor's own when it stepped aside).
        image = images_to_comfy([res.image]) if res.applied else edited
        return io.NodeOutput(image, masks_to_comfy([res.weight]), res.line() + "\n" + json.dumps(res.record),
                             _record(undo, guard_result(res)))


def _record(undo, guarded):
    """The `guard` output: history first's record (when its switch is on) before the guard's, the
    order run_turn keeps them in (History Append reads both)."""
    return guarded if undo is None else (undo, guarded)


def _history_first(previous, history, switch, plan, instruction):
    """History first's StepResult for this turn (respec/post_edit/undo_step.py history_answer: the
    same value for check_lazy_status and guard), or None when the switch is off; the inputs it reads
    checked first (an error changes nothing: no editor has run)."""
    if not switch_in(switch, "history_first"):
        return None
    if history is None:
        raise InputError("history_first needs 'history': connect the history this turn is made from (History "
                         "Store's history, the same one the Reference Selector reads), or switch history_first off")
    history = history_in(history)
    if plan is not None:
        plan, history = plan_for_history(plan, history, "Drift Guard")
    current = history.current.image.array
    shown = image_from_comfy(previous, "previous")
    if shown.shape != current.shape or not np.array_equal(shown, current):
        raise InputError("history_first: 'previous' is not the history's current image I_(t-1): connect the "
                         "Reference Selector's current_image made from the same history")
    return history_answer(history, plan, instruction or "")


def _guarded(previous, edited, mask, instruction, plan, reveal):
    """The core's guard on the node's inputs, converted once (read-only: kept without a copy); the
    converted pictures are let go when it returns, before the output is made (64 MP: 384 MB).
    reveal: Reveal Composite's value; when it pasted, its paste is the earlier image's own pixels."""
    user = mask_from_comfy(mask, "mask") if mask is not None else None
    pasted_by = step_in(reveal, RevealStep.name, "Reveal Composite", "reveal").result if reveal is not None else None
    pasted = pasted_by.source_weight if getattr(pasted_by, "applied", False) else None
    return guard_images(read_only(image_from_comfy(previous, "previous")),
                        read_only(image_from_comfy(edited, "edited")),
                        user_mask=user, request=instruction or "", plan=plan, extra_region=pasted,
                        exact=reveal.exact if pasted is not None else None)


NODE_CLASS_MAPPINGS = {"ReSpecDriftGuard": ReSpecDriftGuard}
NODE_DISPLAY_NAME_MAPPINGS = {"ReSpecDriftGuard": "Drift Guard (ReSpec)"}
