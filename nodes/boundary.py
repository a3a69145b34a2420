"""The node layer's checks: a ComfyUI socket value turned into the core's value, or refused with the
node to connect.

ComfyUI checks a link's socket type (RESPEC_HISTORY, RESPEC_PLAN) in the editor, but an API prompt,
a reroute or a custom node can still hand a node anything. The core takes typed values (History,
Plan, ControllerCall) and does not re-check them, so every node passes what its sockets received
through here, once, before it calls the core. The messages name nodes; the core's never do.
"""
from __future__ import annotations

from typing import Any

from ..respec.controller.planner import skips_controller
from ..respec.controller.textgen import ControllerCall
from ..respec.errors import InputError
from ..respec.history import History
from ..respec.plan import Plan
from ..respec.post_edit.guard_step import GuardStep
from ..respec.post_edit.result import StepResult
from ..respec.post_edit.undo_step import UndoStep
from ..respec.text import clip

HISTORY_NODES = "a History Store or Append node"
# The default of a lazy optional input in a check_lazy_status: ComfyUI passes None for a connected
# input it has not evaluated yet and leaves out one that is not connected (asking for that one is an
# error), so "not connected" needs a value of its own.
UNCONNECTED = object()
PLAN_NODES = ("a controller node (RESPEC_PLAN: Preservation Target VLM, Plan from Text or the provenance "
              "Reference Selector)")


def history_in(value: Any, what: str = "history") -> History:
    """The socket's History; InputError naming the nodes that make one."""
    if not isinstance(value, History):
        raise InputError(f"'{what}' must come from {HISTORY_NODES}, got {type(value).__name__}")
    return value


def plan_in(value: Any, what: str = "plan") -> Plan:
    """The socket's Plan (RESPEC_PLAN); InputError naming the nodes that make one."""
    if not isinstance(value, Plan):
        raise InputError(f"{what} must come from {PLAN_NODES}, got {type(value).__name__}")
    return value


def optional_plan_in(value: Any, what: str = "plan") -> Plan | None:
    """plan_in for an optional socket: None when nothing is connected."""
    return None if value is None else plan_in(value, what)


def plan_for_history(plan: Any, history: Any, node: str) -> tuple[Plan, History]:
    """(plan, history) of a node that takes both: the plan must be the one made from this history
    for its next turn, which only the graph's wiring can get wrong."""
    history, plan = history_in(history), plan_in(plan)
    if plan.turn != history.next_turn:
        raise InputError(f"the plan was made for turn {plan.turn}, but this history's next turn is "
                         f"{history.next_turn}: connect the same history to the node that made the plan and to "
                         f"the {node}")
    return plan, history


def controller_in(vlm: Any, history: History, is_restoration: bool, skip_non_restoration: bool) -> Any:
    """The VLM socket's value; InputError naming the loader nodes when this turn calls the controller
    (not turn 1, not a skipped one) and none is connected."""
    if vlm is None and history.next_turn > 1 and not skips_controller(is_restoration, skip_non_restoration):
        raise InputError(f"turn {history.next_turn} needs a controller: connect a VLM (ReSpec VLM Loader or "
                         "OpenAI-compatible Controller)")
    return vlm


def controller_call_in(value: Any) -> ControllerCall:
    """Controller Prompt's controller_call output; InputError saying where to connect it from."""
    if value is None:
        raise InputError("connect Controller Prompt (ReSpec)'s controller_call to Plan from Text")
    if not isinstance(value, ControllerCall):
        raise InputError("Plan from Text needs the controller_call output of Controller Prompt (ReSpec), "
                         f"got {type(value).__name__}")
    return value


def generated_text_in(call: ControllerCall, text: Any) -> Any:
    """TextGenerate's answer for a call that needs one (None is fine for a skipped call)."""
    if text is None and call.needed:
        raise InputError(f"turn {call.turn} needs the controller's answer: connect TextGenerate's "
                         "generated_text to Plan from Text")
    return text


def step_in(value: Any, step: str, node: str, name: str) -> StepResult:
    """The socket's StepResult of the post-edit step `step` (a node's output, connected to input
    `name`); InputError naming the `node` it must come from."""
    if not isinstance(value, StepResult) or value.step != step:
        got = value.step if isinstance(value, StepResult) else type(value).__name__
        raise InputError(f"'{name}' must come from a {node} node, got {got}")
    return value


def editor_images_in(images: Any) -> Any:
    """The editor_images socket's batch; InputError naming the node that makes it when it is empty."""
    if images is None or getattr(images, "shape", (1,))[0] == 0:
        raise InputError("the editor got no images: connect the Reference Selector's editor_images (on a "
                         "non-restoration turn it holds just the current image)")
    return images


def unevaluated(**inputs: Any) -> list[str]:
    """The names of the lazy inputs ComfyUI has not evaluated yet (None), for a check_lazy_status to
    ask for; an optional one left UNCONNECTED is never asked for."""
    return [name for name, value in inputs.items() if value is None]


def guard_steps_in(value: Any, name: str = "guard") -> list[StepResult]:
    """The Drift Guard socket's StepResults in the order run_turn keeps them: history first's (when its
    `history_first` was on), then the guard's own (absent when history first answered the turn)."""
    items = value if isinstance(value, tuple) and value else (value,)
    if len(items) > 2:
        raise InputError(f"'{name}' must come from a Drift Guard node, got {len(items)} values")
    out = []
    for item in items:
        step = UndoStep.name if isinstance(item, StepResult) and item.step == UndoStep.name else GuardStep.name
        out.append(step_in(item, step, "Drift Guard", name))
    return out


def switch_in(value: Any, name: str) -> bool:
    """A BOOLEAN switch's value; InputError unless it is true or false (an API prompt can send anything)."""
    if not isinstance(value, bool):
        raise InputError(f"'{name}' must be true or false, got {clip(value)}")
    return value
