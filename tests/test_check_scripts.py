"""The scripts that check the pack in a real ComfyUI (scripts/comfyui/): what they need is named in
requirements-check.txt, and a missing package stops them with a message naming that file (issue 36:
check_in_comfyui.py once crashed with a bare ModuleNotFoundError for websockets)."""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts" / "comfyui"


def _harness():
    return load_script("scripts/comfyui/comfyui_harness.py", "comfyui_harness_under_test")


def _third_party_imports(path: Path) -> set[str]:
    local = {p.stem for p in [*SCRIPTS.glob("*.py"), *(SCRIPTS.parent / "workflows").glob("*.py")]}   # the repo's own
    mods = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in local}


def _requirements(name: str) -> set[str]:
    """Package names a requirements file installs, following its -r includes."""
    out = set()
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            out |= _requirements(line[3:].strip())
        elif line:
            out.add(re.split(r"[<>=\[; ]", line)[0].lower())
    return out


def test_every_package_the_check_scripts_import_is_in_requirements_check_txt():
    harness = _harness()
    installed = _requirements("requirements-check.txt")
    for path in sorted(SCRIPTS.glob("*.py")):
        mods = _third_party_imports(path) - {"respec"}   # the pack's core, from the repository itself
        if "comfy" in mods:
            continue   # make_*_files.py run inside ComfyUI's own Python (--python), with its packages
        unknown = mods - set(harness.CHECK_MODULES)
        assert not unknown, f"{path.name} imports {unknown}: add them to CHECK_MODULES and requirements-check.txt"
    for module, package in harness.CHECK_MODULES.items():
        assert package.lower() in installed, f"requirements-check.txt does not install {package} ({module})"


def test_a_missing_package_stops_the_check_with_the_file_to_install(monkeypatch):
    harness = _harness()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "websockets" else real(name, *a))
    with pytest.raises(harness.HarnessError, match=r"lacks websockets.*pip install -r requirements-check\.txt"):
        harness.require_check_packages()
    monkeypatch.setattr(importlib.util, "find_spec", real)
    harness.require_check_packages(("json",))   # present: nothing raised
