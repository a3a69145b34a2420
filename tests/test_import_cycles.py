"""The core's modules import one another without cycles, counting imports inside functions
(scripts/dev/import_cycles.py): a function-level import hides a cycle from Python, not from a reader."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cycles():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "scripts" / "dev" / "import_cycles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g, _ = mod.graph(ROOT / "respec")
    return {tuple(c) for c in mod.cycles(g)}


def test_the_core_has_no_import_cycle():
    assert _cycles() == set()


def test_the_evaluation_stage_the_models_and_the_tiny_models_import_in_one_direction():
    """respec/eval -> respec/models -> respec/tiny, and respec/tiny imports no loader."""
    assert not any(m.startswith(("respec.eval", "respec.tiny", "respec.models")) for c in _cycles() for m in c)
