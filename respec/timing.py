"""Seconds per named stage: the one timer the turn, the benchmark runner, the masker and the scorer use.

    timer = StageTimer()
    with timer.measure("editor"):
        ...
    timer.seconds["editor"], timer.calls["editor"]
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterator

# A hook wrapped around each measured stage: hook("editor") is entered before the block and left
# after it (a profiler range, a progress message); its own time counts towards the stage.
TimingHook = Callable[[str], ContextManager]


class StageTimer:
    """Seconds spent per named stage (and per bare model forward), summed over calls, and how many
    calls. `seconds`: the dict the seconds are added to, e.g. a caller's running totals (default:
    the timer's own). `hook`: each measured block runs inside hook(stage)."""

    def __init__(self, seconds: dict[str, float] | None = None, hook: TimingHook | None = None):
        self.seconds: dict[str, float] = seconds if seconds is not None else defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.hook = hook

    @contextmanager
    def measure(self, stage: str) -> Iterator[None]:
        """Add the block's seconds to `stage` (inside hook(stage) when there is a hook)."""
        t0 = time.perf_counter()
        try:
            with (self.hook(stage) if self.hook is not None else nullcontext()):
                yield
        finally:
            self.add(stage, time.perf_counter() - t0)

    def add(self, stage: str, seconds: float) -> None:
        """Count one call of `stage` that took `seconds` (for times measured elsewhere)."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        self.calls[stage] += 1

    def reset(self) -> None:
        """Forget every stage's seconds and calls."""
        self.seconds.clear()
        self.calls.clear()

    def as_dict(self) -> dict:
        """{stage: {"seconds": rounded to µs, "calls": n}}, stages sorted by name."""
        return {k: {"seconds": round(v, 6), "calls": self.calls[k]} for k, v in sorted(self.seconds.items())}
