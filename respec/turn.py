"""One ReSpec turn (paper §4, figure 3), start to finish, in one place.

    parts = TurnParts(editor=klein, backend=vlm)          # the paper's planner and selector
    record, history = run_turn(history, "remove the box", parts, TurnSwitches(use_pti=False), seed=7)

`run_turn` reads top to bottom like a diffusion pipeline's `__call__`:

    1. is this a restoration turn?      (a given flag wins, else switches.restoration_mode decides)
    2. plan                             (the planner part: one controller call at most; none on
                                         turn 1, none on a non-restoration turn with
                                         skip_non_restoration, none at all with the provenance planner)
    3. select references                (the selector part: which history images the editor gets)
    4. rewrite                          (PTI: the plan's synthesis instruction, else the request)
    5. edit                             (the editor part, at the current image's size)
    6. post-edit steps                  (optional parts that may change the image, each recorded:
                                         Reveal Composite, then the Drift Guard, respec/post_edit/)
       history first                    (TurnSwitches.history_first, issue 43: after the plan, a request
                                         that takes back what turn k added is answered from the history,
                                         parts.undo; then steps 3-6 are not run and the record says so)
    7. keep                             (keep_turn: the new history; the turn's meta holds the record,
                                         its masks the change mask C_t and the post-edit steps' masks)

The parts (TurnParts) are passed in, as a diffusers pipeline holds its components: the editor,
the controller backend, the planner, the selector, the post-edit steps and an optional timing
hook; a planner gets its controller options (templates, history_mode, ...) when it is made. The
switches of the paper's ablations (table 2) are one frozen value (TurnSwitches): use_controller,
use_pti, use_hrs, skip_non_restoration. The benchmark runner is a loop over this function; the
ComfyUI graph runs the same stages as separate nodes, and its History Append keeps the turn with
the same keep_turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from .controller import RESTORATION_MODES, decide_restoration, rewrite_instruction
from .controller.planner import VLMPlanner, pass_through_plan, skips_controller
from .controller.selection import PlanSelector, Selection
from .errors import InputError
from .history import CHANGE, History, StoredImage, TurnMask
from .plan import Plan
from .pixels.analysis_cache import CACHE, AnalysisCache
from .pixels.change_mask import change_for
from .pixels.change_record import ALIGNMENT, ChangeRecord
from .pixels.masks import history_size
from .post_edit.record import TurnSoFar
from .post_edit.result import StepResult, keep_step
from .post_edit.undo_step import UndoStep
from .timing import StageTimer, TimingHook

# The turn-meta key that says which history images the editor received, in order. keep_turn
# writes it (for run_turn and the History Append node); results rows read it.
EDITOR_IMAGE_IDS = "editor_image_ids"


class Planner(Protocol):
    """This turn's plan (paper §4.1-4.3): what to preserve, which references, what to send. A
    planner that calls the controller gets its options (templates, history_mode, ...) when made."""

    name: str

    def plan(self, history: History, request: str, is_restoration: bool, *, backend: Any = None,
             meta: dict | None = None) -> Plan:
        """The plan for turn history.next_turn; meta: extra entries for plan.meta."""


class Selector(Protocol):
    """Which history images the editor gets this turn (paper §4.2), in the order it gets them."""

    name: str

    def select(self, history: History, plan: Plan, *, use_history_reference: bool) -> Selection:
        """The selection for the turn `plan` was made for (plan.turn == history.next_turn)."""


class PostEditStep(Protocol):
    """A part run after the edit: it sees the turn so far (respec/post_edit/record.py says what it
    may read; record.image is the image the earlier steps left) and returns a StepResult
    (respec/post_edit/result.py): its entry for the record, the image it leaves (None: the same),
    the per-pixel records to keep with the turn."""

    name: str

    def __call__(self, history: History, record: TurnSoFar) -> StepResult:
        ...


@dataclass(frozen=True)
class TurnParts:
    """The parts a turn runs, named like a diffusers pipeline's components: the editor, the
    controller backend (None: no VLM), the planner and the selector (default: the paper's,
    VLMPlanner and PlanSelector), the post-edit steps in order, and a hook wrapped around each
    stage (respec.timing), and the analysis cache the turn reads C_t from."""

    editor: Any
    backend: Any = None
    planner: Planner = field(default_factory=VLMPlanner)
    selector: Selector = field(default_factory=PlanSelector)
    post_edit: tuple[PostEditStep, ...] = ()
    timing: TimingHook | None = None
    # History first (TurnSwitches.history_first): answers a take-back request from the history
    # before the edit (respec/post_edit/undo_step.py); a StepResult with an image skips the editor.
    undo: PostEditStep = field(default_factory=UndoStep)
    # The per-image analysis the turn's stages share (respec/pixels/analysis_cache.py): C_t is read
    # from it in step 7, where the post-edit steps left it. Reveal Composite and the Drift Guard
    # record their output's C_t in the default CACHE (respec/pixels/reveal.py, guard.py): give
    # another cache only with steps that record into it, or step 7 measures C_t of their output anew.
    cache: AnalysisCache = CACHE

    def __post_init__(self):
        object.__setattr__(self, "post_edit", tuple(self.post_edit))   # a list given is kept as it was


@dataclass(frozen=True)
class TurnSwitches:
    """The switches of the paper's ablations (table 2), and how a turn's restoration flag is
    decided when the caller gives none. The default is the full method (ReSpec)."""

    use_controller: bool = True          # off: no plan; the editor gets P_t and I_{t-1} (the baseline)
    use_pti: bool = True                 # PTI: send the plan's rewritten instruction, else P_t
    use_hrs: bool = True                 # HRS: give the editor the plan's reference images, else I_{t-1}
    skip_non_restoration: bool = False   # non-restoration turns make no controller call (pass-through plan)
    restoration_mode: str = "auto"       # no flag given: "auto" | "restoration" | "not restoration"
    history_first: bool = False          # beyond the paper (issue 43): take back from history, editor not run

    def __post_init__(self):
        for name in ("use_controller", "use_pti", "use_hrs", "skip_non_restoration", "history_first"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"TurnSwitches.{name} must be True or False, got {getattr(self, name)!r}")
        if self.restoration_mode not in RESTORATION_MODES:
            raise InputError(f"unknown restoration mode {self.restoration_mode!r}; use one of "
                             f"{', '.join(RESTORATION_MODES)}")


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
    editor_was_run: bool = True                 # False: history first answered, the editor was not run

    @property
    def editor_image_ids(self) -> list[int]:
        """The history image ids the editor received, in order."""
        return list(self.selection.ids) if self.selection is not None else []

    @property
    def vlm_calls(self) -> int:
        """Controller calls this turn made (0 or 1)."""
        return (self.plan.vlm_calls or 0) if self.plan is not None else 0

    @property
    def fallbacks(self) -> list[str]:
        """The C.2 (plan) and C.3 (selection) rules that fired, in that order."""
        return ((list(self.plan.fallbacks) if self.plan is not None else [])
                + (list(self.selection.fallbacks) if self.selection is not None else []))

    def meta(self) -> dict:
        """The JSON-able part kept with the turn in the history (what results rows read; keep_turn
        adds the editor's image ids and C_t's alignment)."""
        out = {"seed": self.seed, "is_restoration": self.is_restoration, "vlm_calls": self.vlm_calls,
               "fallbacks": self.fallbacks, "editor": dict(self.editor_run),
               "seconds": {k: round(v, 4) for k, v in self.seconds.items() if v > 0}}
        if self.post_edit:
            out["post_edit"] = [dict(e) for e in self.post_edit]
        if not self.editor_was_run:     # only then: the rows of runs without history first stay as they were
            out["editor_run"] = False
        return out


def current_only(history: History) -> Selection:
    """The selection without a controller (the baseline): the current image I_{t-1} alone."""
    latest = history.next_turn - 1
    return Selection([history.current.image], [latest], history.current.image)


def run_turn(history: History, request: str, parts: TurnParts, switches: TurnSwitches = TurnSwitches(), *,
             is_restoration: bool | None = None, seed: int = 0, steps: int | None = None,
             guidance: float | None = None, plan_meta: dict | None = None,
             meta: dict | None = None) -> tuple[TurnRecord, History]:
    """Run turn t = history.next_turn for the request P_t with `parts` under `switches`; return
    its record and H_t.

    is_restoration: a known flag (the benchmark's ground truth) wins over switches.restoration_mode.
    seed / steps / guidance: the editor's (None: the editor's own default).
    plan_meta: extra entries for plan.meta; meta: extra entries for the turn's history meta."""
    t = history.next_turn
    seconds: dict[str, float] = {}
    stage = StageTimer(seconds, parts.timing).measure

    # 1. Is this a restoration turn? (it picks the controller's prompt, never enters it)
    decided: dict = {}
    if is_restoration is None:
        is_restoration, decided = decide_restoration(switches.restoration_mode, history, request)
    record = TurnRecord(turn=t, request=request, is_restoration=bool(is_restoration), seed=int(seed))

    # 2. Plan: one controller call at most (none on turn 1, none when skipped or switched off).
    if switches.use_controller:
        with stage("controller"):
            plan_meta = {**decided, **(plan_meta or {})}
            if skips_controller(record.is_restoration, switches.skip_non_restoration):
                record.plan = pass_through_plan(history, request, False, meta=plan_meta)
            else:
                record.plan = parts.planner.plan(history, request, record.is_restoration, backend=parts.backend,
                                                 meta=plan_meta)

    # History first (issue 43): a request that takes back what turn k added is answered from the
    # history (I_{t-1} with C_k from I_{k-1}); the editor and the post-edit steps are not run.
    answered = None
    if switches.history_first:
        with stage("history"):
            answered = parts.undo(history, record)
        if not isinstance(answered, StepResult):
            raise InputError(f"the history-first part must return a StepResult (respec/post_edit/result.py), "
                             f"got {type(answered).__name__}")
        keep_step(record.post_edit, record.masks, answered)
    if answered is not None and answered.image is not None:
        record.image, record.edited, record.editor_was_run = answered.image, None, False
        record.selection = Selection([], [], history.current.image)    # the editor got nothing
        derived = answered.change
    else:
        derived = _edit_and_post_edit(history, record, parts, switches, stage, steps=steps, guidance=guidance)

    # 7. Keep: H_t, with C_t (what this turn changed; computed here so that its seconds, the
    #    "provenance" stage, are in the record) and the record in the turn's meta.
    with stage("provenance"):
        record.image = StoredImage.of(record.image)   # a post-edit step's new image (else the same one)
        change = derived if derived is not None else change_for(history, record.image, cache=parts.cache)
    record.seconds = seconds
    new = keep_turn(history, record.image, request, sent_instruction=record.sent_instruction, plan=record.plan,
                    editor_image_ids=record.editor_image_ids, meta={**(meta or {}), **record.meta()},
                    masks=record.masks, change=change)
    return record, new


def _edit_and_post_edit(history: History, record: TurnRecord, parts: TurnParts, switches: TurnSwitches,
                        stage: Callable, *, steps: int | None, guidance: float | None) -> TurnMask | None:
    """Steps 3-6 of run_turn on `record` (its selection, sent instruction, image, editor run and
    post-edit entries); returns the C_t a post-edit step handed over (None: step 7 measures it)."""
    # 3. Select references: the history images the editor gets, in order.
    if record.plan is not None:
        with stage("select"):
            record.selection = parts.selector.select(history, record.plan, use_history_reference=switches.use_hrs)
    else:
        record.selection = current_only(history)

    # 4. Rewrite: the instruction the editor is sent.
    if record.plan is not None:
        with stage("rewrite"):
            record.sent_instruction = rewrite_instruction(record.plan, use_pti=switches.use_pti)
    else:
        record.sent_instruction = record.request

    # 5. Edit, at the current image's size (so masks of I_{t-1} and I_t line up).
    with stage("editor"):
        # One copy and one hash of I_t for the whole turn: the post-edit steps, C_t and the history share it.
        record.image = StoredImage.of(parts.editor.edit([im.rgb() for im in record.selection.images],
                                                        record.sent_instruction,
                                                        output_size=history.current.image.size,
                                                        seed=record.seed, steps=steps, guidance=guidance))
    record.edited = record.image
    record.editor_run = dict(getattr(parts.editor, "last_run", {}) or {})

    # 6. Post-edit steps: each may replace the image and says what it did (kept as History Append
    #    keeps a node's: keep_step). A step may also hand over C_t of the image it leaves (the Drift
    #    Guard's, derived from the edit's); a later step that changes the image without one voids it.
    derived: TurnMask | None = None
    for step in parts.post_edit:
        name = getattr(step, "name", type(step).__name__)
        with stage(f"post:{name}"):
            result = step(history, record)
        if not isinstance(result, StepResult):
            raise InputError(f"the post-edit step {name!r} must return a StepResult (respec/post_edit/result.py), "
                             f"got {type(result).__name__}")
        record.image = result.image if result.image is not None else record.image
        if result.image is not None or result.change is not None:
            derived = result.change
        keep_step(record.post_edit, record.masks, result)
    return derived


def keep_turn(history: History, image: Any, request: str, *, sent_instruction: str | None = None,
              plan: Plan | None = None, editor_image_ids: Sequence[int] | None = None, meta: dict | None = None,
              masks: dict | None = None, change: TurnMask | None = None,
              append: Callable[..., History] | None = None) -> History:
    """What a turn keeps (step 7, for run_turn and the History Append node): I_t with its change
    mask C_t beside `masks` (the post-edit steps' per-pixel records), and `meta` with the ids of
    the images the editor received (EDITOR_IMAGE_IDS) and C_t's alignment of I_{t-1} to I_t.

    change: C_t when the caller has it already (run_turn); else the one a post-edit step node left
    for this image (the Drift Guard's, respec/pixels/analysis_cache.py AnalysisCache.step_change),
    else respec.pixels.change_mask.change_for measures it.
    append: called as append(image, request, sent_instruction, plan, meta, masks=...), its history
    returned; default history.append (History Append passes its session store's append_once).
    A plan must be the one made for this turn of this history (plan.turn = history.next_turn)."""
    if plan is not None:
        plan.check_made_for(history.next_turn)
    image = StoredImage.of(image)
    if change is None:
        change = CACHE.step_change(history.current.image, image, history_size(history))
    change = change if change is not None else change_for(history, image)
    meta = dict(meta or {})
    if editor_image_ids is not None:
        meta[EDITOR_IMAGE_IDS] = list(editor_image_ids)
    alignment = ChangeRecord.of(change).alignment_record()
    if alignment is not None:   # I_{t-1} -> I_t (respec/pixels/alignment.py)
        meta[ALIGNMENT] = alignment
    append = append if append is not None else history.append
    return append(image, request, sent_instruction, plan, meta, masks={CHANGE: change, **(masks or {})})
