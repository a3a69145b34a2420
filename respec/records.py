"""JSON records: what the pack writes to results files, websocket events and node outputs.

Strict JSON has no NaN or infinity, and numpy numbers are not JSON numbers; every record passes
through `json_safe` once before it is written or sent.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def json_safe(obj: Any) -> Any:
    """Replace NaN/inf floats by None and numpy scalars (or 0-d arrays) by Python numbers, in
    nested dicts, lists and tuples (tuples become lists; dict keys become strings)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic) or (isinstance(obj, np.ndarray) and obj.shape == ()):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
