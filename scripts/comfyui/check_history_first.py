"""History first in a real ComfyUI (issue 43), for scripts/comfyui/check_in_comfyui.py --execute.

A conversation whose turn 1 added a hat and whose turn 2 removes it, queued as an artist queues it:
on the removal turn the Drift Guard's history_first answers from the history, its lazy `edited`
input is not asked for, and ComfyUI must not run the editor (the sampler) nor anything of its branch.

The add turn: with tiny random-weight models the editor's add turn redraws the whole picture, which
is not what an addition is. So the session's turns 0 and 1 are written through the pack's own session
store API (SessionStore.create, then respec.turn.keep_turn, as History Append keeps a turn: the
change mask with it) into the store ComfyUI reads (<base>/user/respec/sessions): I_0 is one of the
pack's shipped sample photos, I_1 the same photo with the simulated world's "hat" sprite drawn on its
left (respec/sim/sprites.py), a real, local addition. Turn 2 ("remove the hat") is then queued with
the shipped conversational_provenance_flux2 graph (and conversational_flux2_diffusers) (History Store mode 'load', the tiny klein editor),
followed on ComfyUI's websocket: the nodes that ran in order (`executing`), those taken from its cache
(`execution_cached`), and the time from the POST /prompt to `execution_success`.

Checks: on the removal turn the editor (ReSpecFlux2Edit), its loader and Reveal Composite did not
run, the Drift Guard and History Append did (in the provenance graph, and in the VLM graph
conversational_flux2_diffusers with the tiny controller); the session's turn 2 is I_0 byte for byte (its digest),
with editor_run false, no editor images, the undo_source mask and the words "taken back from history:
the hat added at turn 1; the editor was not run". On the first session a turn 3 then asks turn 1's
request again: history first answers with I_1 (a repeat: respec/pixels/undo.py repeat_from_history),
the editor not run. A control session, the same turns with the guard's
history_first off, must run the editor (so the check can see it run).
"""
from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
import uuid
from functools import partial
from pathlib import Path

from comfyui_harness import http_json, log

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE, VLM = "conversational_provenance_flux2", "conversational_flux2_diffusers"
ADD, REMOVE = "add a hat on the left", "remove the hat"
WORDS = "taken back from history: the hat added at turn 1; the editor was not run"
EDITOR_BRANCH = {"ReSpecFlux2Edit", "ReSpecFlux2Loader", "ReSpecRevealComposite"}
ANSWER = {"ReSpecHistoryStore", "ReSpecDriftGuard", "ReSpecHistoryAppend", "SaveImage"}
# (session, picture size w×h, history_first, graph): the undo at two sizes, the control at the small
# one, and the VLM graph (the tiny controller plans; the covering turn is then located from the
# request). The small one first: the first answered prompt of a server also pays its first imports.
SESSIONS = (("check-undo-256", (256, 192), True, PROVENANCE), ("check-undo-1024", (1024, 768), True, PROVENANCE),
            ("check-undo-off", (256, 192), False, PROVENANCE), ("check-undo-vlm", (256, 192), True, VLM))


def store_root(base: Path) -> Path:
    """The default session store of a ComfyUI started with --base-directory `base` (respec/paths.py:
    <user dir>/respec/sessions)."""
    return base / "user" / "respec" / "sessions"


def added_hat(size: tuple[int, int]):
    """(I_0, I_1): a shipped sample photo at `size` and the same photo with the sim world's hat sprite
    drawn on its left (uint8 H×W×3)."""
    import numpy as np
    from respec.sim.generate import photo_image, shipped_photo_refs
    from respec.sim.sprites import draw_sprite

    w, h = size
    i0 = np.asarray(photo_image(shipped_photo_refs()[0]).convert("RGB").resize((w, h)), dtype=np.uint8).copy()
    bw, bh = w // 4, h // 4
    rgb, alpha = draw_sprite("hat", bw, bh)
    y, x = h // 3, w // 8
    i1 = i0.copy()
    patch = i1[y:y + bh, x:x + bw]
    patch[alpha] = np.round(rgb[alpha] * 255).astype(np.uint8)
    return i0, i1


def seed_session(root: Path, session: str, size: tuple[int, int]) -> str:
    """Write turns 0 and 1 (the hat added) of `session` through the pack's session store; returns I_0's digest."""
    from respec.store import open_store
    from respec.turn import keep_turn

    i0, i1 = added_hat(size)
    store = open_store(root)
    hist = store.create(session, i0)
    keep_turn(hist, i1, ADD, sent_instruction=ADD, meta={"editor": "seeded by check_history_first.py"},
              append=partial(store.append_once, hist))
    return hist.current.image.digest


async def _watched(url: str, prompt: dict, timeout: float) -> dict:
    """Queue `prompt` and follow it on the websocket: {"ran": node ids in order, "cached": ids,
    "seconds": POST -> execution_success, "server_seconds": execution_start -> success by the server's
    timestamps, "node_seconds": [(id, s)]: from a node's `executing` message to the next message of the
    prompt (its run, as this client sees it), "error": '' or why it did not finish}."""
    import websockets

    client = uuid.uuid4().hex
    ws_url = url.replace("http://", "ws://", 1) + f"/ws?clientId={client}"
    out = {"ran": [], "cached": [], "seconds": None, "server_seconds": None, "node_seconds": [], "error": ""}
    running = None   # (node id, when its executing message came)
    async with websockets.connect(ws_url, max_size=None) as ws:
        t0 = time.perf_counter()
        status, body = await asyncio.to_thread(http_json, "POST", f"{url}/prompt",
                                               {"prompt": prompt, "client_id": client})
        pid = body.get("prompt_id") if isinstance(body, dict) else None
        if status != 200 or not pid or body.get("node_errors"):
            out["error"] = f"/prompt answered {status}: {str(body)[:500]}"
            return out
        started = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.recv(), timeout=max(1.0, deadline - time.monotonic()))
            if not isinstance(raw, str):
                continue   # a preview image
            msg = json.loads(raw)
            kind, data = msg.get("type"), msg.get("data") or {}
            if data.get("prompt_id") != pid:
                continue
            now = time.perf_counter()
            if running is not None and kind in ("executing", "execution_success"):
                out["node_seconds"].append((running[0], now - running[1]))
                running = None
            if kind == "execution_start":
                started = data.get("timestamp")
            elif kind == "execution_cached":
                out["cached"] += [str(n) for n in data.get("nodes") or []]
            elif kind == "executing" and data.get("node") is not None:
                out["ran"].append(str(data["node"]))
                running = (str(data["node"]), now)
            elif kind == "execution_success":
                out["seconds"] = now - t0
                if started is not None and data.get("timestamp") is not None:
                    out["server_seconds"] = (data["timestamp"] - started) / 1000.0
                return out
            elif kind in ("execution_error", "execution_interrupted"):
                out["error"] = f"{kind}: {data.get('node_type')} {str(data.get('exception_message', ''))[:500]}"
                return out
        out["error"] = f"did not finish within {timeout:g} s"
    return out


def removal_prompt(wf: dict, image_name: str, session: str, history_first: bool, helpers: dict,
                   request: str = REMOVE) -> dict:
    """The shipped graph for the next turn (the removal, unless `request` says another) on the seeded
    `session` (History Store 'load'), with the Drift Guard's history_first as given."""
    prompt = helpers["conversation_prompt"](wf, image_name, session, request)
    for node in prompt.values():
        if node["class_type"] == "ReSpecHistoryStore":
            node["inputs"]["mode"] = "load"
        elif node["class_type"] == "ReSpecDriftGuard":
            node["inputs"]["history_first"] = history_first
    return prompt


def execute_history_first(url: str, base: Path, tiny: dict, helpers: dict) -> list[str]:
    """The module docstring's run and checks; one PASS/FAIL line each; returns the problems."""
    sys.path.insert(0, str(ROOT))
    from respec.bench import workflow

    problems: list[str] = []
    check = helpers["checker"]("execute/history-first", problems)
    image_name, why = helpers["upload_picture"](url)
    if image_name is None:
        check("upload", False, why)
        return problems
    graphs = {name: helpers["use_tiny_models"](workflow.load_api_workflow(workflow.shipped_workflow(name)), tiny)
              for name in (PROVENANCE, VLM)}
    for session, size, history_first, graph in SESSIONS:
        wf = graphs[graph]
        i0 = seed_session(store_root(base), session, size)
        status, body = http_json("GET", f"{url}/respec/sessions/{session}")
        seeded = [t.get("index") for t in body.get("turns") or []] if isinstance(body, dict) else None
        if status != 200 or seeded != [0, 1]:
            check(f"{session}: seeded", False, f"GET /respec/sessions/{session} answered {status}: {str(body)[:300]}")
            return problems
        prompt = removal_prompt(wf, image_name, session, history_first, helpers)
        run, ran = _queued(url, prompt)
        if run["error"]:
            check(f"{session}: turn 2 ran", False, run["error"])
            continue
        log(f"      {session} ({graph}, {size[0]}x{size[1]}, history_first {history_first}): prompt queued -> done "
            f"{run['seconds']:.3f} s (server: execution_start -> success {run['server_seconds']:.3f} s); nodes that "
            f"ran, in order, with their seconds: "
            f"{[(prompt[n]['class_type'], round(sec, 3)) for n, sec in run['node_seconds']]}; "
            f"from cache: {sorted(prompt[n]['class_type'] for n in run['cached'])}")
        turns = _session_turns(url, session)
        last = turns[-1] if len(turns) == 3 else {}
        if history_first:
            _check_answered(check, session, ran, last, i0)
            if session == SESSIONS[0][0]:
                _check_repeated(check, url, session, removal_prompt(wf, image_name, session, True, helpers, ADD),
                                turns[1].get("image") if len(turns) > 1 else None)
        else:
            check(f"{session}: with history_first off the editor runs (the control)",
                  "ReSpecFlux2Edit" in ran and last.get("image") != i0 and (last.get("meta") or {}).get(
                      "editor_run") is not False, f"ran {sorted(set(ran) & EDITOR_BRANCH)}")
    return problems


def _queued(url: str, prompt: dict) -> tuple[dict, list[str]]:
    """Queue `prompt` and follow it (_watched): its run and the class types of the nodes that ran, in order."""
    run = asyncio.run(_watched(url, copy.deepcopy(prompt), timeout=900))
    return run, [prompt[n]["class_type"] for n in run["ran"]]


def _session_turns(url: str, session: str) -> list[dict]:
    """The session's turns as the server's session route lists them ([] when it answers otherwise)."""
    _, body = http_json("GET", f"{url}/respec/sessions/{session}")
    return body.get("turns") or [] if isinstance(body, dict) else []


def _check_repeated(check, url: str, session: str, prompt: dict, i1: str | None) -> None:
    """Turn 3 asks turn 1's request again of I_2 = I_0: history first answers with I_1 (a repeat), and
    ComfyUI runs neither the editor nor its branch."""
    run, ran = _queued(url, prompt)
    if run["error"]:
        check(f"{session}: turn 3 (turn 1's request again) ran", False, run["error"])
        return
    log(f"      {session} turn 3 ({ADD!r} again): prompt queued -> done {run['seconds']:.3f} s; nodes that ran: {ran}")
    turns = _session_turns(url, session)
    turn = turns[3] if len(turns) == 4 else {}
    entry = next((e for e in (turn.get("meta") or {}).get("post_edit") or [] if e.get("step") == "history_undo"), {})
    check(f"{session}: turn 1's request asked again after its undo is answered with I_1, the editor not run",
          not set(ran) & EDITOR_BRANCH and turn.get("image") == i1 and i1 is not None
          and entry.get("method") == "history-repeat-v1",
          f"editor branch that ran: {sorted(set(ran) & EDITOR_BRANCH) or 'none'}; turn 3 image "
          f"{str(turn.get('image'))[:12]}, I_1 {str(i1)[:12]}; method {entry.get('method')!r}")


def _check_answered(check, session: str, ran: list[str], turn: dict, i0: str) -> None:
    meta = turn.get("meta") or {}
    entry = next((e for e in meta.get("post_edit") or [] if e.get("step") == "history_undo"), {})
    check(f"{session}: the removal turn ran neither the editor nor its branch",
          not set(ran) & EDITOR_BRANCH and ANSWER <= set(ran),
          f"editor branch that ran: {sorted(set(ran) & EDITOR_BRANCH) or 'none'}; of the answer's nodes ran "
          f"{sorted(ANSWER & set(ran))}")
    check(f"{session}: the kept image is I_0 (I_(k-1)), byte for byte", turn.get("image") == i0,
          f"turn 2 image {str(turn.get('image'))[:12]}, I_0 {i0[:12]}")
    check(f"{session}: the turn is kept as taken back from history",
          meta.get("editor_run") is False and meta.get("editor_image_ids") == [] and "undo_source" in (
              turn.get("masks") or {}) and entry.get("words") == WORDS,
          f"editor_run {meta.get('editor_run')}, editor_image_ids {meta.get('editor_image_ids')}, masks "
          f"{sorted(turn.get('masks') or {})}, words {entry.get('words')!r}")
