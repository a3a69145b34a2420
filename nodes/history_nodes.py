"""History Store and History Append: the editing history H_{t-1}, inside one graph or kept in a
persistent session across prompts (respec/history.py, respec/store/)."""
from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

from ..respec import web
from ..respec.comfy import io, node_schema
from ..respec.controller.request import check_request
from ..respec.errors import InputError
from ..respec.gallery import FITS, history_images
from ..respec.history import History, StoredImage
from ..respec.post_edit.result import keep_step
from ..respec.post_edit.reveal_step import RevealStep
from ..respec.post_edit.undo_step import UndoStep, answers_turn
from ..respec.store import open_store, workflow_store_root
from ..respec.store.turns import MAX_META_BYTES
from ..respec.text import clip, read_json
from ..respec.turn import keep_turn
from .boundary import UNCONNECTED, guard_steps_in, history_in, plan_for_history, step_in, unevaluated
from .common import History as HistorySocket, Plan, image_from_comfy, images_to_comfy
from .guard_nodes import GuardRecord, Reveal

CATEGORY = "ReSpec/history"
MAX_IDS_BYTES = 4096   # editor_image_ids as JSON text (the Reference Selector's are a few bytes)
MODES = ["new", "load", "rewind", "branch", "in-graph"]


def _blocked():
    """ComfyUI's silent ExecutionBlocker: the nodes fed by this output do not run (a rewind is an
    undo, not a turn). Outside ComfyUI (tests) a stand-in with the same meaning."""
    try:
        from comfy_execution.graph_utils import ExecutionBlocker
    except ImportError:
        try:
            from comfy_execution.graph import ExecutionBlocker
        except ImportError:
            return Blocked(None)
    return ExecutionBlocker(None)


class Blocked:
    """What _blocked returns outside ComfyUI (same constructor as ComfyUI's ExecutionBlocker)."""

    def __init__(self, message):
        self.message = message


def _info(hist: History, mode: str) -> str:
    return json.dumps({"mode": mode, "session_id": hist.session_id, "version": hist.version,
                       "turns": len(hist), "latest_turn": hist.next_turn - 1,
                       "store": hist.store_root, "current_image": hist.current.image.digest})


class ReSpecHistoryStore(io.ComfyNode):
    """Start, load, rewind or branch an editing session; or start a history inside this graph."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecHistoryStore", display_name="History Store (ReSpec)", category=CATEGORY,
            search_aliases=["undo", "rewind", "branch", "session", "history", "conversation"],
            description=("Holds the editing history. 'new' starts a session from an image (or continues it "
                         "when it already exists with the same original image); 'load' continues a session; "
                         "'rewind' undoes the turns after a given turn and stops there (nothing fed by this node "
                         "runs, so no turn is added); 'branch' copies a session up to a turn under a new id; "
                         "'in-graph' keeps the history only inside this prompt. A new session is saved by its "
                         "first History Append; sessions re-run only when they changed."),
            inputs=[
                io.Combo.Input(id="mode", options=MODES, default="new", tooltip=(
                    "new: start a session from 'image' (continue it if it exists with the same image). "
                    "load: continue an existing session. rewind: keep turns 0..turn, undo the rest, and run "
                    "nothing else (the ReSpec panel's 'Undo to here' does the same). "
                    "branch: copy the session up to 'turn' into 'new_session_id'. "
                    "in-graph: history of this prompt only, nothing saved.")),
                io.String.Input(id="session_id", default="my-session", multiline=None, tooltip=(
                    "Name of the session: 1-64 letters, digits, '_' or '-'. Ignored in in-graph mode.")),
                io.Int.Input(id="turn", default=-1, min=-1, max=1_000_000, tooltip=(
                    "rewind: the last turn to keep (0 = only the original image). "
                    "branch: the turn to branch at (-1 = the latest). Unused otherwise.")),
                io.String.Input(id="new_session_id", default="", multiline=None,
                                tooltip="branch: the id of the new session. Unused otherwise."),
                io.String.Input(id="store_dir", default="", multiline=None, tooltip=(
                    "Session store to use: empty = the default store (user/respec/sessions, or "
                    "RESPEC_SESSIONS_DIR); a name = a separate store in a folder of that name inside "
                    "it. Paths outside that folder are refused.")),
                io.Image.Input(id="image", optional=True, tooltip=(
                    "The original image I_0 (new and in-graph modes); one image, not a batch.")),
            ],
            outputs=[
                HistorySocket.Output(id="history", tooltip="The editing history (turn 0 = original image)."),
                io.Image.Output(id="current_image", tooltip="The latest image I_{t-1}: the input of the next edit."),
                io.Int.Output(id="turn_count", tooltip=(
                    "Edits made so far = index of the latest turn (0 when only the original exists).")),
                io.String.Output(id="session_info",
                                 tooltip="JSON: session id, version, number of turns, store directory."),
            ],
            hidden=[io.Hidden.unique_id])

    @classmethod
    def fingerprint_inputs(cls, mode=None, session_id=None, turn=None, new_session_id=None, store_dir=None,
                           image=None):
        # The session's version (and creation uid) is the cache key: re-run exactly when it changed.
        if mode == "in-graph":
            return "in-graph"
        try:
            store = open_store(workflow_store_root(store_dir))
            token = f"{mode}|{turn}|{store.token(session_id)}"
            if mode == "branch":
                token += "|" + store.token(new_session_id)
            return token
        except Exception:
            return float("nan")   # let the run itself report the problem

    @classmethod
    def execute(cls, mode, session_id, turn, new_session_id, store_dir, image=None):
        unique_id = cls.hidden.unique_id
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}; choose one of {MODES}")
        if mode in ("new", "in-graph") and image is None:
            raise InputError(f"mode '{mode}' needs the original image: connect 'image'")
        if mode == "in-graph":
            hist = History.start(image_from_comfy(image, "image"))
        else:
            store = open_store(workflow_store_root(store_dir))
            if mode == "new":
                first = image_from_comfy(image, "image")
                if store.exists(session_id):
                    hist = store.create(session_id, first, exist_ok=True)
                else:
                    # Not stored yet: the first History Append creates it with its turn, so a prompt
                    # that fails before that (a missing model) leaves no empty session behind.
                    hist = replace(History.start(first, session_id=session_id), store_root=str(store.root))
                    return io.NodeOutput(hist, images_to_comfy([hist.current.image]), 0, _info(hist, mode))
            elif mode == "load":
                hist = store.load(session_id)
            elif mode == "rewind":
                if turn < 0:
                    raise InputError("rewind needs 'turn' >= 0: the last turn to keep (0 keeps only the original)")
                hist = store.rewind(session_id, turn)
                web.send_history(hist, mode, unique_id)
                # An undo, not a turn: block everything this node feeds, so no edit runs and no
                # turn is appended (the request would otherwise come back as turn turn+1).
                return io.NodeOutput(*(_blocked() for _ in range(4)))
            else:
                hist = store.branch(session_id, new_session_id.strip(), None if turn < 0 else turn,
                                    exist_ok=True)
        web.send_history(hist, mode, unique_id)
        return io.NodeOutput(hist, images_to_comfy([hist.current.image]), hist.next_turn - 1, _info(hist, mode))


class ReSpecHistoryAppend(io.ComfyNode):
    """Add this turn (instruction, sent instruction, plan, edited image) to the history."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecHistoryAppend", display_name="History Append (ReSpec)", category=CATEGORY,
            search_aliases=["history", "session", "save turn"],
            description=("Appends turn t to the history. A session history is saved to its store; queueing "
                         "the same prompt again, or re-running this node on the same inputs, never adds "
                         "the turn twice. An in-graph history is extended in memory only. The turn keeps "
                         "its change mask (the pixels this edit changed, ignoring a global colour drift), "
                         "which the panel overlays and the provenance selector reads."),
            inputs=[
                HistorySocket.Input(id="history",
                              tooltip="The history before this turn (from History Store or a previous Append)."),
                io.Image.Input(id="image", tooltip="This turn's edited image I_t (one image)."),
                io.String.Input(id="instruction", multiline=True, default="",
                                tooltip="The user's instruction P_t for this turn."),
                io.String.Input(id="sent_instruction", optional=True, multiline=True, default="", tooltip=(
                    "The instruction actually sent to the editor (the rewritten one); "
                    "empty = same as 'instruction'.")),
                Plan.Input(id="plan", optional=True,
                           tooltip="The controller's plan for this turn, kept with the turn."),
                io.String.Input(id="meta", optional=True, multiline=True, default="", tooltip=(
                    "Extra data to keep with the turn as a JSON object, e.g. {\"seed\": 1, \"editor\": \"klein\"}.")),
                io.String.Input(id="editor_image_ids", optional=True, default="", multiline=None, force_input=True,
                                tooltip=("The Reference Selector's image_ids: which history images the editor got, "
                                         "kept with the turn (results rows report them).")),
                Reveal.Input(id="reveal", optional=True, lazy=True, tooltip=(
                    "Reveal Composite's record: which pixels were "
                    "pasted from which past image, kept with the turn (connect its image output to 'image'). "
                    "Not asked for on a turn the Drift Guard's history first answered (no edit was made).")),
                GuardRecord.Input(id="guard", optional=True, tooltip=(
                    "Drift Guard's record: what it kept of the edit, kept with the "
                    "turn after Reveal's (connect its image output to 'image'). When its history first "
                    "answered the turn: the turn is kept as taken back from history, the editor not run.")),
            ],
            outputs=[
                HistorySocket.Output(id="history", tooltip="The history with this turn added."),
                io.Image.Output(id="current_image", tooltip="This turn's image I_t (the next turn's input)."),
            ],
            hidden=[io.Hidden.prompt, io.Hidden.unique_id])

    @classmethod
    def check_lazy_status(cls, reveal=UNCONNECTED, guard=None, **_inputs):
        """Ask ComfyUI for Reveal Composite's record unless the Drift Guard's history first answered the
        turn (Reveal then never runs: it needs the editor's image)."""
        if any(answers_turn(v) for v in (guard if isinstance(guard, tuple) else (guard,))):
            return []
        return unevaluated(reveal=reveal)

    @classmethod
    def execute(cls, history, image, instruction, sent_instruction="", plan=None, meta="", editor_image_ids="",
                reveal=None, guard=None):
        prompt, unique_id = cls.hidden.prompt, cls.hidden.unique_id
        history = history_in(history)
        if plan is not None:
            plan, history = plan_for_history(plan, history, "History Append")
        check_request(instruction, "the instruction")
        check_request(sent_instruction or "", "the sent instruction")
        arr = image_from_comfy(image, "image")
        sent = sent_instruction if (sent_instruction or "").strip() else instruction
        meta_d = cls._meta(meta)
        ids = cls._ids(editor_image_ids) if (editor_image_ids or "").strip() else None
        masks: dict = {}
        # History first, Reveal, then the guard, as run_turn runs them; kept as run_turn keeps them.
        guarded = guard_steps_in(guard) if guard is not None else []
        revealed = [step_in(reveal, RevealStep.name, "Reveal Composite", "reveal")] if reveal is not None else []
        undo = [s for s in guarded if s.step == UndoStep.name]
        steps = undo + revealed + [s for s in guarded if s.step != UndoStep.name]
        if any(answers_turn(s) for s in undo):
            # Taken back from history: no edit was made, so the editor got nothing and was sent nothing.
            arr = cls._answered(arr, undo[0], revealed)
            sent, ids, meta_d["editor_run"] = "", [], False
        if steps:
            meta_d["post_edit"] = meta_d.get("post_edit", [])
            for result in steps:
                keep_step(meta_d["post_edit"], masks, result)
        append = None   # an in-graph history: History.append, in memory only
        if history.session_id is not None:
            # A session History Store left to be created here ('new') is created by append_once in
            # the transaction of this first turn, after every check of the turn passed.
            append = partial(open_store(history.store_root).append_once, history, prompt=prompt, node_id=unique_id)
        new = keep_turn(history, arr, instruction, sent_instruction=sent, plan=plan, editor_image_ids=ids,
                        meta=meta_d, masks=masks, append=append)
        web.send_history(new, "append", unique_id)
        return io.NodeOutput(new, images_to_comfy([new.current.image]))

    @staticmethod
    def _answered(arr, undo, revealed) -> StoredImage:
        """The image of a turn history first answered (hashed once, for the append too), checked: it is
        the answer, and no record of an edit goes with it."""
        if revealed:
            raise InputError("the Drift Guard answered this turn from history (the editor was not run), but "
                             "'reveal' holds Reveal Composite's record of an edit that was not kept: on such a "
                             "turn leave 'reveal' unevaluated (in a graph its lazy input is not asked for)")
        image = StoredImage.of(arr)
        if image.digest != undo.image.digest:
            raise InputError("the Drift Guard answered this turn from history, but 'image' is not its image: "
                             "connect the Drift Guard's image output to History Append's 'image'")
        return image

    @staticmethod
    def _ids(text: str) -> list[int]:
        ids = read_json(text, "editor_image_ids", max_bytes=MAX_IDS_BYTES,
                        example="a JSON list of image ids like [0, 2]")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise InputError(f"editor_image_ids must be a JSON list of image ids like [0, 2] (connect the Reference "
                             f"Selector's image_ids output), got {clip(text)}")
        return ids

    @staticmethod
    def _meta(meta: str) -> dict:
        if not (meta or "").strip():
            return {}
        value = read_json(meta, "meta", max_bytes=MAX_META_BYTES, example='a JSON object like {"seed": 1}')
        if not isinstance(value, dict):
            raise InputError(f"meta must be a JSON object like {{\"seed\": 1}}, got {type(value).__name__}")
        return value


class ReSpecHistoryToImages(io.ComfyNode):
    """Every turn (or a range) of a history as one IMAGE batch plus a text log."""

    @classmethod
    def define_schema(cls):
        return node_schema(
            node_id="ReSpecHistoryToImages", display_name="History to Images (ReSpec)", category=CATEGORY,
            search_aliases=["gallery", "conversation", "all turns", "timeline", "history images"],
            description=("Outputs the images of a whole conversation (or of turns first..last) as one IMAGE batch, "
                         "for Save Image or Preview Image, and a text log of the turns. A batch holds one size: "
                         "every image is brought to the size of the first turn of the range ('fit')."),
            inputs=[
                HistorySocket.Input(id="history", tooltip="The history (from History Store or History Append)."),
                io.Int.Input(id="first_turn", default=0, min=0, max=1_000_000,
                             tooltip="The first turn to output (0 = the original image)."),
                io.Int.Input(id="last_turn", default=-1, min=-1, max=1_000_000,
                             tooltip="The last turn to output (-1 = the latest)."),
                io.Combo.Input(id="fit", options=list(FITS), default="pad", tooltip=(
                    "Images of another size than the first one: 'pad' scales them to fit inside it and "
                    "centres them on black (nothing is cut); 'stretch' scales them to exactly that size; "
                    "'crop' scales them to cover it and cuts the overflow. Same-size images are unchanged.")),
            ],
            outputs=[
                io.Image.Output(id="images", tooltip=(
                    "The turns' images I_first..I_last as one batch, all the size of I_first.")),
                io.String.Output(id="log", tooltip=(
                    "One line per turn: index, size, the request and the instruction sent, resizing.")),
                io.Int.Output(id="count", tooltip="Number of images in the batch."),
            ])

    @classmethod
    def execute(cls, history, first_turn, last_turn, fit):
        frames, log, indices = history_images(history_in(history), first_turn, last_turn, fit)
        return io.NodeOutput(images_to_comfy(frames), log, len(indices))


NODE_CLASS_MAPPINGS = {
    "ReSpecHistoryStore": ReSpecHistoryStore,
    "ReSpecHistoryAppend": ReSpecHistoryAppend,
    "ReSpecHistoryToImages": ReSpecHistoryToImages,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "ReSpecHistoryStore": "History Store (ReSpec)",
    "ReSpecHistoryAppend": "History Append (ReSpec)",
    "ReSpecHistoryToImages": "History to Images (ReSpec)",
}
