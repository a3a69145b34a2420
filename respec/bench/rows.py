"""Results rows: one row per scenario x config x editor, the same for every way a scenario was
run (the in-process runner, or a ComfyUI graph through the Results Writer node).

A row is made from the generated history (each turn's meta holds what the turn recorded:
seed, stage, the editor's image ids, VLM calls, fallbacks, seconds), the OCCUR score and,
optionally, the S_IF judge records.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..history import History
from ..eval.metrics import reference_selection_correct
from ..occur.scenario import Scenario
from ..plan import Plan
from ..turn import EDITOR_IMAGE_IDS
from .configs import CONFIGS
from .results import row_key

ROW_SOURCE_COMFYUI = "comfyui"   # the `source` of a row written by the Results Writer node


def summarise_judgements(per_turn: list[dict], calls: int | None = None) -> dict:
    """S_IF (mean over the judged turns that parsed), S_IF_final, per-turn values and records."""
    vals = [sif_value(r) for r in per_turn]
    good = [v for v in vals if v is not None]
    return {"S_IF": sum(good) / len(good) if good else None, "S_IF_turns": vals,
            "S_IF_final": vals[-1] if vals else None, "judge_records": per_turn,
            "judge_calls": len(per_turn) if calls is None else calls}


def sif_value(res: dict) -> float | None:
    """The 0-1 S_IF of one judge record (respec.eval.judge gives S_IF = score / 3; None when unparsed)."""
    if "S_IF_norm" in res:
        v = res["S_IF_norm"]
    elif "S_IF" in res:
        v = res["S_IF"]
    elif isinstance(res.get("score"), (int, float)):
        v = res["score"] / 3.0
    else:
        v = None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def turn_records(history: History, scenario: Scenario | None = None) -> list[dict]:
    """Per-turn records of a generated history (what the row's 'turns' holds). The editor's image
    ids are the ones recorded with each turn (run_turn's record, or the History Append node's
    editor_image_ids input); None where nothing was recorded."""
    out = []
    for turn in history.turns[1:]:
        plan, meta = turn.plan, turn.meta or {}
        t = turn.index
        if "is_restoration" in meta:
            flag = meta["is_restoration"]
        else:
            flag = scenario.is_restoration(t) if scenario is not None else (plan.is_restoration if plan else None)
        out.append({"t": t, "stage": meta.get("stage", scenario.turns[t - 1].stage if scenario else None),
                    "is_restoration": flag,
                    "instruction": turn.instruction, "sent_instruction": turn.sent_instruction,
                    "editor_image_ids": _recorded_ids(meta),
                    "vlm_calls": int(meta.get("vlm_calls", _plan_vlm_calls(plan))),
                    "fallbacks": list(meta.get("fallbacks", plan.fallbacks if plan is not None else [])),
                    "seed": meta.get("seed"), "plan": plan.to_dict() if plan is not None else None,
                    "post_edit": meta.get("post_edit", []), "seconds": meta.get("seconds", {})})
        if meta.get("editor_run") is False:     # history first answered (issue 43); absent otherwise
            out[-1]["editor_run"] = False
    return out


def _plan_vlm_calls(plan: Plan | None) -> int:
    """The controller calls a turn's plan records (a plan that does not say: 1 if it called)."""
    if plan is None:
        return 0
    return plan.vlm_calls if plan.vlm_calls is not None else int(plan.vlm_called)


def _recorded_ids(meta: dict) -> list[int] | None:
    ids = meta.get(EDITOR_IMAGE_IDS)
    return [int(i) for i in ids] if isinstance(ids, (list, tuple)) else None


PROVENANCE_ANALYZER = "provenance (change masks, no VLM)"   # the rows' `controller` when no VLM chose


@dataclass(frozen=True)
class RowRun:
    """How a row's scenario was run: what make_row records besides the history, score and judge."""
    config: str                 # the bench config's name (respec, baseline, ...)
    editor: str                 # the editor's row label (flux2, sim, flux2-native, ...)
    controller: str = ""        # "": the controller the history's plans name
    editor_model: str = ""
    smoke: bool = False         # tiny random-weight models
    seed: int | None = None     # the run's base seed
    masks_source: str = "detect"   # where the A.5 masks came from (detect, oracle, ...)
    scorer: str = ""


def make_row(scenario: Scenario, history: History, score: dict, run: RowRun, *, judge: dict | None = None,
             masks: Any = None, seconds: dict | None = None, true_reference: int | None = None) -> dict:
    """One results row from a generated history and its OCCUR score (the in-process runner and
    the Results Writer node both use this, so their rows are alike). `true_reference`: the I_ref
    id the simulated world recorded; reference accuracy is then measured against it."""
    config, editor, smoke, seed = run.config, run.editor, run.smoke, run.seed
    if len(history) != scenario.num_turns + 1:
        raise InputError(f"scenario {scenario.id!r} has {scenario.num_turns} turns but the history holds "
                         f"{len(history) - 1} edits; a results row needs the whole scenario")
    cfg = CONFIGS.get(config)
    turns = turn_records(history, scenario)
    controller = run.controller or next((t.plan.controller for t in history.turns
                                         if t.plan is not None and t.plan.vlm_called and t.plan.controller), "")
    judge = judge or {}
    plan_r = history.turns[scenario.restoration_turn].plan
    # A reference was chosen when the controller planned the restoration turn, or the provenance
    # planner did (0 calls); pass-through plans (skipped turns) chose nothing.
    called = plan_r is not None and plan_r.is_restoration and (plan_r.vlm_called or plan_r.controller == "provenance")
    chosen = plan_r.restoration_source_id if called else None
    truth = scenario.reference_turn if true_reference is None else int(true_reference)
    correct = reference_selection_correct(plan_r, truth) if called else None
    areas = score.get("areas", {}) or {}
    row = {
        **scenario.summary(),
        "status": "ok",
        "config": config, "use_pti": cfg.switches.use_pti if cfg else None, "use_hrs": cfg.switches.use_hrs if cfg else None,
        "editor": editor, "editor_model": run.editor_model, "smoke": bool(smoke),
        "controller": (controller if any(t["vlm_calls"] for t in turns) or (called and plan_r.vlm_called)
                       else PROVENANCE_ANALYZER if called else ""),
        "size": list(history.images[0].size), "seed": seed,
        "S_restore": score.get("S_restore"), "S_preserve": score.get("S_preserve"), "S_TC": score.get("S_TC"),
        "judge": bool(judge), "S_IF": judge.get("S_IF"), "S_IF_final": judge.get("S_IF_final"),
        "S_IF_turns": judge.get("S_IF_turns"),
        "parts": {"restore": score.get("restore"), "preserve": score.get("preserve")},
        "whole": score.get("whole_image"),
        "restore_area_ratio": areas.get("R_restore"), "preserve_area_ratio": areas.get("R_preserve"),
        "areas": areas,
        "nan_reason": "; ".join(score.get("reasons") or []) or None,
        "reference_chosen": chosen, "reference_correct": correct,
        "reference_truth": "sim world (recorded I_ref)" if true_reference is not None else "scenario annotation",
        "masks_source": run.masks_source, "scorer": run.scorer,
        "editor_reference_ids": turns[scenario.restoration_turn - 1]["editor_image_ids"],
        "fallbacks": sorted({f for tr in turns for f in tr["fallbacks"]}),
        "vlm_calls": sum(tr["vlm_calls"] for tr in turns),
        "judge_calls": judge.get("judge_calls", 0),
        "seconds": seconds or _sum_turn_seconds(turns),
        "turns": turns,
        "mask_records": _mask_records(masks) if masks is not None else None,
        "judge_records": judge.get("judge_records"),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if cfg is not None and cfg.switches.history_first:    # only then: the other configs' rows stay as they were
        row["edits_skipped"] = sum(1 for tr in turns if tr.get("editor_run") is False)
    row["key"] = row_key(row)
    return row


def graph_row(scenario: Scenario, history: History, score: dict, *, config: str, editor: str,
              judge_records: list | dict | None = None) -> dict:
    """The row of a scenario that a ComfyUI graph ran (the Results Writer node's row): make_row
    with S_IF from the Instruction Judge's record(s) (one, or a list of per-turn records), the
    seed of the graph's first turn (its History Append meta; the remote runner sets it from
    turn_seed) and source 'comfyui'."""
    if not editor.strip():
        raise InputError("editor is empty; name the editor this graph used (e.g. flux2)")
    judge = None
    if judge_records is not None:
        judge = summarise_judgements(judge_records if isinstance(judge_records, list) else [judge_records])
    seeds = [t.meta.get("seed") for t in history.turns[1:] if isinstance(t.meta, dict)]
    run = RowRun(config=config, editor=editor.strip(), seed=seeds[0] if seeds and seeds[0] is not None else None)
    row = make_row(scenario, history, score, run, judge=judge)
    row["source"] = ROW_SOURCE_COMFYUI
    return row


def _sum_turn_seconds(turns: list[dict]) -> dict:
    tot: dict[str, float] = {}
    for tr in turns:
        for k, v in (tr.get("seconds") or {}).items():
            tot[k] = round(tot.get(k, 0.0) + float(v), 4)
    return tot


def _mask_records(masks) -> Any:
    rec = masks.to_record() if hasattr(masks, "to_record") else getattr(masks, "records", None)
    try:
        json.dumps(rec, default=str)
        return json.loads(json.dumps(rec, default=str))
    except (TypeError, ValueError):
        return str(rec)
