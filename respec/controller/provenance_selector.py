"""The provenance selector: reference selection from pixel provenance, with no VLM (beyond the
paper).

The paper's controller re-reads the history to guess which past image still shows the content a
revealing edit uncovers (figure 12, steps 1-3). Here the covering turn k and the confidence in it
come from the history's change masks (respec/controller/covering.py), and the plan is

    restoration_source   = k - 1, the latest image before the covering turn (the paper's I_ref);
    identity_anchor      = t - 1, the current image;
    image_ids            = [k - 1, t - 1] (one id when they coincide).

plan.provenance keeps the location, meta["provenance_confidence"] and
meta["provenance_evidence"] its confidence and the figures per turn. Below 0.5 the plan adds
PROVENANCE_LOW_CONFIDENCE and defers: to the controller when one is connected (hybrid, or the
provenance planner with a backend), otherwise to the paper's C.3 rule (I_0 as the source).

When the evidence is ambiguous (several candidate turns, or a named turn without a usable change
mask) the plan says so (fallback PROVENANCE_AMBIGUOUS, plan.provenance) and, if a controller
is connected, the decision is deferred to it (one VLM call, the paper's plan). Without one the
latest candidate is used (the latest addition still in the picture: respec/controller/covering.py).

Three parts for respec.turn.run_turn:

    ProvenancePlanner   a plan with 0 VLM calls: the ids above and a model-free instruction,
                        P_t + ", revealing what was there in the first image exactly as it was"
    HybridPlanner       the VLM's plan (its instruction) with the ids provenance decided
    ProvenanceSelector  the editor's images from provenance (the Selector beside PlanSelector)
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import InputError
from ..history import History
from ..plan import Plan
from .covering import confidence_record, locate_covering_turn
from .planner import PlanOptions, VLMPlanner, count_vlm_calls, plan_options, plan_turn
from .selection import PlanSelector, Selection, select_references

PROVENANCE_AMBIGUOUS = "provenance_ambiguous"          # plan.fallbacks: the evidence had several answers
PROVENANCE_DEFERRED = "provenance_deferred_to_controller"
NO_COVERING_TURN = "provenance_no_covering_turn"       # nothing earlier changed a part of the image
PROVENANCE_LOW_CONFIDENCE = "provenance_low_confidence"  # the masks' evidence is weak (a re-render)
LOW_CONFIDENCE = 0.5  # below this provenance_confidence the selector defers (hybrid: the VLM; alone: C.3)

REVEAL_CLAUSE = "revealing what was there in the first image exactly as it was"


def model_free_instruction(request: str) -> str:
    """P_t with the paper's restoration clause (figure 12's pattern), for an editor that receives
    [I_{k-1}, I_{t-1}]: "<the user's edit>, revealing what was there in the first image exactly as it was."."""
    text = (request or "").strip().rstrip(".!;, ")
    if not text:
        raise InputError("the current request P_t is empty; type the edit you want for this turn")
    return f"{text}, {REVEAL_CLAUSE}."


def _ids(source: int, t: int) -> tuple[int, ...]:
    anchor = t - 1
    return (source, anchor) if source != anchor else (anchor,)


def provenance_plan(history: History, request: str, is_restoration: bool, *, backend: Any = None,
                    meta: dict | None = None, options: PlanOptions | None = None) -> Plan:
    """This turn's plan from provenance (0 VLM calls). On an ambiguous restoration turn with a
    controller connected (`backend`), the controller's plan is used instead (one call) and the
    plan records why. `options` go to plan_turn when it is called."""
    if not isinstance(request, str) or not request.strip():
        raise InputError("the current request P_t is empty; type the edit you want for this turn")
    request = request.strip()
    t = history.next_turn
    meta = {**(meta or {}), "selector": "provenance"}
    prior = count_vlm_calls(history)
    if not is_restoration or t == 1:
        return Plan(turn=t, user_instruction=request, synthesis_instruction=request, is_restoration=bool(is_restoration),
                    controller="provenance", vlm_calls=0,
                    meta={**meta, "vlm_calls_so_far": prior,
                          "skipped": "not a restoration turn" if t > 1 else "first_turn"})
    found = locate_covering_turn(history, request)
    conf, evidence = confidence_record(history, found)
    meta["provenance_confidence"] = round(conf, 4)
    meta["provenance_evidence"] = evidence
    low = found.turn is not None and conf < LOW_CONFIDENCE
    if (found.ambiguous or low) and backend is not None:
        plan = plan_turn(history, request, backend, True, options, meta=meta)
        extra = ((PROVENANCE_AMBIGUOUS,) if found.ambiguous else ()) + ((PROVENANCE_LOW_CONFIDENCE,) if low else ())
        return replace(plan, provenance=found.record(), fallbacks=plan.fallbacks + extra + (PROVENANCE_DEFERRED,))
    fallbacks: tuple[str, ...] = (PROVENANCE_AMBIGUOUS,) if found.ambiguous else ()
    if low:
        # No controller to defer to: the paper's C.3 rule (I_0 as the source), as for a missing one.
        source, fallbacks = 0, fallbacks + (PROVENANCE_LOW_CONFIDENCE,)
        region = None
    elif found.turn is None:
        # Nothing to reveal from: the paper's own fallback (C.3) for a missing source is I_0.
        source, fallbacks = 0, fallbacks + (NO_COVERING_TURN,)
        region = None
    else:
        source = found.source_id
        region = f"the pixels turn {found.turn} changed ({found.changed[found.turn]:.1%} of the image)"
    return Plan(turn=t, user_instruction=request, synthesis_instruction=model_free_instruction(request),
                is_restoration=True, preservation_target=None, restoration_source_id=source,
                identity_anchor_id=t - 1, restoration_region=region, image_ids=_ids(source, t),
                fallbacks=fallbacks, controller="provenance", provenance=found.record(), vlm_calls=0,
                meta={**meta, "vlm_calls_so_far": prior})


def hybrid_plan(history: History, request: str, is_restoration: bool, *, backend: Any,
                meta: dict | None = None, options: PlanOptions | None = None) -> Plan:
    """The controller writes the instruction (one call, the paper's plan); provenance decides the
    reference ids, unless its evidence is ambiguous (then the controller's ids stand). The
    controller's own choice is kept in meta["vlm_choice"]."""
    plan = plan_turn(history, request, backend, is_restoration, options, meta={**(meta or {}), "selector": "hybrid"})
    return with_provenance_ids(history, plan)


def with_provenance_ids(history: History, plan: Plan) -> Plan:
    """A controller's plan with the reference ids provenance decides (hybrid), unless provenance's
    evidence is ambiguous or empty (then the plan's ids stand, fallback PROVENANCE_DEFERRED). The
    controller's own choice is kept in meta["vlm_choice"]."""
    if not plan.is_restoration or history.next_turn == 1:
        return plan
    plan.check_made_for(history.next_turn)
    found = locate_covering_turn(history, plan.user_instruction)
    vlm_choice = {"restoration_source_id": plan.restoration_source_id,
                  "identity_anchor_id": plan.identity_anchor_id, "image_ids": list(plan.image_ids)}
    conf, evidence = confidence_record(history, found)
    new_meta = {**plan.meta, "vlm_choice": vlm_choice,
                "provenance_confidence": round(conf, 4), "provenance_evidence": evidence}
    located = replace(plan, provenance=found.record(), meta=new_meta)
    if found.turn is not None and conf < LOW_CONFIDENCE:
        return replace(located, fallbacks=plan.fallbacks + (PROVENANCE_LOW_CONFIDENCE, PROVENANCE_DEFERRED))
    if found.ambiguous or found.turn is None:
        return replace(located, fallbacks=plan.fallbacks + (PROVENANCE_DEFERRED,))
    t = history.next_turn
    return replace(located, restoration_source_id=found.source_id, identity_anchor_id=t - 1,
                   image_ids=_ids(found.source_id, t))


class ProvenancePlanner:
    """The planner part for run_turn (TurnParts.planner): provenance_plan (0 VLM calls; the
    connected controller only when the evidence is ambiguous, with plan_turn's `options`)."""

    name = "provenance"

    def __init__(self, **options: Any):
        self.options = plan_options(**options)

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None) -> Plan:
        """provenance_plan's plan for turn history.next_turn."""
        return provenance_plan(history, request, is_restoration, backend=backend, meta=meta, options=self.options)


class HybridPlanner:
    """The planner part for run_turn (TurnParts.planner): hybrid_plan (the VLM writes, with
    plan_turn's `options`; provenance picks)."""

    name = "hybrid"

    def __init__(self, **options: Any):
        self.options = plan_options(**options)

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None) -> Plan:
        """hybrid_plan's plan for turn history.next_turn."""
        if backend is None:
            raise InputError("the hybrid selector needs a controller to write the instruction: connect a VLM, "
                             "or use the provenance selector (no VLM)")
        return hybrid_plan(history, request, is_restoration, backend=backend, meta=meta, options=self.options)


class ProvenanceSelector:
    """The Selector part beside the paper's PlanSelector: on a restoration turn with HRS on, the
    editor gets [I_{k-1}, I_{t-1}] with k from provenance — read from the plan when a provenance
    or hybrid planner already located it, else located now. An ambiguous location keeps the plan's
    own ids (a controller decided them)."""

    name = "provenance"

    def select(self, history: History, plan: Plan, *, use_history_reference: bool) -> Selection:
        """The paper's selection, except on a restoration turn whose covering turn k the change
        masks found unambiguously (and not with low confidence): I_{k-1}, then I_{t-1}."""
        if not (use_history_reference and plan.is_restoration) or history.next_turn == 1:
            return select_references(history, plan, use_history_reference)
        conf = plan.meta.get("provenance_confidence") if isinstance(plan.meta, dict) else None
        if conf is not None and float(conf) < LOW_CONFIDENCE:
            # Low confidence: the plan's own ids (a controller's, or the C.3 rule's) stand.
            return select_references(history, plan, use_history_reference)
        if plan.provenance is not None:
            source, ambiguous = plan.provenance.source_id, plan.provenance.ambiguous
        else:
            found = locate_covering_turn(history, plan.user_instruction)
            source, ambiguous = found.source_id, found.ambiguous
        if source is None or (ambiguous and plan.vlm_called):
            return select_references(history, plan, use_history_reference)
        return select_references(history, replace(plan, image_ids=_ids(int(source), history.next_turn)),
                                 use_history_reference)


def provenance_selection(history: History, request: str, is_restoration: bool, plan: Plan | None = None,
                         use_history_reference: bool = True) -> tuple[Plan, Selection]:
    """The Reference Selector (provenance) node's whole job: without a plan, the provenance plan
    (0 VLM calls, model-free instruction); with a controller's plan, that plan with provenance's
    ids (hybrid). Returns (plan, the editor's images)."""
    plan = provenance_plan(history, request, is_restoration) if plan is None else with_provenance_ids(history, plan)
    return plan, ProvenanceSelector().select(history, plan, use_history_reference=use_history_reference)


SELECTORS = ("vlm", "provenance", "hybrid")


def selector_parts(name: str, **options: Any) -> tuple[Any, Any]:
    """(planner, selector) for `--selector vlm|provenance|hybrid`, the planner made with plan_turn's
    `options` ("vlm" is the paper's VLM plan and its ids, run_turn's default parts)."""
    key = (name or "vlm").strip().lower()
    if key == "vlm":
        return VLMPlanner(**options), PlanSelector()
    if key == "provenance":
        return ProvenancePlanner(**options), ProvenanceSelector()
    if key == "hybrid":
        return HybridPlanner(**options), ProvenanceSelector()
    raise InputError(f"unknown selector {name!r}; use one of {', '.join(SELECTORS)}")
