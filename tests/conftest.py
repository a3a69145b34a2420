"""Shared fixtures. Tests run offline on the CPU with tiny random-weight models.

Core tests import `respec` directly (the repo root is on sys.path via pytest's pythonpath).
Node tests must use the `pack` fixture: the pack imported the way ComfyUI imports it (its folder
as a package under a hyphenated name), and `core(pack, "history")` for the matching core
modules, so that node inputs and outputs are the same classes the nodes use.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACK_NAME = "ReSpec-ComfyUI-under-test"

os.environ.setdefault("RESPEC_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")


def load_pack(name: str = PACK_NAME):
    """Import the repo folder as a package called `name`, without touching sys.path."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py",
                                                  submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_script(path: str, name: str | None = None):
    """A script of the repository (`path` relative to it, e.g. "scripts/bench/bench_gpu.py") as a
    module, loaded as when it runs: its folder on sys.path while it loads (for its sibling imports),
    and the module in sys.modules under `name` (default: the file's stem), where a dataclass looks
    its module up."""
    file = ROOT / path
    name = name or file.stem
    sys.path.insert(0, str(file.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(file.parent))


def core(pack, name: str):
    """The pack's own copy of a core module, e.g. core(pack, "history")."""
    return importlib.import_module(f"{pack.__name__}.respec.{name}")


@pytest.fixture(scope="session")
def pack():
    return load_pack()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own standalone home and models dir: no test sees the user's files."""
    monkeypatch.setenv("RESPEC_HOME", str(tmp_path / "respec_home"))
    monkeypatch.setenv("RESPEC_MODELS_DIR", str(tmp_path / "respec_home" / "models"))
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "yolo_cfg"))
    yield


def weights(*shape: int):
    """A module that only holds weights (ComfyUI's memory manager and the pack's cache need nothing
    more). Written with a Parameter, not a torch.nn layer: the frontend linter asks runtime code to
    build layers from ComfyUI's ops, and these tests run without ComfyUI."""
    import torch

    class Weights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(*shape))

    return Weights()

