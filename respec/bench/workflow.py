"""The shipped benchmark workflows, filled in for one scenario and one configuration.

An API-format workflow ({node id: {"class_type", "inputs"}}) is read (load_api_workflow), and a
copy is set up for a scenario: the Scenario Loader's dataset and index, each turn slot's
editor seed (and the seed its History Append records), the config's switches (paper table 2)
and any widget overrides (fill_workflow; scenario_prompt does all of it for a benchmark run).
The Results Writer node reports its row in the prompt's /history outputs (rows_from_history).
Queueing the prompts to servers is respec/bench/remote.py.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from ..occur.scenario import Dataset, packaged_datasets
from .configs import CONFIGS, turn_seed

# Node classes and input names the filler looks for in a benchmark workflow.
SCENARIO_LOADER = "ReSpecScenarioLoader"
SCENARIO_TURN = "ReSpecScenarioTurn"
HISTORY_APPEND = "ReSpecHistoryAppend"
RESULTS_WRITER = "ReSpecResultsWriter"
DATASET_INPUT = "dataset"
INDEX_INPUT = "index"
SEED_INPUTS = ("seed", "noise_seed")
# The key under which the results writer's UI output carries its row(s) in /history outputs.
ROW_UI_KEY = "respec_results"

WORKFLOW_DIR = Path(__file__).resolve().parents[2] / "workflows" / "api"
# key -> {"title", "ui", "api"}: the shipped graphs, written by scripts/workflows/build_workflows.py.
# The files are named by their titles (what ComfyUI's template browser shows); a key is the name the
# graph's files had before (e.g. "benchmark_native_flux2"), so code and old commands keep one name.
WORKFLOW_INDEX = WORKFLOW_DIR / "index.json"


def shipped_workflows() -> dict[str, dict]:
    """The shipped graphs by key: {"title", "ui", "api"} (file names inside workflows/ and workflows/api/)."""
    return json.loads(WORKFLOW_INDEX.read_text(encoding="utf-8"))["workflows"]


def shipped_workflow(key: str) -> Path:
    """The API file of the shipped graph `key` (e.g. "benchmark_native_flux2")."""
    index = shipped_workflows()
    if key not in index:
        raise InputError(f"no shipped workflow {key!r}; the shipped ones are: {', '.join(sorted(index))}")
    return WORKFLOW_DIR / index[key]["api"]


def _missing_workflow(path: Path) -> InputError:
    """The error for a workflow path that is not a file; names the new file of a renamed one."""
    key = path.name.removesuffix(".api.json").removesuffix(".json")
    renamed = shipped_workflows().get(key)
    if renamed:
        return InputError(f"workflow file {path.name} was renamed to \"{renamed['api']}\" (in the pack's "
                          f"workflows/api/ folder); or pass its key, {key}, as the workflow")
    return InputError(f"workflow file {path} does not exist; use one of the *.api.json files in the pack's "
                      f"workflows/api/ folder, or a key of workflows/api/index.json")


def load_api_workflow(workflow: str | Path | dict) -> dict:
    """An API-format workflow ({id: {"class_type", "inputs"}}) from a path, a shipped graph's key
    (e.g. "benchmark_native_flux2") or a dict (copied)."""
    if isinstance(workflow, dict):
        wf = copy.deepcopy(workflow)
        where = "the workflow given"
    else:
        path = Path(workflow)
        if not path.is_file() and isinstance(workflow, str) and workflow in shipped_workflows():
            path = shipped_workflow(workflow)
        if not path.is_file():
            raise _missing_workflow(path)
        try:
            wf = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(f"workflow file {path} is not valid JSON: {e}") from e
        where = str(path)
    if "nodes" in wf and "links" in wf:
        raise InputError(f"{where} is a UI-format workflow; /prompt needs the API format "
                         f"(the matching workflows/api/<title>.api.json file, or ComfyUI's 'Export (API)')")
    if not wf or not all(isinstance(v, dict) and "class_type" in v and "inputs" in v for v in wf.values()):
        raise InputError(f"{where} is not an API-format workflow: expected "
                         '{"<node id>": {"class_type": ..., "inputs": {...}}, ...}')
    return wf


def _is_link(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int))


def slot_turns(wf: dict) -> dict[str, int]:
    """For every node: the highest turn slot t among the Scenario Turn nodes it depends on
    (a node of slot t depends on the turn nodes 1..t, through the history chain)."""
    memo: dict[str, int] = {}

    def turn_of(node_id: str, seen: frozenset = frozenset()) -> int:
        if node_id in memo:
            return memo[node_id]
        node = wf.get(node_id)
        if node is None or node_id in seen:
            return 0
        best = 0
        if node["class_type"] == SCENARIO_TURN and isinstance(node["inputs"].get("turn"), int):
            best = node["inputs"]["turn"]
        for v in node["inputs"].values():
            if _is_link(v):
                best = max(best, turn_of(v[0], seen | {node_id}))
        memo[node_id] = best
        return best

    slots = {nid: turn_of(nid) for nid in wf}
    # A node with no turn upstream (a RandomNoise seed, a text encode of a fixed string) belongs
    # to the slot of its consumers when they all sit in one slot.
    consumers: dict[str, set[int]] = {}
    for nid, node in wf.items():
        for v in node["inputs"].values():
            if _is_link(v):
                consumers.setdefault(v[0], set()).add(slots[nid])
    for nid, slot in slots.items():
        used_by = consumers.get(nid, set())
        if slot == 0 and len(used_by) == 1 and min(used_by) > 0:
            slots[nid] = min(used_by)
    return slots


def set_input(wf: dict, node_id: str, name: str, value: Any) -> bool:
    """Set a widget input; when it is fed by a Primitive node, set that node's value instead."""
    node = wf[node_id]
    current = node["inputs"].get(name)
    if _is_link(current):
        src = wf.get(current[0])
        if src is not None and src["class_type"].startswith("Primitive") and "value" in src["inputs"] \
                and not _is_link(src["inputs"]["value"]):
            src["inputs"]["value"] = value
            return True
        return False
    node["inputs"][name] = value
    return True


def fill_workflow(workflow: dict, *, dataset: str, index: int, seed: int | None = None,
                  turn_seed: Callable[[int], int] | None = None,
                  config: dict[str, Any] | None = None, strict: bool = True) -> dict:
    """A copy of `workflow` set up for scenario `index` of `dataset`.

    The Scenario Loader's dataset/index widgets are set. Seed widgets get `turn_seed(t)` in turn
    slot t (and that slot's History Append records it in its meta), or `seed` everywhere.
    Each `config` entry sets a widget value: `"input"` on every node that has that input,
    `"ClassType.input"` only on nodes of that class, `"<node id>.input"` on one node; an input
    fed by a Primitive node sets the primitive. With `strict`, a config key that matches no
    widget is an error (a typo would silently run the wrong experiment otherwise); keys that
    end in `?` are optional either way.
    """
    wf = copy.deepcopy(workflow)
    loaders = [n for n in wf.values() if n["class_type"] == SCENARIO_LOADER]
    if not loaders:
        raise InputError(f"the workflow has no {SCENARIO_LOADER} node: use a benchmark workflow "
                         f"(workflows/api/ReSpec eval - *.api.json or ReSpec paper - *.api.json)")
    for node in loaders:
        node["inputs"][DATASET_INPUT] = str(dataset)
        node["inputs"][INDEX_INPUT] = int(index)
    if seed is not None or turn_seed is not None:
        slots = slot_turns(wf) if turn_seed is not None else {}
        for node_id, node in wf.items():
            t = slots.get(node_id, 0)
            value = turn_seed(t) if (turn_seed is not None and t) else seed
            if value is None:
                continue
            for name in SEED_INPUTS:
                if name in node["inputs"]:
                    set_input(wf, node_id, name, int(value))
            if node["class_type"] == HISTORY_APPEND and t and isinstance(node["inputs"].get("meta"), str):
                try:
                    meta = json.loads(node["inputs"]["meta"] or "{}")
                except json.JSONDecodeError:
                    meta = None
                if isinstance(meta, dict):
                    node["inputs"]["meta"] = json.dumps({**meta, "seed": int(value)})
    for key, value in (config or {}).items():
        optional = key.endswith("?")
        scope, _, name = key.rstrip("?").rpartition(".")
        hits = 0
        for node_id, node in wf.items():
            if scope and scope not in (node_id, node["class_type"]):
                continue
            if name in node["inputs"] and set_input(wf, node_id, name, value):
                hits += 1
        if not hits and strict and not optional:
            known = sorted({k for n in wf.values() for k, v in n["inputs"].items() if not _is_link(v)})
            raise InputError(f"config key {key!r} matches no widget input in the workflow; "
                             f"widget inputs are: {', '.join(known)}")
    return wf


def rows_from_history(entry: dict, prompt: dict) -> list[dict]:
    """The results rows the workflow's results-writer node(s) reported in a /history entry."""
    outputs = entry.get("outputs") or {}
    rows: list[dict] = []
    for node_id, node in prompt.items():
        if node["class_type"] != RESULTS_WRITER:
            continue
        for item in (outputs.get(node_id) or {}).get(ROW_UI_KEY) or []:
            rows.append(json.loads(item) if isinstance(item, str) else dict(item))
    return rows


ROUTES = ("native", "diffusers")


def default_workflow(config: str, editor: str, route: str = "native") -> Path:
    """The shipped API workflow for a config and route: "native" runs ComfyUI's own loaders and
    sampler (benchmark_native_*), "diffusers" the pack's paper-exact editors (benchmark_*). The
    baseline graphs have no controller at all."""
    if route not in ROUTES:
        raise InputError(f"unknown route {route!r}; use one of {', '.join(ROUTES)}")
    prefix = "benchmark_native_" if route == "native" else "benchmark_"
    return shipped_workflow(f"{prefix}baseline_{editor}" if config == "baseline" else f"{prefix}{editor}")


def row_editor(editor: str, route: str = "native") -> str:
    """The editor label of a row: the native route's rows are "<editor>-native" (another model
    stack than the paper's diffusers pipelines, so their rows never mix)."""
    return f"{editor}-native" if route == "native" else editor


def config_switches(config: str, editor: str) -> dict[str, Any]:
    """Widget values that make a benchmark workflow run `config` (paper table 2) and label its row
    with `editor` (the row label, see row_editor)."""
    c = CONFIGS[config]
    if c.selector != "vlm":
        raise InputError(f"config {config!r} (provenance selector) runs in-process only for now: the shipped "
                         "benchmark workflows have no switch for it; run it without --server")
    out: dict[str, Any] = {f"{RESULTS_WRITER}.config": c.name, f"{RESULTS_WRITER}.editor": editor}
    # Reveal Composite / Drift Guard: a graph that runs them (benchmark_native_qwen_image_edit_2511) has a
    # switch for each; a config that asks for one needs it there (a graph without fails, naming the
    # key), one that does not switches it off wherever it is.
    out[f"ReSpecRevealComposite.enabled{'' if c.reveal else '?'}"] = c.reveal
    out[f"ReSpecDriftGuard.enabled{'' if c.guard else '?'}"] = c.guard
    if c.switches.use_controller:
        out.update({"use_pti": c.switches.use_pti, "use_history_reference": c.switches.use_hrs,
                    "skip_non_restoration": c.switches.skip_non_restoration})
    else:
        # A custom single workflow may still hold the ReSpec nodes: switch both parts off.
        out.update({"use_pti?": False, "use_history_reference?": False, "skip_non_restoration?": True})
    return out


def dataset_reference(path: str | Path) -> str:
    """What the server's Scenario Loader is told: a packaged set by name (the server has its own
    copy of the pack), any other file by its absolute path (the server must see that path)."""
    p = Path(path).resolve()
    for name, packaged in packaged_datasets().items():
        if packaged.resolve() == p:
            return name
    return str(p)


def scenario_prompt(template: dict, dataset: Dataset, scenario_id: str, config: str, editor: str, *,
                    seed: int = 0, size: int | None = None, steps: int | None = None,
                    overrides: dict[str, Any] | None = None, strict: bool = True) -> dict:
    """`template` filled in to run one scenario of `dataset` under `config`, its row labelled
    `editor` (see row_editor): the config's switches, the in-process runner's per-turn seeds
    (turn_seed), I_0's longer side (`size`), the editor's `steps`, then `overrides` (widget
    values, as in fill_workflow)."""
    index = next((i for i, s in enumerate(dataset) if s.id == scenario_id), None)
    if index is None:
        raise InputError(f"{dataset.path}: no scenario with id {scenario_id!r}")
    values = dict(config_switches(config, editor))
    if size is not None:
        values[f"{SCENARIO_LOADER}.max_side"] = int(size)
    if steps is not None:
        values["steps"] = int(steps)
    values.update(overrides or {})
    return fill_workflow(template, dataset=dataset_reference(dataset.path), index=index,
                         turn_seed=lambda t: turn_seed(seed, scenario_id, t), config=values, strict=strict)
