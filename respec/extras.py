"""The optional `eval` extra: which of its packages are installed.

The core (editing, the controller, sessions) needs only requirements.txt. The evaluation nodes
(YOLO-World + SAM masks, LPIPS / CLIP scores) also need the packages below; the pack registers
those nodes only when all of them are importable, and otherwise says once which extra to install.
"""
from __future__ import annotations

import importlib.util

# import name -> the name pip installs it under (requirements-eval.txt)
EVAL_PACKAGES = {"ultralytics": "ultralytics", "segment_anything": "segment-anything", "lpips": "lpips",
                 "open_clip": "open_clip_torch"}
EVAL_INSTALL = ('pip install -r requirements-eval.txt (in the pack\'s folder, with the Python that runs ComfyUI), '
                'or pip install ".[eval]"')


def missing_eval_packages() -> list[str]:
    """The pip names of the eval extra's packages that cannot be found (without importing them:
    ultralytics alone takes seconds to import)."""
    missing = []
    for module, dist in EVAL_PACKAGES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(dist)
    return missing
