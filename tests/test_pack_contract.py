"""The pack loads the way ComfyUI loads it, and every node keeps the V1 node contract."""
from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN"}


def test_pack_imports_as_a_hyphenated_package_without_touching_sys_path():
    """ComfyUI imports the folder as a package named after it; nothing may leak to top level."""
    code = f"""
import importlib.util, json, sys
before_path = list(sys.path)
before_mods = set(sys.modules)
name = "ReSpec-ComfyUI-{'x' * 3}"
spec = importlib.util.spec_from_file_location(name, {str(ROOT / '__init__.py')!r},
                                              submodule_search_locations=[{str(ROOT)!r}])
m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
new_top = sorted(k for k in set(sys.modules) - before_mods if k in ("nodes", "respec") or k.startswith(("nodes.", "respec.")))
print(json.dumps({{"nodes": sorted(m.NODE_CLASS_MAPPINGS), "web": m.WEB_DIRECTORY,
                  "path_changed": sys.path != before_path, "leaked": new_top,
                  "display": sorted(m.NODE_DISPLAY_NAME_MAPPINGS)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["path_changed"] is False
    assert info["leaked"] == [], "a top-level 'nodes'/'respec' module would shadow ComfyUI's own"
    assert info["web"] == "./js"
    assert info["nodes"] and info["nodes"] == info["display"]


def test_core_never_imports_comfyui():
    """Only respec/comfy.py may reach ComfyUI; the rest of the core runs without it."""
    pattern = re.compile(r"^\s*(import|from)\s+(comfy|comfy_extras|comfy_execution|folder_paths|server|execution|node_helpers)\b", re.M)
    offenders = []
    for path in (ROOT / "respec").rglob("*.py"):
        if path.name == "comfy.py" and path.parent.name == "respec":
            continue
        if pattern.search(path.read_text(encoding="utf-8")):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_nodes_use_relative_imports_only():
    """A top-level import of `respec` or `nodes` from the adapters would break inside ComfyUI."""
    pattern = re.compile(r"^\s*(import|from)\s+(respec|nodes)\b", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "nodes").rglob("*.py") if pattern.search(p.read_text())]
    offenders += [str(p.relative_to(ROOT)) for p in (ROOT / "respec").rglob("*.py")
                  if re.search(r"^\s*(import|from)\s+(respec|nodes)\b", p.read_text(), re.M)]
    assert offenders == []


def _node_items():
    from conftest import load_pack
    pack = load_pack()
    return sorted(pack.NODE_CLASS_MAPPINGS.items())


def _inputs(cls) -> dict:
    spec = cls.INPUT_TYPES()
    assert isinstance(spec, dict) and "required" in spec, f"{cls.__name__}.INPUT_TYPES needs a 'required' dict"
    assert set(spec) <= {"required", "optional", "hidden"}, f"{cls.__name__}: unknown INPUT_TYPES sections {set(spec)}"
    return spec


def pytest_generate_tests(metafunc):
    if "node" in metafunc.fixturenames:
        items = _node_items()
        metafunc.parametrize("node", items, ids=[name for name, _ in items])


def test_node_declares_the_v1_contract(node):
    name, cls = node
    assert isinstance(getattr(cls, "CATEGORY", None), str) and cls.CATEGORY.startswith("ReSpec"), name
    assert isinstance(getattr(cls, "DESCRIPTION", None), str) and cls.DESCRIPTION.strip(), f"{name} needs a DESCRIPTION"
    assert isinstance(cls.RETURN_TYPES, tuple), f"{name}.RETURN_TYPES must be a tuple"
    for t in cls.RETURN_TYPES:
        assert isinstance(t, (str, list)), f"{name}: return type {t!r}"
    if hasattr(cls, "RETURN_NAMES"):
        assert len(cls.RETURN_NAMES) == len(cls.RETURN_TYPES), f"{name}: RETURN_NAMES and RETURN_TYPES differ in length"
    if hasattr(cls, "OUTPUT_TOOLTIPS"):
        assert len(cls.OUTPUT_TOOLTIPS) == len(cls.RETURN_TYPES)
    if not cls.RETURN_TYPES:
        assert getattr(cls, "OUTPUT_NODE", False), f"{name} returns nothing, so it must be an OUTPUT_NODE"


def test_every_input_is_well_formed_and_has_a_tooltip(node):
    name, cls = node
    spec = _inputs(cls)
    for section in ("required", "optional"):
        for inp, decl in spec.get(section, {}).items():
            assert isinstance(decl, tuple) and 1 <= len(decl) <= 2, f"{name}.{inp}: spec must be (type,) or (type, options)"
            typ = decl[0]
            opts = decl[1] if len(decl) == 2 else {}
            assert isinstance(typ, (str, list)), f"{name}.{inp}: type {typ!r}"
            assert isinstance(opts, dict), f"{name}.{inp}: options must be a dict"
            assert isinstance(opts.get("tooltip"), str) and opts["tooltip"].strip(), f"{name}.{inp} has no tooltip"
            if typ in ("INT", "FLOAT"):
                assert "default" in opts and "min" in opts and "max" in opts, f"{name}.{inp}: numeric widgets need default/min/max"
                assert opts["min"] <= opts["default"] <= opts["max"], f"{name}.{inp}: default outside [min, max]"
            if typ == "BOOLEAN":
                assert isinstance(opts.get("default"), bool), f"{name}.{inp}: BOOLEAN needs a bool default"
            choices = opts.get("options") if typ == "COMBO" else typ   # V3 lists a drop-down's choices in options
            if isinstance(choices, list) and choices and "default" in opts:
                assert opts["default"] in choices, f"{name}.{inp}: default not among the choices"


def _is_v3(cls) -> bool:
    return hasattr(cls, "define_schema")


def _sections(cls) -> tuple[str, ...]:
    # ComfyUI passes a V1 node its hidden values as arguments; a V3 node reads them from cls.hidden.
    return ("required", "optional") if _is_v3(cls) else ("required", "optional", "hidden")


def test_function_takes_exactly_the_declared_inputs(node):
    name, cls = node
    spec = _inputs(cls)
    declared = set()
    for section in _sections(cls):
        declared |= set(spec.get(section, {}))
    fn = cls.execute if _is_v3(cls) else getattr(cls, cls.FUNCTION, None)
    assert callable(fn), f"{name}.FUNCTION names {cls.FUNCTION!r}, which is not a method"
    params = inspect.signature(fn).parameters
    kinds = {p.kind for p in params.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds, \
        f"{name}.{cls.FUNCTION} must name its inputs, not take *args/**kwargs"
    accepted = {p for p in params if p != "self"}
    assert accepted == declared, f"{name}: FUNCTION params {sorted(accepted)} != inputs {sorted(declared)}"
    required = {p for p, v in params.items() if p != "self" and v.default is inspect.Parameter.empty}
    assert required <= set(spec["required"]), f"{name}: optional/hidden inputs must have defaults in the signature"


def test_is_changed_and_validate_inputs_accept_what_comfyui_passes(node):
    name, cls = node
    spec = _inputs(cls)
    declared = set().union(*(spec.get(section, {}) for section in _sections(cls)))
    hooks = ("fingerprint_inputs", "validate_inputs", "check_lazy_status") if _is_v3(cls) else ("IS_CHANGED", "VALIDATE_INPUTS")
    for hook in hooks:
        if _is_v3(cls) and hook not in vars(cls):
            continue   # the base class's own, which ComfyUI does not call
        fn = getattr(cls, hook, None)
        if fn is None:
            continue
        assert isinstance(inspect.getattr_static(cls, hook), classmethod), f"{name}.{hook} must be a classmethod"
        params = inspect.signature(fn).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            continue
        assert set(params) <= declared | {"input_types"}, f"{name}.{hook} names unknown inputs {set(params) - declared}"


@pytest.mark.slow
def test_importing_the_pack_and_running_a_mask_leaves_os_environ_unchanged(tmp_path):
    """No process-wide environment change: not at import, not after the pack has used ultralytics
    (imported and called by the pack). segment_anything and open_clip set TORCHINDUCTOR_CACHE_DIR /
    TOKENIZERS_PARALLELISM when imported, as they do in any process: imported before the snapshot."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("YOLO_", "ULTRALYTICS_"))}
    env.update(RESPEC_HOME=str(tmp_path / "home"), YOLO_CONFIG_DIR=str(tmp_path / "yolo"))
    code = f"""
import importlib.util, json, os, sys
import segment_anything, open_clip
before = dict(os.environ)
name = "ReSpec-ComfyUI-env"
spec = importlib.util.spec_from_file_location(name, {str(ROOT / '__init__.py')!r},
                                              submodule_search_locations=[{str(ROOT)!r}])
m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
after_import = dict(os.environ)
import numpy as np
tiny = importlib.import_module(name + ".respec.tiny.eval_models")
masks = importlib.import_module(name + ".respec.eval.masks")
masker = masks.Masker(tiny.build_tiny_yolo_world(), tiny.build_tiny_sam(0), tiny.build_tiny_clip(0), device="cpu")
masker.mask(np.zeros((64, 64, 3), np.uint8), "flowers")
after_use = dict(os.environ)
diff = lambda a, b: sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
print(json.dumps({{"import": diff(before, after_import), "use": diff(before, after_use)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"import": [], "use": []}


EVAL_NODES = {"ReSpecMaskerLoader", "ReSpecOccluderMask", "ReSpecTrajectoryMasks", "ReSpecScorerLoader",
              "ReSpecOccurScore", "ReSpecScenarioMasks"}


def test_without_the_eval_extra_the_pack_loads_without_its_nodes_and_says_so_once():
    """ultralytics, segment_anything, lpips and open_clip made unimportable: the editing and controller
    nodes register, the evaluation nodes do not, and one log line names the extra."""
    code = f"""
import importlib.abc, importlib.util, json, logging, sys
BLOCKED = ("ultralytics", "segment_anything", "lpips", "open_clip")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
lines = []
class Catch(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("respec").addHandler(Catch())
name = "ReSpec-ComfyUI-core-only"
spec = importlib.util.spec_from_file_location(name, {str(ROOT / '__init__.py')!r},
                                              submodule_search_locations=[{str(ROOT)!r}])
m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
print(json.dumps({{"nodes": sorted(m.NODE_CLASS_MAPPINGS), "display": sorted(m.NODE_DISPLAY_NAME_MAPPINGS),
                  "log": lines, "imported": sorted(k for k in sys.modules if k.split(".")[0] in BLOCKED)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    full = set(_pack_nodes())
    assert set(got["nodes"]) == full - EVAL_NODES and got["display"] == got["nodes"]
    assert {"ReSpecHistoryStore", "ReSpecPreservationTarget", "ReSpecFlux2Edit", "ReSpecResultsWriter"} <= set(got["nodes"])
    assert len(got["log"]) == 1 and "requirements-eval.txt" in got["log"][0] and "[eval]" in got["log"][0]
    assert got["imported"] == []


def _pack_nodes():
    from conftest import load_pack
    return load_pack().NODE_CLASS_MAPPINGS


def test_with_the_eval_extra_every_node_registers():
    assert EVAL_NODES <= set(_pack_nodes())


def test_the_ci_floor_versions_are_the_floors_requirements_txt_declares():
    floors = dict(re.findall(r"^(transformers|diffusers)>=([\d.]+)\s*$", (ROOT / "requirements.txt").read_text(), re.M))
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([\d.]+)\s*$", (ROOT / ".ci/requirements-floor.txt").read_text(), re.M))
    assert floors and {k: pins.get(k) for k in floors} == floors


def test_pyproject_reads_its_dependencies_and_the_eval_extra_from_the_requirements_files():
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(meta["project"]["dynamic"]) == {"dependencies", "optional-dependencies"}
    dyn = meta["tool"]["setuptools"]["dynamic"]
    assert dyn["dependencies"] == {"file": ["requirements.txt"]}
    assert dyn["optional-dependencies"]["eval"] == {"file": ["requirements-eval.txt"]}
    core = {re.split(r"[<>=!~ ]", ln.strip())[0].lower() for ln in (ROOT / "requirements.txt").read_text().splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")}
    assert "transformers" in core and "diffusers" in core
    assert not core & {"ultralytics", "segment-anything", "lpips", "open_clip_torch", "scikit-image", "matplotlib"}
    assert meta["tool"]["comfy"]["requires-comfyui"]


def test_every_display_name_ends_in_respec_and_search_aliases_are_plain_words(pack):
    for name, shown in pack.NODE_DISPLAY_NAME_MAPPINGS.items():
        assert shown.endswith(" (ReSpec)") and shown.count("(") == 1, (name, shown)
    aliases_of = {n: (c.define_schema().search_aliases if _is_v3(c) else getattr(c, "SEARCH_ALIASES", None))
                  for n, c in pack.NODE_CLASS_MAPPINGS.items()}
    with_aliases = {n: a for n, a in aliases_of.items() if a}
    assert {"ReSpecHistoryStore", "ReSpecPreservationTarget", "ReSpecOccluderMask"} <= set(with_aliases)
    for name, aliases in with_aliases.items():
        assert isinstance(aliases, list) and all(isinstance(a, str) and a == a.lower() and a for a in aliases), name
    everything = {a for al in with_aliases.values() for a in al}
    assert {"undo", "occlusion", "restore", "reveal", "yolo", "sam"} <= everything


def test_the_registry_publish_workflow_publishes_this_publishers_pack():
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    flow = (ROOT / ".github/workflows/publish.yml").read_text()
    assert "Comfy-Org/publish-node-action@" in flow and "secrets.REGISTRY_ACCESS_TOKEN" in flow
    assert "pyproject.toml" in flow and meta["tool"]["comfy"]["PublisherId"] in flow
    assert meta["project"]["name"] and re.fullmatch(r"\d+\.\d+\.\d+", meta["project"]["version"])


# Every free-text (STRING widget) input, by what it may name. A new one fails the test below until it
# is classified here: a workflow value must never name code, and a path must stay in its folder.
FREE_TEXT_INPUTS = {
    # confined to a registered folder (respec/paths.py), each refusal tested in its node's tests
    ("ReSpecHistoryStore", "store_dir"): "path: user/respec/sessions",
    ("ReSpecScenarioLoader", "dataset"): "path: input/respec_datasets (or a packaged set's name)",
    ("ReSpecResultsWriter", "results_file"): "path: output/respec",
    # model sources (paths.model_source, refusals in test_model_sources.py): a strict Hugging Face id,
    # or a model inside that kind's registered model folders; weights-only loaders, no remote code
    ("ReSpecVLMLoader", "hf_model"): "Hugging Face id or path: models/LLM",
    ("ReSpecFlux2Loader", "custom_model"): "Hugging Face id or path: models/diffusers",
    # not paths
    ("ReSpecHistoryStore", "session_id"): "id, validated",
    ("ReSpecHistoryStore", "new_session_id"): "id, validated",
    ("ReSpecOpenAIController", "base_url"): "URL: trusted input, pinned by RESPEC_OPENAI_BASE_URL",
    ("ReSpecOpenAIController", "model"): "served model name",
    ("ReSpecOpenAIController", "api_key_env"): "environment variable name",
    ("ReSpecOccluderMask", "label"): "detector query",
    ("ReSpecTrajectoryMasks", "occluder_label"): "detector query",
    ("ReSpecSam3Query", "label"): "detector query (SAM3's separators neutralised, respec/eval/sam3_masks.py)",
    ("ReSpecResultsWriter", "editor"): "label in the results",
}


def test_every_free_text_input_is_classified(pack):
    found = set()
    for name, cls in pack.NODE_CLASS_MAPPINGS.items():
        for section in ("required", "optional"):
            for key, spec in cls.INPUT_TYPES().get(section, {}).items():
                opts = spec[1] if len(spec) > 1 else {}
                if spec[0] == "STRING" and not opts.get("multiline") and not opts.get("forceInput"):
                    found.add((name, key))
    assert found == set(FREE_TEXT_INPUTS)
