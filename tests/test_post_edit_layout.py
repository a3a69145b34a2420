"""The post-edit steps sit above the pixel rules and the controller (respec/post_edit/): the pixel
rules import nothing from the controller, and neither imports the steps, counting imports inside
functions (scripts/dev/import_cycles.py's graph), so respec/pixels and respec/controller form no loop."""
from __future__ import annotations

from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent


def _edges() -> set[tuple[str, str]]:
    g, _ = load_script("scripts/dev/import_cycles.py").graph(ROOT / "respec")
    return {(a, b) for a, targets in g.items() for b in targets}


def _between(edges, src: str, dst: str) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in edges if a.startswith(src) and b.startswith(dst))


def test_the_pixel_rules_import_nothing_from_the_controller_or_the_steps():
    edges = _edges()
    assert _between(edges, "respec.pixels", "respec.controller") == []
    assert _between(edges, "respec.pixels", "respec.post_edit") == []


def test_the_controller_does_not_import_the_post_edit_steps():
    assert _between(_edges(), "respec.controller", "respec.post_edit") == []


def test_the_steps_use_both_the_controller_and_the_pixel_rules():
    """(so the test above is about a real graph: the steps read the request and apply the rules)"""
    edges = _edges()
    assert ("respec.post_edit.reveal_step", "respec.controller.covering") in edges
    assert ("respec.post_edit.guard_step", "respec.controller.request_language") in edges
    assert ("respec.post_edit.guard_step", "respec.pixels.guard") in edges
