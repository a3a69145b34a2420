"""ultralytics as the pack needs it, for the duration of each of the pack's own calls: offline, no
auto-install, no analytics, safe (weights_only) checkpoint loading, everything restored afterwards,
so that other packs' ultralytics use in the same ComfyUI process is unchanged (docs/evaluation.md).

A top-level module of its own, like respec/comfy.py for ComfyUI: the pack's one bridge to a
third-party library, imported by both the masker (respec/eval/masks.py) and the tiny YOLO-World
builder (respec/tiny/eval_models.py), so that respec/tiny needs nothing of respec/eval (eval ->
models -> tiny is the direction). It imports nothing of the pack.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager

# ultralytics reads its switches from os.environ and from module-level flags. Other packs in the
# same ComfyUI process may use ultralytics too, so the pack never changes either for good: every
# call of ours runs inside ultralytics_scope(), which applies the settings below and puts back
# exactly what was there before (the environment, the flags, PIL.Image.open, OMP_NUM_THREADS).
_SCOPED_ENV = {
    "YOLO_OFFLINE": "1",            # no connectivity probe, no downloads (read at call time too)
    "YOLO_AUTOINSTALL": "False",    # never pip-install a missing requirement
}
_FLAGS = (  # (module, attribute, value while our call runs)
    ("ultralytics.utils", "ONLINE", False),
    ("ultralytics.utils.checks", "ONLINE", False),
    ("ultralytics.utils.checks", "AUTOINSTALL", False),
    # Safe loading: torch.load(weights_only=True) with ultralytics' allow-list of model classes, so
    # a crafted .pt in models/ultralytics cannot run pickle code (its default is weights_only=False).
    ("ultralytics.nn.tasks", "SAFE_LOAD", True),
)
_ULTRA_LOCK = threading.RLock()  # one scope at a time: the flags are process-wide while it is open
_MISSING = object()


@contextmanager
def _environ(values: dict[str, str]):
    """os.environ with `values` set for the block, then exactly as before (keys the block's imports
    added, such as ultralytics' NUMEXPR_MAX_THREADS or OpenCV's QT_* variables, are removed)."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        for k in [k for k in os.environ if k not in saved]:
            del os.environ[k]
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def _import_ultralytics():
    """Import ultralytics without a network probe and without keeping its process-wide patches."""
    from PIL import Image
    pil_open = Image.open
    # Imported offline: ultralytics probes DNS at import unless YOLO_OFFLINE is set. If this pack
    # is the first to import it, its ONLINE flag therefore stays False for the process.
    with _environ({"YOLO_OFFLINE": "1"}):
        import ultralytics
        import ultralytics.nn.tasks  # noqa: F401
        import ultralytics.utils.checks  # noqa: F401
        import ultralytics.utils.events  # noqa: F401
        import ultralytics.utils.patches  # noqa: F401  (it replaces PIL.Image.open on import)
    # ultralytics swaps PIL.Image.open process-wide for one that tries to pip-install a HEIF plugin
    # on any unreadable file; inside ComfyUI that would reach every other node too.
    Image.open = pil_open
    return ultralytics


@contextmanager
def ultralytics_scope():
    """ultralytics as the pack needs it, for the duration of one of the pack's own calls: offline,
    no auto-install, no analytics, safe (weights_only) checkpoint loading. Everything it changes
    is restored on exit. Yields the ultralytics module."""
    import importlib
    with _ULTRA_LOCK:
        ultralytics = _import_ultralytics()
        from PIL import Image
        pil_open = Image.open
        events = importlib.import_module("ultralytics.utils.events").events
        saved = [(importlib.import_module(m), name, getattr(importlib.import_module(m), name, _MISSING), value)
                 for m, name, value in _FLAGS]
        saved.append((events, "enabled", events.enabled, False))  # its analytics/crash reports
        for obj, name, _, value in saved:
            setattr(obj, name, value)
        try:
            with _environ(_SCOPED_ENV):
                yield ultralytics
        finally:
            for obj, name, old, _ in reversed(saved):
                if old is _MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, old)
            Image.open = pil_open
