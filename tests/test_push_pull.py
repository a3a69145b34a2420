"""Push-pull interpolation (respec/pixels/blend.py's push_pull): the drift guard's seam membrane."""
import numpy as np
import pytest

from respec.errors import InputError
from respec.pixels.blend import push_pull


def test_push_pull_keeps_the_known_values_and_fills_the_rest_smoothly():
    h, w = 64, 80
    known = np.zeros((h, w), bool)
    known[:, :3] = known[:, -3:] = True                 # a left edge at 0.2 and a right edge at 0.6
    values = np.zeros((h, w, 1), np.float32)
    values[:, :3] = 0.2
    values[:, -3:] = 0.6
    out = push_pull(values, known, 6)
    assert np.allclose(out[known], values[known])
    mid = out[h // 2, 3:-3, 0]
    assert 0.2 - 1e-3 <= mid.min() and mid.max() <= 0.6 + 1e-3        # no overshoot
    assert mid[0] < mid[len(mid) // 2] < mid[-1]                        # from one side's value to the other's
    assert np.abs(np.diff(mid)).max() < 0.05                            # no step


def test_push_pull_refuses_mismatched_shapes():
    with pytest.raises(InputError, match="push_pull"):
        push_pull(np.zeros((4, 4, 3)), np.zeros((5, 4), bool), 2)
