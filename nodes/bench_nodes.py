"""OCCUR-Bench nodes: read a scenario, give each turn's instruction and flags, skip turn slots a
scenario does not have, mask a scenario's trajectory, and write a results row.
The work happens in respec/bench/ (scenario.py, runner.py, rows.py, results.py)."""
from __future__ import annotations

import hashlib
import json

import numpy as np

from ..respec import comfy
from ..respec.comfy import io, node_schema
from ..respec.bench.configs import CONFIGS
from ..respec.bench.results import open_results, results_path
from ..respec.bench.rows import graph_row
from ..respec.bench.runner import trajectory_masks
from ..respec.bench.workflow import ROW_UI_KEY
from ..respec.errors import InputError
from ..respec.images import resize_mask
from ..respec.occur.scenario import load_workflow_dataset, packaged_datasets, resolve_workflow_dataset
from ..respec.records import json_safe
from .boundary import history_in
from .common import History, MaskRecords, Masker, Scenario, images_to_comfy, labels_text, masks_to_comfy

CATEGORY = "ReSpec/benchmark"
MAX_TURNS = 64


def _scenario_input():
    return Scenario.Input(id="scenario", tooltip="From Scenario Loader.")


class ReSpecScenarioLoader(io.ComfyNode):
    """One OCCUR scenario of a dataset file (or a packaged sample set), by index."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecScenarioLoader", display_name="OCCUR Scenario Loader (ReSpec)", category=CATEGORY,
            description=("Reads one occlusion-and-revelation scenario: its source image, turns and annotations. "
                         "Set 'index' to control_after_generate 'increment' to step through a dataset one prompt "
                         "at a time. 'occur_sample' is the set shipped with the pack."),
            inputs=[
                io.String.Input(id="dataset", default="occur_sample", multiline=None, tooltip=(
                    "The name of a packaged set (" + ", ".join(packaged_datasets()) + "), or a scenario "
                    "JSON file in ComfyUI's input/respec_datasets folder (e.g. mine.json); its images "
                    "must be in that folder too. Paths outside it are refused.")),
                io.Int.Input(id="index", default=0, min=0, max=1_000_000, control_after_generate=True,
                             tooltip="Which scenario (0 = the first). Past the last one is an error."),
                io.Int.Input(id="max_side", default=1024, min=0, max=8192, step=16, tooltip=(
                    "Longer side of the source image in pixels (rounded to multiples of 16); 0 keeps "
                    "the photo's own size. The CLI's smoke run uses 96.")),
            ],
            outputs=[
                Scenario.Output(id="scenario", tooltip="The scenario, for Scenario Turn, Scenario Masks and "
                                                       "Results Writer."),
                io.Image.Output(id="source_image", tooltip="I_0, resized so its longer side is max_side "
                                                           "(multiples of 16)."),
                io.Int.Output(id="num_turns", tooltip="N, the number of edit turns."),
                io.String.Output(id="occluder", tooltip=(
                    "The occluder label (several joined by ', ' in multi-occluder scenarios: use "
                    "Scenario Trajectory Masks for those).")),
                io.Int.Output(id="reference_turn", tooltip="Ground-truth I_ref id (for OCCUR Score's "
                                                           "reference_turn and Reference Check)."),
                io.String.Output(id="new_object_labels", tooltip="New-object labels, one line per turn (the "
                                                                 "Trajectory Masks node's format)."),
                io.String.Output(id="scenario_json", tooltip="The whole scenario as JSON (with its derived facts)."),
            ])

    @classmethod
    def fingerprint_inputs(cls, dataset, index, max_side):
        try:
            digest = hashlib.sha256(resolve_workflow_dataset(dataset).read_bytes()).hexdigest()
        except (InputError, OSError):
            digest = "missing"
        return f"{digest}:{index}:{max_side}"

    @classmethod
    def execute(cls, dataset, index, max_side):
        ds = load_workflow_dataset(dataset)
        if not 0 <= index < len(ds):
            raise InputError(f"scenario index {index} is past the end of {ds.path} ({len(ds)} scenarios: "
                             f"0..{len(ds) - 1}); reset the index widget to 0")
        sc = ds[index]
        image = np.asarray(sc.load_image(max_side or None))
        info = {**sc.to_dict(), **sc.summary(), "index": index, "dataset_path": ds.path}
        return io.NodeOutput(sc, images_to_comfy([image]), sc.num_turns, ", ".join(sc.occluders),
                             sc.reference_turn, labels_text([t.new_objects for t in sc.turns]),
                             json.dumps(info, indent=1))


class ReSpecScenarioTurn(io.ComfyNode):
    """Turn t of a scenario: the user's instruction and its ground-truth flags."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecScenarioTurn", display_name="OCCUR Scenario Turn (ReSpec)", category=CATEGORY,
            description=("Gives turn t's instruction and flags. A benchmark graph has a fixed number of turn "
                         "slots; for a scenario with fewer turns the later slots report exists = False and a "
                         "Scenario Turn Switch passes the history through them unchanged."),
            inputs=[
                _scenario_input(),
                io.Int.Input(id="turn", default=1, min=1, max=MAX_TURNS,
                             tooltip="t, counted from 1 (turn t turns I_{t-1} into I_t)."),
            ],
            outputs=[
                io.String.Output(id="instruction", tooltip="P_t, the user's instruction ('' when the turn does "
                                                           "not exist)."),
                io.Boolean.Output(id="is_restoration", tooltip=(
                    "Ground truth: does this turn reveal the hidden content (stage R)? The paper's runner "
                    "gives the controller this flag.")),
                io.Boolean.Output(id="exists", tooltip=(
                    "False when the scenario has fewer turns than t: wire it to Scenario Turn Switch so the "
                    "turn's nodes are skipped.")),
                io.String.Output(id="new_objects", tooltip="Labels of the objects this turn introduces, "
                                                           "comma-separated ('' for none)."),
                io.String.Output(id="stage", tooltip="O (occlusion), M (intermediate), S (style), R (revelation); "
                                                     "'' when the turn does not exist."),
            ])

    @classmethod
    def execute(cls, scenario, turn):
        if not 1 <= turn <= scenario.num_turns:
            return io.NodeOutput("", False, False, "", "")
        st = scenario.turns[turn - 1]
        return io.NodeOutput(st.instruction, scenario.is_restoration(turn), True, ", ".join(st.new_objects),
                             st.stage)


class ReSpecTurnSwitch(io.ComfyNode):
    """Skip a turn slot the scenario does not have: its editing chain is never run."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecTurnSwitch", display_name="OCCUR Scenario Turn Switch (ReSpec)", category=CATEGORY,
            description=("Put at the end of each turn slot of a benchmark graph: when 'exists' is False the "
                         "slot's nodes (controller, selector, rewriter, editor, append) are not evaluated at "
                         "all, because history_after is a lazy input that is then never requested. Do not hang "
                         "output nodes (previews) on a slot's own chain, or ComfyUI will run it anyway."),
            inputs=[
                io.Boolean.Input(id="exists", default=True, force_input=True,
                                 tooltip="From Scenario Turn's 'exists'."),
                History.Input(id="history_before", tooltip="The history entering this turn slot."),
                History.Input(id="history_after", lazy=True, tooltip=(
                    "The history after this slot's History Append (evaluated only when the turn exists).")),
            ],
            outputs=[History.Output(id="history", tooltip="history_after when the turn exists, else "
                                                          "history_before unchanged.")])

    @classmethod
    def check_lazy_status(cls, exists, history_before, history_after=None):
        return ["history_after"] if exists and history_after is None else []

    @classmethod
    def execute(cls, exists, history_before, history_after=None):
        if not exists:
            return io.NodeOutput(history_before)
        if history_after is None:
            raise InputError("the turn exists but history_after was not computed; connect this slot's History Append")
        return io.NodeOutput(history_after)


class ReSpecScenarioMasks(io.ComfyNode):
    """Occluder and new-object masks of a scenario's generated turns 1..N (multi-occluder aware)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecScenarioMasks", display_name="OCCUR Scenario Trajectory Masks (ReSpec)",
            category=CATEGORY, search_aliases=["yolo", "sam", "occlusion", "benchmark"],
            description=("Trajectory Masks driven by the scenario: the occluder label(s) and each turn's new "
                         "objects come from the scenario file, and with several occluders each is detected on "
                         "its own and their masks are united (appendix A.5, B.1)."),
            inputs=[
                Masker.Input(id="masker", tooltip="From ReSpec Masker Loader."),
                History.Input(id="history", tooltip="The generated history of the scenario (turns 0..N)."),
                _scenario_input(),
            ],
            outputs=[
                MaskRecords.Output(id="masks", tooltip="Every turn's masks, for OCCUR Score."),
                io.Mask.Output(id="occluder_masks", tooltip="M_occ^t for t = 1..N (all occluders united; resized "
                                                            "to turn N's size)."),
                io.Mask.Output(id="new_object_masks", tooltip="M_new^t for t = 1..N (resized to turn N's size)."),
                io.String.Output(id="records", tooltip="JSON: per turn, every detection record."),
            ])

    @classmethod
    def execute(cls, masker, history, scenario):
        tm = trajectory_masks(masker, scenario, [t.image.rgb() for t in history_in(history).turns[1:]])
        shape = tm.occ[-1].shape
        return io.NodeOutput(tm, masks_to_comfy([resize_mask(m, shape) for m in tm.occ]),
                             masks_to_comfy([resize_mask(m, shape) for m in tm.new]),
                             json.dumps(tm.to_record(), indent=1))


def _json_arg(text: str, what: str):
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError) as e:
        raise InputError(f"{what} is not JSON ({e}); connect the 'record' output of the matching node") from None


class ReSpecResultsWriter(io.ComfyNode):
    """Append the scenario's results row (scores, reference chosen vs ground truth, VLM calls)."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecResultsWriter", display_name="OCCUR Results Writer (ReSpec)", category=CATEGORY,
            is_output_node=True,
            description=("Writes one results row per scenario x config x editor to a JSONL file in ComfyUI's "
                         "output folder (output/respec/<results_file>). A row already there is kept, not "
                         "duplicated. `python -m respec report <file>` turns the file into the paper's tables."),
            inputs=[
                _scenario_input(),
                History.Input(id="history", tooltip="The generated history (turns 0..N) with its plans."),
                io.String.Input(id="score_record", default="", force_input=True, multiline=None,
                                tooltip="The 'record' output of OCCUR Score."),
                io.Combo.Input(id="config", options=list(CONFIGS), default="respec", tooltip=(
                    "What this graph ran: baseline (no ReSpec), hrs, pti or respec (PTI + HRS).")),
                io.String.Input(id="editor", default="flux2", multiline=None,
                                tooltip="Editor name for the tables (flux2, omnigen2, or your own)."),
                io.String.Input(id="results_file", default="bench/results.jsonl", multiline=None,
                                tooltip="Relative path of the JSONL file inside output/respec/."),
                io.String.Input(id="judge_records", optional=True, default="", force_input=True, multiline=None,
                                tooltip=("Instruction Judge 'record' output(s): one JSON record, or a JSON list "
                                         "of per-turn records (S_IF is their mean).")),
            ],
            outputs=[io.String.Output(id="row_json", tooltip="The row written (or already present)."),
                     io.String.Output(id="results_file", tooltip="Where the results file is.")],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def execute(cls, scenario, history, score_record, config, editor, results_file, judge_records=""):
        path = results_path(results_file)
        judge = _json_arg(judge_records, "judge_records") if (judge_records or "").strip() else None
        row = graph_row(scenario, history_in(history), _json_arg(score_record, "score_record"), config=config, editor=editor,
                        judge_records=judge)
        written = open_results(path).append(row)
        row_json = json.dumps(json_safe({**row, "written": written}))
        comfy.send_event("bench.row", {"node": cls.hidden.unique_id, "key": row["key"], "written": written,
                                       "S_TC": row.get("S_TC"), "file": str(path)})
        return io.NodeOutput(row_json, str(path), ui={ROW_UI_KEY: [row_json]})


EVAL_NODES = {"ReSpecScenarioMasks"}  # needs the eval extra's YOLO-World + SAM (see nodes/__init__.py)
NODE_CLASS_MAPPINGS = {
    "ReSpecScenarioLoader": ReSpecScenarioLoader,
    "ReSpecScenarioTurn": ReSpecScenarioTurn,
    "ReSpecTurnSwitch": ReSpecTurnSwitch,
    "ReSpecScenarioMasks": ReSpecScenarioMasks,
    "ReSpecResultsWriter": ReSpecResultsWriter,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecScenarioLoader": "OCCUR Scenario Loader (ReSpec)",
    "ReSpecScenarioTurn": "OCCUR Scenario Turn (ReSpec)",
    "ReSpecTurnSwitch": "OCCUR Scenario Turn Switch (ReSpec)",
    "ReSpecScenarioMasks": "OCCUR Scenario Trajectory Masks (ReSpec)",
    "ReSpecResultsWriter": "OCCUR Results Writer (ReSpec)",
}
