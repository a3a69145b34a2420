"""One ReSpec turn (paper §4, figure 3), start to finish, in one place.

    record, history = run_turn(history, "remove the box", backend=vlm, editor=klein, seed=7)

`run_turn` reads top to bottom like a diffusion pipeline's `__call__`:

    1. is this a restoration turn?      (a given flag wins, else restoration_mode decides)
    2. plan                             (the planner part: one controller call at most; none on
                                         turn 1; none at all with the provenance planner)
    3. select references                (the selector part: which history images the editor gets)
    4. rewrite                          (PTI: the plan's synthesis instruction, else the request)
    5. edit                             (the editor part, at the current image's size)
    6. post-edit steps                  (optional parts that may change the image, each recorded:
                                         Reveal Composite, then the Drift Guard, respec/pixels/guard.py)
    7. append                           (the new history; the turn's meta holds the record, its
                                         masks the change mask C_t and the post-edit steps' masks)

Every part is passed in: the controller backend, the planner, the selector, the editor, the
post-edit steps and an optional timing hook. The switches of the paper's ablations (table 2) are
arguments: use_controller, use_pti, use_hrs, skip_non_restoration. The benchmark runner is
a loop over this function; the ComfyUI graph runs the same stages as separate nodes, and its
History Append records the same `editor_image_ids` key (EDITOR_IMAGE_IDS).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from .controller import decide_restoration, plan_turn, rewrite_instruction, select_references
from .controller.selection import Selection
from .history import CHANGE, History, StoredImage
from .plan import Plan
from .pixels.provenance import change_for
from .timing import StageTimer, TimingHook

# The turn-meta key that says which history images the editor received, in order. The runner
# (through TurnRecord.meta) and the History Append node both write it; results rows read it.
EDITOR_IMAGE_IDS = "editor_image_ids"


class Planner(Protocol):
    """This turn's plan (paper §4.1-4.3): what to preserve, which references, what to send."""

    name: str

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None, **vlm_options: Any) -> Plan:
        """The plan for turn history.next_turn; vlm_options: skip_non_restoration, templates, ..."""


class VLMPlanner:
    """The paper's planner: one controller call (respec.controller.plan_turn)."""

    name = "vlm"

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None, **vlm_options: Any) -> Plan:
        return plan_turn(history, request, backend, is_restoration, meta=meta, **vlm_options)


class Selector(Protocol):
    """Which history images the editor gets this turn (paper §4.2), in the order it gets them."""

    name: str

    def select(self, history: History, plan: Plan, *, use_history_reference: bool) -> Selection:
        """The selection for the turn `plan` was made for (plan.turn == history.next_turn)."""


class PlanSelector:
    """The paper's selector: the plan's image_ids on restoration turns with HRS on, else the
    current image (respec.controller.select_references)."""

    name = "plan"

    def select(self, history: History, plan: Plan, *, use_history_reference: bool) -> Selection:
        return select_references(history, plan, use_history_reference)


class PostEditStep(Protocol):
    """A part run after the edit: it sees the turn so far (record.image is the edited image)
    and returns the image to keep (the same or a changed one) and an entry for the record.
    Per-pixel records it wants kept with the turn go into record.masks (name -> TurnMask)."""

    name: str

    def __call__(self, history: History, record: "TurnRecord") -> tuple[Any, dict]:
        ...


@dataclass
class TurnRecord:
    """What one turn did: its decisions, what the editor received, what came out, and the cost."""

    turn: int                                   # t (the turn that makes I_t)
    request: str                                # P_t, the user's instruction
    is_restoration: bool
    plan: Plan | None = None                    # None when the controller is off (baseline)
    selection: Selection | None = None
    sent_instruction: str = ""                  # what the editor was sent
    seed: int = 0
    image: Any = None                           # I_t (after the post-edit steps; a StoredImage once appended)
    edited: Any = None                          # the editor's own output as a StoredImage (before the post-edit steps)
    editor_run: dict = field(default_factory=dict)    # the editor's last_run (steps, size, seconds)
    post_edit: list[dict] = field(default_factory=list)
    masks: dict = field(default_factory=dict)   # per-pixel records the post-edit steps add
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def editor_image_ids(self) -> list[int]:
        """The history image ids the editor received, in order."""
        return list(self.selection.ids) if self.selection is not None else []

    @property
    def vlm_calls(self) -> int:
        return int(self.plan.meta.get("vlm_calls", 0)) if self.plan is not None else 0

    @property
    def fallbacks(self) -> list[str]:
        """The C.2 (plan) and C.3 (selection) rules that fired, in that order."""
        return ((list(self.plan.fallbacks) if self.plan is not None else [])
                + (list(self.selection.fallbacks) if self.selection is not None else []))

    def meta(self) -> dict:
        """The JSON-able part kept with the turn in the history (what results rows read)."""
        out = {"seed": self.seed, "is_restoration": self.is_restoration,
               EDITOR_IMAGE_IDS: self.editor_image_ids, "vlm_calls": self.vlm_calls,
               "fallbacks": self.fallbacks, "editor": dict(self.editor_run),
               "seconds": {k: round(v, 4) for k, v in self.seconds.items() if v > 0}}
        if self.post_edit:
            out["post_edit"] = [dict(e) for e in self.post_edit]
        return out


def current_only(history: History) -> Selection:
    """The selection without a controller (the baseline): the current image I_{t-1} alone."""
    latest = history.next_turn - 1
    return Selection([history.current.image], [latest], history.current.image)


def run_turn(history: History, request: str, *, editor: Any, backend: Any = None,
             planner: Planner | None = None, selector: Selector | None = None,
             post_edit: Sequence[PostEditStep] = (),
             is_restoration: bool | None = None, restoration_mode: str = "auto",
             use_controller: bool = True, use_pti: bool = True, use_hrs: bool = True,
             skip_non_restoration: bool = False, seed: int = 0, steps: int | None = None,
             guidance: float | None = None, templates: Any = None, plan_meta: dict | None = None,
             meta: dict | None = None, timing: TimingHook | None = None,
             history_mode: str | None = None, max_history_images: int | None = None) -> tuple[TurnRecord, History]:
    """Run turn t = history.next_turn for the request P_t; return its record and H_t.

    is_restoration: a known flag (the benchmark's ground truth) wins over restoration_mode
    ("auto" | "restoration" | "not restoration", see decide_restoration).
    use_controller off: no plan, the editor gets P_t and the current image (the baseline).
    use_pti / use_hrs: send the rewritten instruction / the plan's reference images.
    skip_non_restoration: non-restoration turns make no controller call.
    planner: makes the plan (default: VLMPlanner, one controller call; see
    respec.controller.provenance_selector for the provenance and hybrid planners).
    selector: which images the editor gets (default: PlanSelector, the paper's rule).
    post_edit: steps run on the edited image, in order; each adds an entry to record.post_edit.
    plan_meta: extra entries for plan.meta; meta: extra entries for the turn's history meta.
    timing: a hook wrapped around each stage (the record holds each stage's seconds anyway).
    history_mode / max_history_images: which history images the controller is shown ("paper":
    all, plan_turn's default; "bounded": at most max_history_images, respec.controller.history_images)."""
    planner = planner if planner is not None else VLMPlanner()
    shown = {k: v for k, v in (("history_mode", history_mode), ("max_history_images", max_history_images))
             if v is not None}
    selector = selector if selector is not None else PlanSelector()
    t = history.next_turn
    seconds: dict[str, float] = {}
    stage = StageTimer(seconds, timing).measure

    # 1. Is this a restoration turn? (it picks the controller's prompt, never enters it)
    decided: dict = {}
    if is_restoration is None:
        is_restoration, decided = decide_restoration(restoration_mode, history, request)
    record = TurnRecord(turn=t, request=request, is_restoration=bool(is_restoration), seed=int(seed))

    # 2. Plan: one controller call at most (none on turn 1, none when skipped or switched off).
    if use_controller:
        with stage("controller"):
            record.plan = planner.plan(history, request, record.is_restoration, backend=backend,
                                       skip_non_restoration=skip_non_restoration, templates=templates,
                                       meta={**decided, **(plan_meta or {})}, **shown)

    # 3. Select references: the history images the editor gets, in order.
    if record.plan is not None:
        with stage("select"):
            record.selection = selector.select(history, record.plan, use_history_reference=use_hrs)
    else:
        record.selection = current_only(history)

    # 4. Rewrite: the instruction the editor is sent.
    if record.plan is not None:
        with stage("rewrite"):
            record.sent_instruction = rewrite_instruction(record.plan, use_pti=use_pti)
    else:
        record.sent_instruction = request

    # 5. Edit, at the current image's size (so masks of I_{t-1} and I_t line up).
    with stage("editor"):
        # One copy and one hash of I_t for the whole turn: the post-edit steps, C_t and the history share it.
        record.image = StoredImage.of(editor.edit([im.rgb() for im in record.selection.images],
                                                  record.sent_instruction, output_size=history.current.image.size,
                                                  seed=record.seed, steps=steps, guidance=guidance))
    record.edited = record.image
    record.editor_run = dict(getattr(editor, "last_run", {}) or {})

    # 6. Post-edit steps: each may replace the image and says what it did.
    for step in post_edit:
        name = getattr(step, "name", type(step).__name__)
        with stage(f"post:{name}"):
            record.image, entry = step(history, record)
        record.post_edit.append({"step": name, **(entry or {})})

    # 7. Append: H_t, with the record kept in the turn's meta and C_t (what this turn changed)
    #    with the turn, as History Append does in a graph.
    with stage("provenance"):
        record.image = StoredImage.of(record.image)   # a post-edit step's new image (else the same one)
        masks = {CHANGE: change_for(history, record.image), **record.masks}
    record.seconds = seconds
    alignment = {"alignment": masks[CHANGE].info["alignment"]} if "alignment" in masks[CHANGE].info else {}
    new = history.append(record.image, request, sent_instruction=record.sent_instruction, plan=record.plan,
                         meta={**(meta or {}), **record.meta(), **alignment}, masks=masks)
    return record, new
