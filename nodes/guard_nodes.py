"""Beyond the paper: Drift Guard, after any editor. The logic lives in respec/post_edit/guard_step.py
(over the pixel rules of respec/pixels/guard/); this class only translates."""
from __future__ import annotations

import json

import numpy as np

from ..respec.post_edit.guard_step import guard_images, guard_result
from ..respec.post_edit.reveal_step import RevealStep
from .boundary import optional_plan_in, step_in
from .common import PLAN, image_from_comfy, images_to_comfy, mask_from_comfy, masks_to_comfy, read_only

CATEGORY = "ReSpec/provenance"
GUARD = "RESPEC_GUARD"   # what the guard did (for History Append to keep with the turn)


class ReSpecDriftGuard:
    """Keep the previous image's own pixels wherever the edit did not change the picture."""

    CATEGORY = CATEGORY
    FUNCTION = "guard"
    SEARCH_ALIASES = ["drift", "guard", "preserve", "composite", "paste back", "zoom", "shift", "colour drift"]
    RETURN_TYPES = ("IMAGE", "MASK", "STRING", GUARD)
    RETURN_NAMES = ("image", "edit_mask", "report", "guard")
    OUTPUT_TOOLTIPS = ("The edit inside its region and the previous image's own pixels everywhere else, in the "
                       "previous image's frame (the editor's image unchanged when the guard stepped aside).",
                       "The kept edit per pixel (1 = the editor's pixel, 0 = the previous image's; in between, "
                       "the seam). All 1 when the guard stepped aside.",
                       "One line of what it did or why it stepped aside, then its record as JSON.",
                       "Its record for History Append's 'guard' input: kept with the turn (meta.post_edit, "
                       "and the kept-edit mask).")
    DESCRIPTION = ("After any editor: aligns the edit to the previous image (undoing a zoom-out or a shift), finds "
                   "the pixels the edit changed (grown by a small margin, holes filled; your MASK instead when you "
                   "connect one), and returns the editor's pixels there and the previous image's own pixels "
                   "everywhere else, with a colour-matched seam. So colours, detail and framing do not drift over a "
                   "conversation. On a local request a re-render, a zoom or a whole-picture colour shift is drift: the "
                   "edit is read on the scene's structure and put back in the picture's own colours, and re-drawn "
                   "detail far from what the request names is restored. A new background keeps the subject. It steps "
                   "aside and keeps the edit as it is on a global edit (lighting, style, season), when the scene's "
                   "structure moved (a new pose, a re-framing), or on an alignment it does not trust; the report says why.")

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "previous": ("IMAGE", {"tooltip": "The image the edit was made from, I_(t-1) (one image)."}),
                "edited": ("IMAGE", {"tooltip": "The editor's output I_t (any editor; after Reveal Composite when "
                                     "it runs). Resized to the previous image's size when it differs."}),
                "enabled": ("BOOLEAN", {"default": True, "tooltip":
                            "On by default: outside the edit the previous image's pixels are kept. Off: the "
                            "editor's image passes through unchanged (compare with and without)."}),
            },
            "optional": {
                "mask": ("MASK", {"tooltip": "Optional: your own mask of what this turn may change (in the "
                                  "previous image's frame). It wins over the change mask: only these pixels keep "
                                  "the editor's, and the global-edit rules are skipped."}),
                "instruction": ("STRING", {"forceInput": True, "default": "", "tooltip":
                                "Optional: this turn's request, read clause by clause: a lighting, style or season "
                                "request makes the guard step aside; 'keep the same ...' clauses do not; a new "
                                "background keeps the subject; the objects it names bound the edit region."}),
                "plan": (PLAN, {"tooltip": "Optional: this turn's plan (its instruction goes through the same rule)."}),
                "reveal": ("RESPEC_REVEAL", {"tooltip": "Optional: Reveal Composite's record of this turn. Its pasted "
                           "pixels count as the edit, and inside the paste the output is I_(k-1)'s own pixels "
                           "(not colour-matched to the editor's drift: around them the guard keeps yours)."}),
            },
        }

    def guard(self, previous, edited, enabled, mask=None, instruction="", plan=None, reveal=None):
        if not enabled:
            cur = image_from_comfy(edited, "edited")
            image_from_comfy(previous, "previous")
            entry = {"applied": False, "reason": "switched off"}
            return (edited, masks_to_comfy([np.ones(cur.shape[:2], np.float32)]),
                    "Drift Guard switched off\n" + json.dumps(entry), guard_result(None, entry))
        res = _guarded(previous, edited, mask, instruction, optional_plan_in(plan), reveal)
        # The weight has the size of the image returned (the editor's own when it stepped aside).
        image = images_to_comfy([res.image]) if res.applied else edited
        return (image, masks_to_comfy([res.weight]), res.line() + "\n" + json.dumps(res.record), guard_result(res))


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
