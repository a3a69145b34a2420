"""The OCCUR score of an editing result (appendix A.5), as the OCCUR Score node asks for it: which
image is the final image Î_N and which is the reference I_ref, then `Scorer.occur_score`.

The measures themselves live in respec/eval/metrics.py.
"""
from __future__ import annotations

from typing import Any

from ..errors import InputError


def final_and_reference(history: Any = None, final_image: Any = None, reference_image: Any = None,
                        reference_turn: int = -1) -> tuple[Any, Any]:
    """(Î_N, I_ref): Î_N is `final_image`, else the history's latest image; I_ref is the
    history's image `reference_turn` when it is >= 0, else `reference_image`. InputError names
    what to connect when one of them is missing."""
    if final_image is not None:
        final = final_image
    elif history is not None:
        final = history.current.image
    else:
        raise InputError("OCCUR Score needs the final image: connect final_image or a history")
    if reference_turn >= 0:
        if history is None:
            raise InputError("reference_turn is set but no history is connected; connect the history "
                             "or set reference_turn to -1 and connect reference_image")
        ref = history.image(reference_turn)
    elif reference_image is not None:
        ref = reference_image
    else:
        raise InputError("OCCUR Score needs I_ref: set reference_turn (with a history) or connect reference_image")
    return final, ref


def score_result(scorer: Any, masks: Any, *, history: Any = None, final_image: Any = None,
                 reference_image: Any = None, reference_turn: int = -1,
                 psnr_cap: float | None = None) -> dict:
    """`Scorer.occur_score` of Î_N against I_ref (chosen by `final_and_reference`), with
    `reference_turn` recorded when I_ref is a turn of the history. Keeps the `regions` masks."""
    final, ref = final_and_reference(history, final_image, reference_image, reference_turn)
    result = scorer.occur_score(final, ref, masks, psnr_cap=psnr_cap)
    if reference_turn >= 0:
        result["reference_turn"] = reference_turn
    return result
