"""The README lists what the pack ships (issue 36): every node the pack registers is in the Nodes
table, and the old workflow file names map to the current titles."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The README's text under `## title` up to the next `## ` heading."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _first_column(table_text: str) -> list[str]:
    rows = [line for line in table_text.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [row.split(" | ")[0].strip("| ").strip() for row in rows[1:]]   # the header row left out


def _every_node_display_name(pack) -> dict[str, str]:
    """Class -> display name of every node the pack defines, the eval extra's included (they register
    only when it is installed)."""
    nodes = sys.modules[f"{pack.__name__}.nodes"]
    names = {}
    for module in nodes._MODULES:
        names.update(module.NODE_DISPLAY_NAME_MAPPINGS)
    return names


def test_the_nodes_table_lists_every_node_the_pack_registers_and_no_other(pack):
    every = _every_node_display_name(pack)
    assert set(pack.NODE_CLASS_MAPPINGS) <= set(every)
    want = {name.removesuffix(" (ReSpec)") for name in every.values()}
    shown, unknown = set(), []
    for cell in _first_column(_section("Nodes")):
        # a cell names one node or several joined by " / " (a name may hold " / " itself)
        rest = f" / {cell} / "
        for name in sorted(want, key=len, reverse=True):
            if f" / {name} / " in rest:
                shown.add(name)
                rest = rest.replace(f" / {name} / ", " / ", 1)
        if rest.strip(" /"):
            unknown.append(rest.strip(" /"))
    assert not want - shown, f"add to README's Nodes table: {sorted(want - shown)}"
    assert not unknown, f"README's Nodes table names nodes the pack does not define: {unknown}"


def test_the_readme_maps_every_old_workflow_name_to_its_title():
    index = json.loads((ROOT / "workflows" / "api" / "index.json").read_text(encoding="utf-8"))["workflows"]
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (ReSpec [^|]+?) \|$", README, re.M))
    assert rows == {key: entry["title"] for key, entry in index.items()}
