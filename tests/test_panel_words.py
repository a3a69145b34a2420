"""The panel says a plan's fallbacks in words (issue 36): js/lib/respec_view.js FALLBACK_WORDS has an
entry for every fallback identifier the core records in a plan or a selection."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fallback_identifiers() -> dict[str, str]:
    """Module-level string constants of respec/ named on a line that mentions fallbacks (where a
    rule appends or records them): {identifier: where}."""
    found = {}
    for path in sorted((ROOT / "respec").rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        consts = {n.targets[0].id: n.value.value for n in ast.parse(src).body
                  if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                  and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
        for name, value in consts.items():
            if "_" not in value:
                continue   # a mode name ("request", "paper"), not a rule's identifier
            used = [line for line in src.splitlines() if "fallback" in line.lower()
                    and re.search(rf"\b{name}\b", line) and not line.lstrip().startswith(f"{name} =")]
            if used:
                found[value] = f"{path.relative_to(ROOT)}:{name}"
    return found


def panel_words() -> set[str]:
    js = (ROOT / "js" / "lib" / "respec_view.js").read_text(encoding="utf-8")
    body = js.split("export const FALLBACK_WORDS = {", 1)[1].split("};", 1)[0]
    return set(re.findall(r"^\s*([a-z_]+):", body, re.M))


def test_every_fallback_the_core_records_has_words_in_the_panel():
    ids = fallback_identifiers()
    assert {"json_parse_failed", "provenance_low_confidence", "no_valid_image_id_latest_image"} <= set(ids)
    missing = {i: where for i, where in ids.items() if i not in panel_words()}
    assert not missing, f"add these to FALLBACK_WORDS in js/lib/respec_view.js: {missing}"


def test_the_panel_has_no_words_for_identifiers_the_core_never_records():
    assert not panel_words() - set(fallback_identifiers())


def test_a_plans_summary_names_the_covering_turn_its_provenance_fallbacks_speak_of():
    """The panel reads stored plans as summaries: "low confidence: the editor re-drew the scene since
    turn 2" needs the covering turn there."""
    from respec.plan import Plan, ProvenanceRecord
    plan = Plan(turn=4, user_instruction="remove the box", synthesis_instruction="remove the box",
                fallbacks=("provenance_low_confidence",), controller="provenance",
                provenance=ProvenanceRecord(turn=2, evidence="request"))
    assert plan.summary()["covering_turn"] == 2
    assert Plan(turn=1, user_instruction="a", synthesis_instruction="a").summary()["covering_turn"] is None
