"""Every stage's loader takes a model source, "tiny" / "tiny:<seed>" among files, folders and hub
ids: the controller, the editors, the masker and the scorer build their tiny random-weight model
when asked, and the benchmark runner asks each stage instead of building models itself."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from respec import models
from respec.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("source,seed", [("tiny", 0), ("TINY:3", 3), (" tiny:12 ", 12), ("Qwen/Qwen3-VL-8B", None),
                                         ("/models/tiny", None), (None, None)])
def test_the_tiny_source_is_read_with_its_seed(source, seed):
    assert models.tiny_seed(source) == seed


def test_a_tiny_source_with_a_bad_seed_says_how_to_write_it():
    with pytest.raises(InputError, match="tiny:<seed>"):
        models.tiny_seed("tiny:abc")


@pytest.mark.slow
def test_the_controller_builds_its_tiny_model_once_and_loads_it_like_any_folder(tmp_path, monkeypatch):
    from respec.controller import load_backend
    backend = load_backend("qwen3-vl", "tiny:1", max_new_tokens=4)
    folder = tmp_path / "respec_home" / "tiny" / "qwen3vl-seed1"
    assert (folder / "config.json").is_file() and backend is load_backend("qwen3-vl", "tiny:1", max_new_tokens=4)
    assert isinstance(backend.chat(["hello"], max_new_tokens=4), str)
    with pytest.raises(InputError, match="no tiny 'openai'"):
        load_backend("openai", "tiny", base_url="http://127.0.0.1:9/v1")


@pytest.mark.slow
def test_the_editors_masker_and_scorer_give_their_tiny_models_for_the_tiny_source():
    from respec.editors import load_editor
    from respec.eval.masks import DetectSettings, load_masker
    from respec.eval.metric_models import load_scorer
    editor = load_editor("flux2", "tiny:0")
    assert editor.name == "flux2-klein-tiny" and editor is load_editor("flux2", "tiny")
    masker, scorer = load_masker(source="tiny", detect=DetectSettings(imgsz=96)), load_scorer(source="tiny")
    assert masker.imgsz == 96 and masker.clip_model is scorer.clip_model      # one tiny CLIP, shared
    img = np.full((64, 64, 3), 128, np.uint8)
    assert scorer.region_score(img, img, None).psnr_norm == 1.0      # a working scorer: identical images
    with pytest.raises(InputError, match="no tiny OmniGen2"):
        load_editor("omnigen2", "tiny")


def test_the_runner_asks_the_stages_and_never_imports_the_tiny_models():
    for path in ("respec/bench/runner.py", "respec/bench/sim_models.py"):
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any("tiny" in m for m in imported), (path, imported)


def _core_modules():
    for path in sorted((ROOT / "respec").rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_the_loaders_reach_the_tiny_models_only_through_the_one_registry():
    """respec.models.build_tiny (respec/tiny's TINY_BUILDERS) is the one way in: no core module
    outside respec/tiny imports a tiny module, but respec/models.py."""
    importers = set()
    for path, tree in _core_modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("respec/tiny/"):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and ("tiny" in (n.module or "").split(".")
                                                  or any(a.name == "tiny" for a in n.names)):
                importers.add(rel)
    assert importers == {"respec/models.py"}


def test_every_kind_without_a_tiny_model_says_why():
    with pytest.raises(InputError, match="no tiny OmniGen2"):
        models.tiny_seed("tiny", "omnigen2")
    with pytest.raises(InputError, match="no tiny 'openai'"):
        models.tiny_seed("tiny:2", "openai")
    with pytest.raises(InputError, match="tiny models: .*flux2"):
        models.build_tiny("no-such-kind", 0)
    assert models.tiny_seed("some/model", "omnigen2") is None      # not a tiny source: nothing to refuse


def test_only_the_resolver_refuses_a_download():
    """"Download only when allowed" is written once: respec.models.resolve raises the refusal."""
    raisers = set()
    for path, tree in _core_modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call) and \
                    getattr(n.exc.func, "id", getattr(n.exc.func, "attr", "")) == "DownloadNotAllowedError":
                raisers.add(path.relative_to(ROOT).as_posix())
    assert raisers == {"respec/models.py"}
