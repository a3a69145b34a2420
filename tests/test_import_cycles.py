"""The core's modules import one another without cycles, counting imports inside functions
(scripts/dev/import_cycles.py): a function-level import hides a cycle from Python, not from a reader.
The same holds one level up: the folders of respec/ (and its top-level modules) import in one direction."""
from __future__ import annotations

from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    return load_script("scripts/dev/import_cycles.py")


def _cycles():
    mod = _tool()
    g, _ = mod.graph(ROOT / "respec")
    return {tuple(c) for c in mod.cycles(g)}


def _folder_cycles(package_dir: Path):
    mod = _tool()
    g, _ = mod.graph(package_dir)
    return {tuple(c) for c in mod.cycles(mod.folder_graph(g, package_dir.name))}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


# A package whose folders a and b need each other only through a function-level import, and
# whose modules never form a cycle (a.x -> b.y, b.z -> a.w): a module-level check passes it.
_LOOP = {
    "pkg/__init__.py": "",
    "pkg/a/__init__.py": "",
    "pkg/a/x.py": "from pkg.b import y\n",
    "pkg/a/w.py": "VALUE = 1\n",
    "pkg/b/__init__.py": "",
    "pkg/b/y.py": "VALUE = 2\n",
    "pkg/b/z.py": "def late():\n    from ..a import w\n    return w.VALUE\n",
    "pkg/top.py": "from pkg.a import x\n",
}


def test_a_folder_loop_made_by_a_function_level_import_is_found(tmp_path):
    package_dir = _write(tmp_path, _LOOP)
    mod = _tool()
    g, _ = mod.graph(package_dir)
    assert mod.cycles(g) == []  # no module cycle: only the folders loop
    assert _folder_cycles(package_dir) == {("pkg.a", "pkg.b")}
    fg = mod.folder_graph(g, "pkg")
    assert fg["pkg.b"]["pkg.a"] == [("pkg.b.z", "pkg.a.w", 2)]  # the edge names the module and line that make it
    assert "pkg.a" in fg["pkg.top"] and fg["pkg.a"].get("pkg.top") is None  # a top-level module is its own node
    assert mod.main([str(package_dir), "--folders"]) == 1


def test_a_one_direction_layout_has_no_folder_cycle(tmp_path):
    files = dict(_LOOP)
    files["pkg/b/z.py"] = "def late():\n    from . import y\n    return y.VALUE\n"  # b stays inside b
    package_dir = _write(tmp_path, files)
    assert _folder_cycles(package_dir) == set()
    assert _tool().main([str(package_dir), "--folders"]) == 0


def test_the_core_has_no_import_cycle():
    assert _cycles() == set()


def test_the_core_has_no_folder_cycle():
    """No two folders of respec/ (or top-level modules) need each other, function-level imports counted."""
    assert _folder_cycles(ROOT / "respec") == set()


def test_the_evaluation_stage_the_models_and_the_tiny_models_import_in_one_direction():
    """respec/eval -> respec/models -> respec/tiny, and respec/tiny imports no loader and nothing of
    respec/eval (the ultralytics scope both use is the top-level respec/ultralytics_scope.py)."""
    assert not any(m.startswith(("respec.eval", "respec.tiny", "respec.models")) for c in _cycles() for m in c)
    mod = _tool()
    g, _ = mod.graph(ROOT / "respec")
    fg = mod.folder_graph(g, "respec")
    assert "respec.models" in fg["respec.eval"] and "respec.tiny" in fg["respec.models"]
    assert not {"respec.eval", "respec.models"} & set(fg["respec.tiny"]), fg["respec.tiny"]


def test_the_simulated_world_and_the_benchmark_both_stand_on_the_occur_data_model():
    """respec/occur (the scenario format and geometry) is the floor: respec/sim and respec/bench
    stand on it and it imports neither. The sim imports nothing of the benchmark; of the benchmark
    only its adapter to the sim (bench/sim_models.py, the sim world's loader the runner gets from
    its caller) reaches into respec/sim, and the runner finds the sim's measurements through the
    SimEditor's hooks."""
    mod = _tool()
    g, _ = mod.graph(ROOT / "respec")
    fg = mod.folder_graph(g, "respec")
    assert "respec.bench" not in fg["respec.sim"], fg["respec.sim"].get("respec.bench")
    assert "respec.occur" in fg["respec.sim"] and "respec.occur" in fg["respec.bench"]
    assert not {"respec.sim", "respec.bench"} & set(fg["respec.occur"]), fg["respec.occur"]
    assert {src for src, _, _ in fg["respec.bench"].get("respec.sim", [])} <= {"respec.bench.sim_models"}
