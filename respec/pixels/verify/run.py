"""The verification's driver: run every check on a step's result, mend where a check says how,
check the mended picture again (up to MEND_ROUNDS mends), and say whether it may be handed back."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np

from .borders import borders
from .colour import check_colour
from .fragments import fragments
from .islands import islands
from .seams import check_seams
from .values import CheckRead, Composite, Finding, Verdict

# Each check reads one Composite and returns a CheckRead; the order is the order of the record.
Check = Callable[[Composite], CheckRead]
CHECKS: tuple[tuple[str, Check], ...] = (("borders", borders), ("islands", islands), ("seam", check_seams),
                                         ("colour", check_colour), ("fragments", fragments))
MEND_ROUNDS = 3     # a mend moves the kept edit's edge; what lay just beyond it (a rim's fainter outer pixel, a
                    # speck beside an island) may then show: on the real chains a third round found nothing more


def _run_checks(c: Composite, checks: tuple[tuple[str, Check], ...]) -> tuple[dict, list, np.ndarray | None]:
    measured, findings, mend = {}, [], None
    for name, check in checks:
        read = check(c)
        measured[name] = read.measured
        mends = read.mend is not None and read.mend.any()
        if read.finding is not None:
            findings.append((read.finding, mends))
        if mends:
            mend = read.mend if mend is None else (mend | read.mend)
    return measured, findings, mend


def named_first(findings: list[tuple[Finding, bool]]) -> tuple[Finding, ...]:
    """A failed verdict's findings in the order it names them: a final one (Finding.final), then those
    no mend could cure, then the rest, each group in the checks' order."""
    return tuple(f for f, _ in sorted(findings, key=lambda fm: (not fm[0].final, fm[1])))


def mended(c: Composite, mend: np.ndarray) -> Composite:
    """`c` with the fallback's pixels where `mend` is set: that old content joins the edit."""
    kept = c.kept.copy()
    kept[mend] = c.fallback[mend]
    written = np.where(mend, 0.0, c.written).astype(np.float32)
    return replace(c, kept=kept, written=written)


def verify(c: Composite, checks: tuple[tuple[str, Check], ...] | None = None) -> Verdict:
    """Verify one step's result (the package docstring lists the checks). Passes when no check
    found anything; when findings come with mends, the mended picture is checked again, whole, and
    mended again up to MEND_ROUNDS times in all: it passes only if nothing is found then. A final
    finding (Finding.final: no mend can cure it) ends it at once."""
    t0 = time.perf_counter()
    checks = CHECKS if checks is None else checks
    measured, findings, mend = _run_checks(c, checks)
    if not findings:
        return Verdict(c.kept, True, measured=measured, seconds=time.perf_counter() - t0, written=c.written)
    fixed, first, found = c, measured, findings
    for _ in range(MEND_ROUNDS):
        if mend is None or any(f.final for f, _ in found):
            break
        fixed = mended(fixed, mend)
        measured, found, mend = _run_checks(fixed, checks)
        if not found:
            return Verdict(fixed.kept, True, tuple(f for f, _ in findings), True, {"before_mend": first, **measured},
                           time.perf_counter() - t0, fixed.written)
    return Verdict(c.fallback, False, named_first(findings), False, first, time.perf_counter() - t0)
