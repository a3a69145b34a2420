"""The one stage timer (respec/timing.py) the turn, the runner, the masker and the scorer share."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from respec.timing import StageTimer


def test_a_stage_timer_sums_each_stage_and_counts_its_calls():
    timer = StageTimer()
    assert timer.seconds["never"] == 0.0            # an unmeasured stage reads as zero
    for _ in range(2):
        with timer.measure("editor"):
            pass
    timer.add("yolo_inference", 0.25)
    assert timer.calls["editor"] == 2 and timer.seconds["editor"] >= 0.0
    assert timer.as_dict()["yolo_inference"] == {"seconds": 0.25, "calls": 1}
    timer.reset()
    assert timer.as_dict() == {}


def test_a_stage_runs_inside_the_hook_and_adds_to_the_callers_totals():
    seen = []

    @contextmanager
    def hook(stage):
        seen.append(("enter", stage))
        yield
        seen.append(("exit", stage))

    totals = {"editor": 1.0}
    stage = StageTimer(totals, hook).measure
    with pytest.raises(RuntimeError):
        with stage("editor"):
            seen.append(("body", "editor"))
            raise RuntimeError("the editor failed")
    assert seen == [("enter", "editor"), ("body", "editor")]     # the hook saw the exception, not an exit
    assert totals["editor"] >= 1.0 and set(totals) == {"editor"}  # a failed stage still counts its time
