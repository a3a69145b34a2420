"""verify: a composite that proves itself (issue 43, "a composite that proves itself").

Every step that changes the editor's picture (Reveal Composite, the Drift Guard, the undo from
history) ends with one verification. It looks at the result, not at the inputs' statistics:

    frame borders   where `old`'s warped frame and the kept frame disagree, old pixels are never
                    written (borders.py)
    islands         old content that the kept edit surrounds or cuts (an island, a sliver, an
                    outline of a removed object) joins the edit, or the step steps aside (islands.py)
    seams           the composite has no edge along its boundary that neither source has (seams.py)
    colour          a colour fit is measured against the picture it restores, not chained turn on
                    turn (colour.py)

A result that fails is not handed back: the step steps aside and names the check that failed
(`Verdict.reason`). The verification never changes a picture it cannot check again: a mend is
checked once more, whole (and mended again, up to run.MEND_ROUNDS mends in all). docs/verify.md
says what each check reads.
"""
from __future__ import annotations

from .run import verify
from .values import CheckRead, Composite, Finding, Verdict

__all__ = ["verify", "Composite", "Finding", "CheckRead", "Verdict"]
