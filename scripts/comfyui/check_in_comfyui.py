"""Check the pack and its workflows against a real ComfyUI (a source checkout), offline, on CPU.

    python scripts/comfyui/check_in_comfyui.py --comfyui /path/to/ComfyUI --python /path/to/its/python

What it does, touching nothing inside the checkout:
1. makes a temporary base directory (--base-directory) whose custom_nodes/ holds a link to this
   pack and whose models/ holds empty placeholder files named like the model files the
   workflows select (so loader drop-downs validate; nothing is ever loaded from them);
2. starts ComfyUI with `--cpu --disable-api-nodes --listen 127.0.0.1 --port <p>` and waits for it;
3. checks that the pack imported and that /object_info lists every node the pack registers,
   and that /api/workflow_templates lists the UI workflows;
4. POSTs every API workflow (workflows/api/*.api.json) to /prompt, and every UI workflow
   converted the way the frontend converts it (using the live /object_info), and reports
   whether validation passed (HTTP 200 with no node_errors). Accepted prompts are deleted from
   the queue / interrupted at once: this checks validation, not execution;
5. with --execute, also RUNS the FLUX.2 benchmark workflow end to end on a 2-turn scenario with
   tiny random-weight models (a tiny Qwen3-VL and a tiny FLUX.2 [klein] built into the temporary
   models folder; masks and scores, which need real detector weights, are replaced by an empty
   score record), queued with the pack's own remote runner: checks that the 3 unused turn slots
   are skipped by ComfyUI's lazy evaluation (none of their controller / editor / append nodes
   runs) and that the Results Writer's row comes back through /history with 2 turns;
   then uses the conversational workflow as an artist would, one queued prompt per turn on
   session "check-conv" (picture sent through /upload/image, tiny models, 2 steps), reading the
   session back through the pack's GET /respec/sessions/check-conv after each prompt: turn 1
   gives turns 0..1; the identical prompt queued again adds nothing; a new request gives turns
   0..2 with a controller call in turn 2's plan; POST .../rewind {"turn": 1} leaves turns 0..1.
   Each prompt's History Store must re-run exactly when the session changed since the previous
   prompt (ComfyUI's execution_cached message in /history says whether it ran); then history
   first (check_history_first.py): on sessions whose turn 1 added a hat (written through the
   pack's session store), the removal turn queued in the provenance graph must not run the
   editor, its loader or Reveal Composite (the nodes that ran, from the websocket), must keep I_0
   exactly and say so in words; the same with the guard's history_first off runs the editor;
6. with --frontend, opens ComfyUI's own frontend in headless Chromium (DevTools protocol) and
   loads every UI workflow with app.loadGraphData, as drag-and-drop or the template browser
   does: no node may be missing or flagged, no error may be logged, and the frontend's own
   UI -> API conversion (app.graphToPrompt) must equal the shipped .api.json file. A graph with
   an unknown node type is loaded first as a control: the check must flag it; with --vue-nodes, the
   workflows, every pack node and the sidebar's composer again with the frontend's Nodes 2.0 on
   (check_vue_nodes.py); every chat graph opened as the template browser opens it on 1366 x 768,
   1600 x 1000 and 1920 x 1080 pages, classic and (with --vue-nodes) Nodes 2.0: node text drawn,
   nothing overlapping (check_readable.py; --readable-only runs just that);
7. stops the server and prints a summary; exit status 0 only when everything passed.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import check_blueprints
import check_composer
import check_first_hour
import check_readable
import check_history_first
import check_native
import check_vue_nodes
import object_info_listing
from comfyui_harness import (HarnessError, Page, build_tiny_models, checker, free_port, http_json, log,
                             require_check_packages, start_chromium, start_comfyui, stop, upload_picture)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"
PACK_DIR_NAME = "ReSpec-ComfyUI"
UI_ONLY = {"Note", "MarkdownNote", "PrimitiveNode", "Reroute"}
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"   # a V3 combo whose options add inputs (TextGenerate's sampling_mode)
# ComfyUI core nodes newer than 0.8.0 (scripts/workflows/comfy_core_nodes.json's newer_nodes): a graph that uses
# one is expected to be refused by an older ComfyUI, and is reported so, not as a failure.
NEWER_CORE_NODES = json.loads((ROOT / "scripts" / "workflows" / "comfy_core_nodes.json").read_text(encoding="utf-8")).get(
    "newer_nodes", {})

CORE_TABLE = json.loads((ROOT / "scripts" / "workflows" / "comfy_core_nodes.json").read_text(encoding="utf-8"))["nodes"]


def newer_optional_default(info: dict, class_type: str, name: str, value) -> bool:
    """Is `name` an optional input this ComfyUI's `class_type` has and the workflows' core-node table
    (read from the oldest supported ComfyUI) does not, at its default `value`? The frontend then sends
    it (CFGNorm's pre_cfg=False on 0.24) while the shipped file, written for 0.8 too, leaves it out:
    the same prompt, as the server fills a missing optional input with its default."""
    entry = ((info.get(class_type) or {}).get("input", {}).get("optional") or {}).get(name)
    table = CORE_TABLE.get(class_type)
    if entry is None or table is None or any(name in (table["input"].get(sec) or {}) for sec in ("required", "optional")):
        return False
    opts = entry[1] if len(entry) > 1 and isinstance(entry[1], dict) else {}
    return "default" in opts and opts["default"] == value


# Loader inputs whose drop-down lists files from a models/ subfolder: (class, input) -> folder.
# Inputs of pack nodes that list model files are found from the pack (see _pack_model_inputs).
CORE_MODEL_INPUTS = {
    ("UNETLoader", "unet_name"): "diffusion_models",
    ("CLIPLoader", "clip_name"): "text_encoders",
    ("VAELoader", "vae_name"): "vae",
    ("LoraLoaderModelOnly", "lora_name"): "loras",
    ("CheckpointLoaderSimple", "ckpt_name"): "checkpoints",
}


def pack_nodes(python: str) -> dict:
    """Names and model-folder inputs of the pack's nodes, and the V3 nodes' listing by the pack's
    stand-in schema, read by importing the pack (outside ComfyUI) with the given python."""
    code = (
        "import importlib.util, json, sys\n"
        f"root = {str(ROOT)!r}\n"
        "spec = importlib.util.spec_from_file_location('respec_pack_check', root + '/__init__.py',"
        " submodule_search_locations=[root])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['respec_pack_check'] = m\n"
        "spec.loader.exec_module(m)\n"
        "folders = getattr(sys.modules.get('respec_pack_check.respec.comfy'), 'MODEL_FOLDERS', {})\n"
        # The V3 nodes as the pack's stand-in for ComfyUI's schema lists them (respec/comfy_io.py).
        "v3 = {n: c.GET_NODE_INFO_V1() for n, c in m.NODE_CLASS_MAPPINGS.items() if hasattr(c, 'define_schema')}\n"
        "print(json.dumps({'nodes': sorted(m.NODE_CLASS_MAPPINGS), 'folders': folders, 'v3': v3}))\n")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"could not import the pack with {python}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_placeholders(base: Path, workflows: list[dict], object_info_spec: dict | None = None,
                       ui_files: list[Path] = ()) -> list[str]:
    """Create empty files for the model names the workflows' core loaders select, and for every file
    a UI workflow lists in a loader's properties.models (a bypassed option's loader too: the frontend
    checks those on load)."""
    wanted = [(folder, node["inputs"].get(name)) for wf in workflows for node in wf.values()
              for (cls, name), folder in CORE_MODEL_INPUTS.items() if node["class_type"] == cls]
    for path in ui_files:
        wanted += [(m.get("directory"), m.get("name")) for n in json.loads(path.read_text(encoding="utf-8"))["nodes"]
                   for m in (n.get("properties") or {}).get("models") or []]
    made = []
    for folder, value in wanted:
        if isinstance(folder, str) and isinstance(value, str):
            p = base / "models" / folder / value
            if not p.exists():
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(b"")
                made.append(f"models/{folder}/{value}")
    return made


BYPASS = 4   # LiteGraph's mode of a bypassed node


def resolve_bypass(link: list | None, nodes: dict, links: dict) -> list | None:
    """The link an input really gets once bypassed nodes are taken out, by the frontend's rule: a
    bypassed node passes on its input at the output's slot index when that input has the output's
    type, else its first input of that type (followed through further bypassed nodes); None when
    there is no such input or it is not connected (the input is then left out of the prompt)."""
    while link is not None and nodes[link[1]].get("mode", 0) == BYPASS:
        src = nodes[link[1]]
        want = src["outputs"][link[2]]["type"]
        slots = src.get("inputs") or []
        order = ([link[2]] if link[2] < len(slots) else []) + list(range(len(slots)))
        match = next((i for i in order if slots[i]["type"] == want), None)
        link = links.get(slots[match]["link"]) if match is not None else None
    return link


def ui_to_api(ui: dict, info: dict) -> dict:
    """The frontend's UI -> API conversion (widgets by position; seed/upload extras skipped; bypassed
    nodes left out and links through them resolved, `resolve_bypass`)."""
    links = {l[0]: l for l in ui["links"]}
    nodes = {n["id"]: n for n in ui["nodes"]}
    api = {}
    for node in ui["nodes"]:
        if node["type"] in UI_ONLY or node.get("mode", 0) != 0:
            continue
        spec = info.get(node["type"])
        if spec is None:
            raise KeyError(node["type"])
        values = list(node.get("widgets_values") or [])
        slots = {s["name"]: s for s in node.get("inputs", [])}
        inputs = {}
        for section in ("required", "optional"):
            entries = spec["input"].get(section) or {}
            for name in spec.get("input_order", {}).get(section, list(entries)):
                entry = entries[name]
                t = "COMBO" if isinstance(entry[0], list) or entry[0] == DYNAMIC_COMBO else entry[0]
                opts = entry[1] if len(entry) > 1 and isinstance(entry[1], dict) else {}
                if t in WIDGET_TYPES and not opts.get("forceInput"):
                    if not values and section == "optional" and newer_optional_default(info, node["type"], name,
                                                                                       opts.get("default")):
                        continue   # an optional widget newer than the file: the server uses its default
                    inputs[name] = values.pop(0)
                    if entry[0] == DYNAMIC_COMBO:   # the chosen option's own widgets follow it, as "name.sub"
                        option = next((o for o in opts.get("options", []) if o["key"] == inputs[name]), {})
                        for sub_section in ("required", "optional"):
                            for sub in (option.get("inputs", {}).get(sub_section) or {}):
                                inputs[f"{name}.{sub}"] = values.pop(0)
                    if t == "INT" and (opts.get("control_after_generate") or name in ("seed", "noise_seed")):
                        values.pop(0)
                    if opts.get("image_upload"):
                        values.pop(0)
                slot = slots.get(name)
                l = resolve_bypass(links[slot["link"]], nodes, links) if slot and slot.get("link") is not None else None
                if l is not None:
                    inputs[name] = [str(l[1]), l[2]]
                elif slot and slot.get("link") is not None:
                    inputs.pop(name, None)   # a link into a bypassed option: the input is not sent
        api[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return api




def use_tiny_models(wf: dict, tiny: dict) -> dict:
    """Point an API workflow's controller and FLUX.2 loaders at the tiny models, on CPU in fp32
    (in place; returns wf)."""
    for node in wf.values():
        if node["class_type"] == "ReSpecVLMLoader":
            # by folder name: the drop-down lists models/LLM through ComfyUI's folder API
            node["inputs"].update(model=Path(tiny["vlm"]).name, device="cpu", dtype="fp32", max_new_tokens=48)
        elif node["class_type"] == "ReSpecFlux2Loader":
            node["inputs"].update(model=Path(tiny["klein"]).name, dtype="fp32")
    return wf


SCORING = ("ReSpecMaskerLoader", "ReSpecScorerLoader", "ReSpecScenarioMasks", "ReSpecOccurScore")


def without_scoring(wf: dict) -> dict:
    """The benchmark graph with masks and scores replaced by an empty score record (they need real
    detector weights, which are not here); in place, returns wf."""
    from respec.bench import workflow
    for name in [k for k, n in wf.items() if n["class_type"] in SCORING]:
        del wf[name]
    wf["9001"] = {"class_type": "PrimitiveString", "inputs": {"value": "{}"},
                  "_meta": {"title": "empty score record (no detector weights here)"}}
    for node in wf.values():
        if node["class_type"] == workflow.RESULTS_WRITER:
            node["inputs"]["score_record"] = ["9001", 0]
    return wf


def run_benchmark(url: str, name: str, tiny: dict, config: dict, chain: set[str]) -> tuple[list[str], dict, dict | None]:
    """Run the benchmark workflow `name` on a 2-turn scenario (tiny controller, `config` widget
    values); check that the turn-slot nodes of `chain` ran in slots 1-2 only and one row came back.
    Returns (problems, the prompt, the row)."""
    sys.path.insert(0, str(ROOT))   # a script: use the repo's core to fill and queue (respec.bench)
    import asyncio
    from respec.bench import remote, workflow
    from respec.bench.configs import turn_seed
    from respec.occur.scenario import load_dataset

    ds = load_dataset("occur_sample")
    index = next(i for i, sc in enumerate(ds) if sc.num_turns == 2)
    sc = ds[index]
    wf = use_tiny_models(without_scoring(workflow.load_api_workflow(workflow.shipped_workflow(name))), tiny)
    prompt = workflow.fill_workflow(wf, dataset="occur_sample", index=index,
                                    turn_seed=lambda t: turn_seed(0, sc.id, t), config=config)
    executed: list[str] = []
    rows: list[dict] = []

    def on_event(server, label, kind, data):
        if kind == "executing" and data.get("node") is not None:
            executed.append(str(data["node"]))

    t0 = time.monotonic()
    summary = asyncio.run(remote.run_jobs([(index, sc.id, prompt)], [url],
                                          lambda i, label, row, info: rows.append(row),
                                          remote.QueueSettings(poll_interval=2.0, max_attempts=1, timeout=1800),
                                          on_event=on_event))
    log(f"executed {name} on {sc.id} ({sc.num_turns} turns) in {time.monotonic() - t0:.1f} s; "
        f"{len(set(executed))} of {len(prompt)} nodes ran")
    problems = []
    if summary.failed:
        problems += [f"{a.kind}: {a.message}" for a in summary.failed[sc.id]]
        return problems, prompt, None
    slots = workflow.slot_turns(prompt)
    ran_late = sorted(f"{nid} {prompt[nid]['class_type']} (slot {slots[nid]})" for nid in set(executed)
                      if prompt[nid]["class_type"] in chain and slots[nid] > sc.num_turns)
    ran_early = {nid for nid in set(executed) if prompt[nid]["class_type"] in chain and slots[nid] <= sc.num_turns}
    want_early = {nid for nid, n in prompt.items() if n["class_type"] in chain and slots[nid] <= sc.num_turns}
    log(f"turn-slot nodes run: slots 1-{sc.num_turns}: {len(ran_early)}/{len(want_early)}; "
        f"slots {sc.num_turns + 1}-5: {len(ran_late)} (expected 0)")
    if ran_late:
        problems.append(f"nodes of unused turn slots ran: {ran_late}")
    if ran_early != want_early:
        problems.append(f"nodes of used turn slots did not run: {sorted(want_early - ran_early)}")
    row = rows[0] if len(rows) == 1 else None
    if row is None:
        problems.append(f"expected one results row, got {len(rows)}")
    else:
        ids = [t.get("editor_image_ids") for t in row.get("turns") or []]
        log(f"results row: key {row.get('key')}, turns {len(row.get('turns') or [])}, "
            f"vlm_calls {row.get('vlm_calls')}, editor image ids {ids}, editor_reference_ids "
            f"{row.get('editor_reference_ids')}, sent instructions "
            f"{[t.get('sent_instruction', '')[:40] for t in row.get('turns') or []]}")
        if len(row.get("turns") or []) != sc.num_turns or row.get("scenario_id") != sc.id:
            problems.append(f"row has {len(row.get('turns') or [])} turns for {row.get('scenario_id')}")
        if any(i is None for i in ids):
            # Each slot's History Append records what its editor got (the Reference Selector's image_ids).
            problems.append(f"the row does not say which images the editor got at every turn: {ids}")
    return problems, prompt, row


def execute_benchmark(url: str, tiny: dict) -> tuple[list[str], dict, dict | None]:
    """Run benchmark_flux2 (the pack's diffusers klein, tiny) on a 2-turn scenario."""
    return run_benchmark(url, "benchmark_flux2", tiny, {"ReSpecScenarioLoader.max_side": 96, "steps": 2},
                         {"ReSpecPreservationTarget", "ReSpecReferenceSelector", "ReSpecInstructionRewriter",
                          "ReSpecFlux2Edit", "ReSpecHistoryAppend"})


CONV_SESSION = "check-conv"


def queue_and_wait(url: str, prompt: dict, timeout: float = 900) -> tuple[dict | None, str]:
    """POST /prompt, then poll /history/<id> until the prompt finished: (its /history entry,
    '') when it ran to the end, else (entry or None, why not)."""
    status, body = http_json("POST", f"{url}/prompt", {"prompt": prompt, "client_id": "respec-check-conv"})
    pid = body.get("prompt_id") if isinstance(body, dict) else None
    if status != 200 or not pid or (isinstance(body, dict) and body.get("node_errors")):
        return None, "/prompt refused it: " + "; ".join(describe_rejection(status, body))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, hist = http_json("GET", f"{url}/history/{pid}")
        entry = hist.get(pid) if isinstance(hist, dict) else None
        if entry is not None:
            st = entry.get("status") or {}
            if st.get("status_str") == "success" and st.get("completed"):
                return entry, ""
            errors = [f"{d.get('node_id')} {d.get('node_type')}: {d.get('exception_message', '').strip()}"
                      for kind, d in st.get("messages") or [] if kind == "execution_error"]
            return entry, f"prompt {pid} ended with {st.get('status_str')}: {'; '.join(errors) or st}"
        time.sleep(1.0)
    http_json("POST", f"{url}/interrupt", {"prompt_id": pid})
    return None, f"prompt {pid} did not finish within {timeout:g} s"


def _ran(entry: dict, prompt: dict) -> set[str]:
    """Nodes of `prompt` that ComfyUI did not take from its cache (execution_cached message)."""
    cached = set()
    for kind, data in (entry.get("status") or {}).get("messages") or []:
        if kind == "execution_cached":
            cached |= {str(n) for n in data.get("nodes") or []}
    return set(prompt) - cached






def conversation_prompt(wf: dict, image_name: str, session: str, request: str) -> dict:
    """A shipped conversational graph with the artist's picture, session and request (2 steps)."""
    from respec.bench import workflow
    p = copy.deepcopy(wf)
    fed = 0
    for nid, node in p.items():
        cls = node["class_type"]
        if cls == "LoadImage":
            node["inputs"]["image"] = image_name
        elif cls == "ReSpecHistoryStore":
            node["inputs"].update(mode="new", session_id=session)
        elif cls == "ReSpecFlux2Edit":
            node["inputs"]["steps"] = 2
        if cls in ("ReSpecPreservationTarget", "ReSpecProvenanceSelector", "ReSpecHistoryAppend"):
            # "Your request" (a Primitive) feeds them; _set_input sets the primitive.
            fed += workflow.set_input(p, nid, "instruction", request)
    if not fed:
        raise SystemExit("conversational workflow: found no request input to fill")
    return p


PROV_SESSION = "check-prov"


def execute_provenance(url: str, tiny: dict) -> list[str]:
    """Run conversational_provenance_flux2 for two turns on session PROV_SESSION ("add a red box",
    then "remove the red box"): Reference Selector, provenance and Reveal Composite must execute;
    turn 2 must be planned by provenance with no VLM call, keep its change mask, and record what
    Reveal Composite did (pasted or refused, with the reason)."""
    sys.path.insert(0, str(ROOT))
    from respec.bench import workflow
    problems: list[str] = []
    check = checker("execute/provenance", problems)

    image_name, why = upload_picture(url)
    if image_name is None:
        check("upload", False, why)
        return problems
    wf = use_tiny_models(workflow.load_api_workflow(workflow.shipped_workflow("conversational_provenance_flux2")), tiny)
    wanted = {"ReSpecProvenanceSelector", "ReSpecRevealComposite"}
    for node in wf.values():
        if node["class_type"] == "ReSpecDriftGuard":
            # This check is Reveal Composite's: history first (check_history_first.py) would answer the
            # removal and leave Reveal unrun.
            node["inputs"]["history_first"] = False
    for label, request in (("turn 1", "add a red box on the left"), ("turn 2", "remove the red box")):
        prompt = conversation_prompt(wf, image_name, PROV_SESSION, request)
        entry, why = queue_and_wait(url, prompt)
        if why:
            check(label, False, why)
            return problems
        ran = {prompt[n]["class_type"] for n in _ran(entry, prompt)}
        check(f"{label}: nodes ran", wanted <= ran, f"ran {sorted(ran & (wanted | {'ReSpecHistoryAppend'}))}")
    status, body = http_json("GET", f"{url}/respec/sessions/{PROV_SESSION}")
    turns = body.get("turns") if isinstance(body, dict) else None
    if status != 200 or not turns or len(turns) != 3:
        check("session", False, f"GET /respec/sessions/{PROV_SESSION} answered {status}: {str(body)[:300]}")
        return problems
    t2 = turns[2]
    plan, meta = t2.get("plan") or {}, t2.get("meta") or {}
    reveal = next((e for e in meta.get("post_edit") or [] if e.get("step") == "reveal_composite"), {})
    check("turn 2 planned by provenance, no VLM call",
          plan.get("controller") == "provenance" and plan.get("vlm_called") is False and plan.get("is_restoration"),
          f"plan controller {plan.get('controller')!r}, vlm_called {plan.get('vlm_called')}, restoration source "
          f"{plan.get('restoration_source_id')}, image_ids {plan.get('image_ids')}, sent {t2.get('sent_instruction')!r}")
    check("turn 2 keeps its change mask and the Reveal Composite record",
          "change" in (t2.get("masks") or {}) and reveal.get("step") == "reveal_composite",
          f"masks {sorted(t2.get('masks') or {})}; reveal: applied {reveal.get('applied')}, "
          f"reason {reveal.get('reason')!r}")
    return problems


class _Conversation:
    """One session of a conversational graph driven as an artist would: queue a turn, read the
    session back through the pack's GET /respec/sessions/<id>."""

    def __init__(self, url: str, wf: dict, image_name: str, check):
        self.url, self.wf, self.image_name, self.check = url, wf, image_name, check
        self.store_ids = [nid for nid, n in wf.items() if n["class_type"] == "ReSpecHistoryStore"]
        self.last_version = None   # the session version the previous prompt's History Store saw

    def session(self) -> tuple[list[int] | None, dict | str]:
        """(the session's turn indices, its body) or (None, why it could not be read)."""
        status, body = http_json("GET", f"{self.url}/respec/sessions/{CONV_SESSION}")
        if status != 200 or not isinstance(body, dict):
            return None, f"GET /respec/sessions/{CONV_SESSION} answered {status}: {str(body)[:300]}"
        return [t.get("index") for t in body.get("turns") or []], body

    def run_turn(self, label: str, request: str) -> tuple[dict | None, str]:
        """Queue one turn; (its /history entry or None, a note on whether the History Store
        re-ran, or '' when that was not what docs/history.md promises: it re-runs exactly when the
        session changed since the previous prompt)."""
        turns, body = self.session()
        before = body.get("version") if turns is not None else None
        prompt = conversation_prompt(self.wf, self.image_name, CONV_SESSION, request)
        t0 = time.monotonic()
        entry, why = queue_and_wait(self.url, prompt)
        if why:
            self.check(label, False, why)
            return None, ""
        ran = _ran(entry, prompt)
        log(f"      {label}: ran in {time.monotonic() - t0:.1f} s; nodes run: "
            f"{sorted(ran, key=lambda x: int(x) if x.isdigit() else 0)} of {len(prompt)}")
        changed, reran = before != self.last_version, bool(set(self.store_ids) & ran)
        self.last_version = before
        note = (f"History Store {'re-ran' if reran else 'was cached'} (session version {before}, "
                f"{'changed' if changed else 'unchanged'} since the previous prompt)")
        return entry, note if reran == changed else ""


CACHE_MISMATCH = "History Store re-ran when the session was unchanged, or was cached when it had changed"


def _conversation_turn_1(conv: _Conversation, request: str) -> dict | None:
    """Turn 1 is stored: the session has turns [0, 1]. Returns turn 1's record, or None to stop."""
    entry, _ = conv.run_turn("turn 1", request)
    if entry is None:
        return None
    turns, body = conv.session()
    conv.check("turn 1", turns == [0, 1], f"session {CONV_SESSION!r} has turns "
               f"{turns if turns is not None else body} (expected [0, 1])")
    if turns != [0, 1]:
        return None
    t1 = body["turns"][1]
    log(f"      turn 1: instruction {t1.get('instruction')!r}, sent {t1.get('sent_instruction')!r}, "
        f"plan turn {(t1.get('plan') or {}).get('turn')} vlm_called {(t1.get('plan') or {}).get('vlm_called')}, "
        f"image {t1.get('width')}x{t1.get('height')}, version {body.get('version')}")
    return t1


def _conversation_same_prompt_again(conv: _Conversation, request: str, t1: dict) -> bool:
    """The identical prompt again: the session changed (turn 1 was appended), so the History Store
    re-runs and so does the edit, but History Append must not add turn 1 a second time. False
    when the prompt did not run (stop)."""
    entry, cache_note = conv.run_turn("same prompt again", request)
    if entry is None:
        return False
    turns, body = conv.session()
    same = turns == [0, 1] and body["turns"][1].get("image") == t1.get("image")
    conv.check("same prompt again", same and bool(cache_note),
               f"session has turns {turns if turns is not None else body} (expected [0, 1], turn 1 unchanged); "
               f"{cache_note or CACHE_MISMATCH}")
    if turns is not None and turns[:2] == [0, 1] and len(turns) > 2:
        extra = body["turns"][2]
        log(f"      the re-queued prompt added turn 2 {extra.get('instruction')!r} "
            f"(meta {extra.get('meta')}; turn 1 meta {body['turns'][1].get('meta')})")
    return True


def _conversation_turn_2(conv: _Conversation, request: str) -> bool:
    """Another request on the latest session adds turn 2 with one controller call. False when the
    prompt did not run (stop)."""
    entry, cache_note = conv.run_turn("turn 2", request)
    if entry is None:
        return False
    turns, body = conv.session()
    last_turn = body["turns"][-1] if turns else {}
    plan = last_turn.get("plan") or {}
    ok = (turns == [0, 1, 2] and bool(cache_note) and last_turn.get("instruction") == request
          and plan.get("turn") == 2 and plan.get("vlm_called") is True)
    conv.check("turn 2", ok, f"session has turns {turns if turns is not None else body} (expected [0, 1, 2]); "
               f"{cache_note or CACHE_MISMATCH}; "
               f"latest turn: instruction {last_turn.get('instruction')!r}, plan "
               f"{'present' if last_turn.get('plan') else 'MISSING'} (turn {plan.get('turn')}, "
               f"vlm_called {plan.get('vlm_called')}, fallbacks {plan.get('fallbacks')})")
    return True


def _conversation_rewind(conv: _Conversation) -> None:
    """The panel's rewind route undoes turn 2: the route and the session both say turns [0, 1]."""
    status, rewound = http_json("POST", f"{conv.url}/respec/sessions/{CONV_SESSION}/rewind", {"turn": 1})
    answered = [t.get("index") for t in rewound.get("turns") or []] if isinstance(rewound, dict) else rewound
    turns, body = conv.session()
    conv.check("rewind to turn 1", status == 200 and answered == [0, 1] and turns == [0, 1],
               f"POST .../rewind {{\"turn\": 1}} answered {status} with turns {answered}; "
               f"the session now has turns {turns if turns is not None else body} (expected [0, 1])")


def execute_conversation(url: str, tiny: dict) -> list[str]:
    """Use conversational_flux2_diffusers as an artist would, one queued prompt per turn on session
    CONV_SESSION, and check what the session store promises through the pack's HTTP routes:
    turn 1 is stored; the identical prompt queued again adds nothing; a new request adds turn 2
    (History Store re-run, one controller call); the rewind route undoes it. One PASS/FAIL line
    per check; returns the problems found."""
    sys.path.insert(0, str(ROOT))
    from respec.bench import workflow

    problems: list[str] = []
    check = checker("execute/conversational", problems)
    image_name, why = upload_picture(url)
    if image_name is None:
        check("upload", False, why)
        return problems
    wf = use_tiny_models(workflow.load_api_workflow(workflow.shipped_workflow("conversational_flux2_diffusers")), tiny)
    conv = _Conversation(url, wf, image_name, check)
    request1, request2 = "add a red box on the left", "remove the red box"
    # Each step runs only when the previous one's prompt ran (its checks may still have failed).
    t1 = _conversation_turn_1(conv, request1)
    if t1 is not None and _conversation_same_prompt_again(conv, request1, t1) and _conversation_turn_2(conv, request2):
        _conversation_rewind(conv)
    return problems


# --------------------------------------------------------------------------- the frontend

APP = "window.comfyAPI.app.app"
LOAD_JS = """(async () => {
  const app = %(app)s;
  const errors = [];
  const onError = (e) => errors.push(String(e.message || e.reason || e));
  window.addEventListener('error', onError); window.addEventListener('unhandledrejection', onError);
  try { await app.loadGraphData(%(ui)s, true, true, %(name)s); }
  catch (e) { errors.push('loadGraphData threw: ' + (e && e.stack || e)); }
  await new Promise(r => setTimeout(r, 300));
  window.removeEventListener('error', onError); window.removeEventListener('unhandledrejection', onError);
  const graph = app.rootGraph ?? app.graph;
  const registered = window.LiteGraph?.registered_node_types ?? {};
  const nodes = graph._nodes.map(n => ({id: n.id, type: n.type, has_errors: !!n.has_errors,
      registered: !!registered[n.type], widgets: (n.widgets || []).map(w => w.name),
      pos: [n.pos[0], n.pos[1]], size: [n.size[0], n.size[1]], collapsed: !!n.flags?.collapsed,
      needs: n.computeSize ? Array.from(n.computeSize()) : null}));
  let prompt = null;
  try { prompt = (await app.graphToPrompt()).output; } catch (e) { errors.push('graphToPrompt threw: ' + e); }
  return {nodes, errors, prompt};
})()"""


def _overlaps(nodes: list[dict]) -> list[str]:
    """Pairs of nodes whose drawn boxes (title bar included; a collapsed node's is its title bar)
    overlap: a layout blemish, not an error."""
    title = 30
    boxes = [(n["id"], n["pos"][0], n["pos"][1] - title, n["pos"][0] + max(n["size"][0], (n["needs"] or [0, 0])[0]),
              n["pos"][1] + (0 if n.get("collapsed") else max(n["size"][1], (n["needs"] or [0, 0])[1])))
             for n in nodes]
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]:
                out.append(f"{a[0]}/{b[0]}")
    return out


def _compare_prompt(frontend: dict, shipped: dict, info: dict | None = None) -> list[str]:
    diffs = []
    shipped = {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in shipped.items()}
    frontend = {str(k): {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in frontend.items()}
    if set(frontend) != set(shipped):
        diffs.append(f"node ids differ: only frontend {sorted(set(frontend) - set(shipped))}, "
                     f"only file {sorted(set(shipped) - set(frontend))}")
    for k in sorted(set(frontend) & set(shipped), key=lambda x: int(x) if x.isdigit() else 0):
        a, b = frontend[k], shipped[k]
        if a["class_type"] != b["class_type"]:
            diffs.append(f"node {k}: {a['class_type']} vs {b['class_type']}")
            continue
        for name in sorted(set(a["inputs"]) | set(b["inputs"])):
            if name not in b["inputs"] and info and newer_optional_default(info, a["class_type"], name,
                                                                            a["inputs"][name]):
                continue
            if a["inputs"].get(name, "<absent>") != b["inputs"].get(name, "<absent>"):
                diffs.append(f"node {k} ({a['class_type']}).{name}: frontend {a['inputs'].get(name, '<absent>')!r} "
                             f"vs file {b['inputs'].get(name, '<absent>')!r}")
    return diffs


async def _open_frontend(page: Page, url: str) -> None:
    """Navigate to ComfyUI's page and wait until its app and canvas are up."""
    import asyncio
    t0 = time.monotonic()
    # A first visit opens the template browser over the canvas; this profile is not new.
    http_json("POST", f"{url}/api/settings/Comfy.TutorialCompleted", True)
    await page.send("Page.navigate", {"url": url})
    deadline = time.monotonic() + 180
    while True:
        try:
            if await page.js(f"!!({APP}?.graph && document.querySelector('canvas'))"):
                break
        except RuntimeError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the ComfyUI page did not come up in 180 s")
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)
    log(f"frontend: page up after {time.monotonic() - t0:.1f} s")
    baseline = list(page.console)
    if baseline:
        log(f"frontend: errors logged by the page before any workflow (not counted): {baseline}")


# The toasts on screen (their text), then closed: the frontend reports a workflow that fails its
# schema in a toast ("Invalid workflow against zod schema"), not in the console.
TOASTS_JS = """(() => {
  const texts = Array.from(document.querySelectorAll('.p-toast-message')).map(e => e.innerText.trim());
  document.querySelectorAll('.p-toast-close-button').forEach(b => b.click());
  return texts;
})()"""


async def _load_graph(page: Page, name: str, ui: dict) -> dict:
    """Load a UI graph as drag-and-drop does: its nodes, errors, console lines, the toasts it
    raised and graphToPrompt."""
    import asyncio
    page.console.clear()
    await page.js(TOASTS_JS)
    res = await page.js(LOAD_JS % {"app": APP, "ui": json.dumps(ui), "name": json.dumps(name)})
    res["console"] = list(page.console)
    await asyncio.sleep(0.7)   # the schema toast comes after loadGraphData returns
    res["toasts"] = await page.js(TOASTS_JS)
    return res


async def _check_control_graph(page: Page) -> list[str]:
    """An unknown node type must be flagged, or the frontend check proves nothing."""
    import asyncio
    control = {"last_node_id": 1, "last_link_id": 0, "links": [], "version": 0.4, "groups": [],
               "config": {}, "extra": {}, "nodes": [{
                   "id": 1, "type": "ReSpecNoSuchNode", "pos": [0, 0], "size": [200, 60], "flags": {},
                   "order": 0, "mode": 0, "properties": {}, "inputs": [], "outputs": [],
                   "widgets_values": []}]}
    res = await _load_graph(page, "control.json", control)
    flagged = [n for n in res["nodes"] if not n["registered"] or n["has_errors"]]
    problems = []
    if flagged:
        log("frontend: control graph with an unknown node type was flagged, as it must be")
    else:
        problems.append("frontend: the control graph's unknown node was not flagged: "
                        "this check cannot see missing nodes")
    await asyncio.sleep(0.5)
    await page.js("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close')"
                  ".forEach(b => b.click())")
    return problems


def _ui_file_problems(path: Path, ui: dict, res: dict, info: dict | None = None) -> list[str]:
    """What is wrong with one loaded UI workflow: missing or flagged nodes, errors while loading,
    and a graphToPrompt that differs from the shipped API file."""
    # A node of a bypassed option that this ComfyUI is too old for is missing by design (counted EXPECTED).
    option = {n["id"] for n in ui["nodes"] if n.get("mode", 0) == BYPASS and n["type"] in NEWER_CORE_NODES}
    bad = [f"{n['id']} {n['type']}" + (" (not registered)" if not n["registered"] else "")
           + (" (has_errors)" if n["has_errors"] else "")
           for n in res["nodes"] if (not n["registered"] or n["has_errors"]) and n["id"] not in option]
    file_problems = []
    if bad:
        file_problems.append(f"missing or flagged nodes: {bad}")
    if len(res["nodes"]) != len(ui["nodes"]):
        file_problems.append(f"{len(res['nodes'])} nodes in the canvas, {len(ui['nodes'])} in the file")
    overlaps = _overlaps(res["nodes"])
    if overlaps:
        log(f"note  frontend/{path.name}: overlapping nodes as drawn: {overlaps[:8]}")
    invalid = [t for t in res.get("toasts", []) if "invalid" in t.lower() or "error" in t.lower()]
    if invalid:
        file_problems.append(f"the frontend warned while loading: {invalid}")
    # Once a graph with a missing node has been loaded (a bypassed option here), frontend 1.35.9 looks
    # node types up in ComfyUI's online registry, then "comfy-core" on every later load of the page;
    # offline (and under the page's CSP) each lookup logs an error. That says nothing about the graph
    # loaded (a missing node is caught above), so it is not counted, whichever graph it follows.
    console = [c for c in res["console"] if "https://api.comfy.org/" not in c]
    if res["errors"] or console:
        file_problems.append(f"errors while loading: {res['errors'] + console}")
    api_path = API_DIR / f"{path.stem}.api.json"
    if res["prompt"] is None:
        file_problems.append("graphToPrompt gave nothing")
    elif api_path.exists():
        diffs = _compare_prompt(res["prompt"], json.loads(api_path.read_text(encoding="utf-8")), info)
        if diffs:
            file_problems.append("frontend's API conversion differs from the shipped file: " + "; ".join(diffs[:10]))
    return file_problems


async def _screenshot(page: Page, shots: Path, path: Path) -> None:
    """A PNG of the loaded workflow, fitted to the view, as shots/<name>.png."""
    import asyncio
    # The first visit opens the template browser over the canvas: close dialogs, and only dialogs
    # (on frontend 1.58 a bare button[aria-label="Close"] is also the workflow tab's close button,
    # which closed the graph just loaded and left the default workflow in the picture).
    await page.js("document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, "
                  "[role=\"dialog\"] button[aria-label=\"Close\"]').forEach(b => b.click())")
    await asyncio.sleep(0.3)
    await page.js(f"{APP}.extensionManager.command.execute('Comfy.Canvas.FitView')")
    await asyncio.sleep(0.8)
    shots.mkdir(parents=True, exist_ok=True)
    await page.screenshot(shots / f"{path.stem}.png")


def check_frontend(url: str, chromium: str, ui_files: list[Path], shots: Path | None = None,
                   info: dict | None = None) -> list[str]:
    """Load each UI workflow in the real frontend; return the problems found. `info`: the server's
    /object_info (a newer ComfyUI's optional widget at its default is no difference, _compare_prompt)."""
    import asyncio

    async def run() -> list[str]:
        problems: list[str] = []
        profile = Path(tempfile.mkdtemp(prefix="respec-wf-chrome-"))
        proc, port = start_chromium(chromium, profile)
        page = None
        try:
            page = await Page.open(port, timeout=120, max_size=256 * 2 ** 20)
            await _open_frontend(page, url)
            problems += await _check_control_graph(page)
            for path in ui_files:
                ui = json.loads(path.read_text(encoding="utf-8"))
                res = await _load_graph(page, path.name, ui)
                file_problems = _ui_file_problems(path, ui, res, info)
                if file_problems:
                    log(f"FAIL  frontend/{path.name}")
                    for fp in file_problems:
                        log(f"      {fp}")
                    problems += [f"frontend/{path.name}: {fp}" for fp in file_problems]
                if shots is not None:
                    await _screenshot(page, shots, path)
                if not file_problems:
                    log(f"PASS  frontend/{path.name}: loaded, {len(res['nodes'])} nodes, none missing, no errors; "
                        f"graphToPrompt == {path.stem}.api.json")
        finally:
            if page is not None:
                await page.close()
            stop(proc, timeout=10)
            shutil.rmtree(profile, ignore_errors=True)
        return problems

    return asyncio.run(run())


def describe_rejection(status: int, body) -> list[str]:
    lines = []
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and (err.get("message") or err.get("details")):
            lines.append(f"{err.get('message', '')} {err.get('details', '')}".strip())
        for nid, ne in (body.get("node_errors") or {}).items():
            for e in ne.get("errors", []):
                lines.append(f"node {nid} ({ne.get('class_type')}): {e.get('type')}: {e.get('details')}")
    else:
        lines.append(f"HTTP {status}: {str(body)[:300]}")
    return lines


def resolve_front_end(path: str) -> Path:
    """The frontend's static folder: `path` itself, or the comfyui_frontend_package/static folder
    inside it (a `pip install --target DIR comfyui-frontend-package==X` folder, or site-packages)."""
    p = Path(path).expanduser().resolve()
    for cand in (p, p / "comfyui_frontend_package" / "static", p / "static"):
        if (cand / "index.html").is_file():
            return cand
    raise SystemExit(f"--front-end-root {path}: no index.html there nor in comfyui_frontend_package/static "
                     "(install one with `pip install --target DIR comfyui-frontend-package==1.58.1`)")


def frontend_version(static: Path) -> str:
    """The comfyui-frontend-package version whose static folder this is ('?' when unknown)."""
    for dist in static.parent.parent.glob("comfyui_frontend_package-*.dist-info"):
        return dist.name.removesuffix(".dist-info").split("-")[1]
    return f"? ({static})"


def make_base_directory(args, comfy: Path, python: str, api_wfs: dict) -> tuple[Path, dict | None]:
    """The temporary --base-directory: this pack linked into custom_nodes/, empty placeholder model
    files, and with --execute the tiny models (and the opt-in native files). Returns (it, the
    tiny models or None)."""
    base = Path(tempfile.mkdtemp(prefix="respec-comfy-check-"))
    (base / "custom_nodes").mkdir()
    os.symlink(ROOT, base / "custom_nodes" / PACK_DIR_NAME, target_is_directory=True)
    for sub in ("input", "output", "user", "temp"):
        (base / sub).mkdir()
    if (comfy / "input" / "example.png").exists():
        shutil.copy(comfy / "input" / "example.png", base / "input" / "example.png")
    made = model_placeholders(base, list(api_wfs.values()), ui_files=sorted(WORKFLOWS.glob("*.json")))
    tiny = None
    if args.execute:
        t0 = time.monotonic()
        tiny = build_tiny_models(python, base)
        log(f"tiny models built in {time.monotonic() - t0:.1f} s: {tiny}")
        if args.omnigen2_files:
            check_native.install_omnigen2_files(python, comfy, Path(args.omnigen2_files), base / "models")
        if args.native_klein:
            check_native.install_klein_files(python, comfy, Path(args.native_klein), base / "models")
        if args.native_qwen:
            check_native.install_qwen_files(python, comfy, Path(args.native_qwen), base / "models")
        if args.native_sam3:
            check_native.install_sam3_file(python, comfy, Path(args.native_sam3), base / "models")
    log(f"temporary base directory {base}; placeholder model files: {made or 'none'}")
    return base, tiny


def check_startup(url: str, base: Path, front_end: Path | None) -> list[str]:
    """Log the versions ComfyUI runs with; the failures: its log saying the pack did not import."""
    _, stats = http_json("GET", f"{url}/system_stats")
    system = (stats or {}).get("system", {}) if isinstance(stats, dict) else {}
    log(f"ComfyUI {system.get('comfyui_version', '?')}, python {str(system.get('python_version', '?')).split()[0]}, "
        f"torch {system.get('pytorch_version', '?')}; frontend "
        f"{frontend_version(front_end) if front_end else 'the installed comfyui-frontend-package'}")
    logtext = (base / "comfyui.log").read_text(errors="replace")
    failures = [f"import: {line.strip()}" for line in logtext.splitlines()
                if "IMPORT FAILED" in line or ("Cannot import" in line and PACK_DIR_NAME in line)]
    for line in logtext.splitlines():
        if PACK_DIR_NAME in line and "seconds" in line:
            log(f"import: {line.strip()}")
    return failures


def check_registration(url: str, pack: dict, ui_files: list[Path], failures: list[str]) -> dict:
    """/object_info lists every pack node and the template browser every UI workflow; returns
    /object_info (a failure joins `failures`)."""
    status, info = http_json("GET", f"{url}/object_info", timeout=300)
    if status != 200 or not isinstance(info, dict):
        raise SystemExit(f"GET /object_info answered {status}")
    missing = [n for n in pack["nodes"] if n not in info]
    log(f"/object_info: {len(info)} node types; ReSpec nodes listed: "
        f"{len(pack['nodes']) - len(missing)}/{len(pack['nodes'])}")
    if missing:
        failures.append(f"/object_info lacks pack nodes: {missing}")

    status, templates = http_json("GET", f"{url}/api/workflow_templates")
    listed = sorted((templates or {}).get(PACK_DIR_NAME, [])) if isinstance(templates, dict) else []
    want = sorted(p.stem for p in ui_files)
    log(f"/api/workflow_templates[{PACK_DIR_NAME}]: {listed}")
    if listed != want:
        failures.append(f"template browser lists {listed}, expected {want}")
    return info


def _too_new(types, info: dict) -> str:
    """'' or why this ComfyUI cannot have the graph: a core node newer than it."""
    newer = sorted({t for t in types if t not in info and t in NEWER_CORE_NODES})
    return ", ".join(f"{t} needs ComfyUI >= {NEWER_CORE_NODES[t]}" for t in newer)


def prompts_to_validate(api_wfs: dict, ui_files: list[Path], info: dict, failures: list[str],
                        expected: list[str]) -> tuple[list[tuple[str, dict]], list[Path]]:
    """Every API workflow and every UI workflow converted as the frontend converts it, less those
    that need a newer ComfyUI (expected). Returns ([(label, prompt)], the UI files this ComfyUI can load)."""
    prompts = []
    for name, wf in api_wfs.items():
        why = _too_new((n["class_type"] for n in wf.values()), info)
        if why:
            log(f"EXPECTED (newer ComfyUI)  api/{name}: not queued: {why}")
            expected.append(f"api/{name}: {why}")
            continue
        prompts.append((f"api/{name}", wf))
    usable_ui = []
    for p in ui_files:
        ui = json.loads(p.read_text(encoding="utf-8"))
        why = _too_new((n["type"] for n in ui["nodes"] if n.get("mode", 0) != BYPASS), info)
        if why:
            log(f"EXPECTED (newer ComfyUI)  ui/{p.name}: not queued or loaded: {why}")
            expected.append(f"ui/{p.name}: {why}")
            continue
        option = _too_new((n["type"] for n in ui["nodes"] if n.get("mode", 0) == BYPASS), info)
        if option:
            # A bypassed option (the edit region's SAM3) is left out of the prompt: the graph runs here,
            # and the frontend shows the option's node as missing.
            log(f"EXPECTED (newer ComfyUI)  ui/{p.name}: its bypassed option is missing here ({option}); "
                "the rest is queued and loaded")
            expected.append(f"ui/{p.name}: bypassed option: {option}")
        usable_ui.append(p)
        try:
            prompts.append((f"ui/{p.name} (converted)", ui_to_api(ui, info)))
        except KeyError as e:
            failures.append(f"ui/{p.name}: node type {e} unknown to this ComfyUI (missing node)")
            log(f"FAIL  ui/{p.name}: node type {e} unknown to this ComfyUI")
        except IndexError:
            failures.append(f"ui/{p.name}: a node has fewer widget values than its widget inputs")
            log(f"FAIL  ui/{p.name}: a node has fewer widget values than its widget inputs")
    return prompts, usable_ui


def _model_missing(error: dict) -> bool:
    """A validation error that says only that a model is not installed: a core loader's file not in
    its list, or a pack loader's own check (VALIDATE_INPUTS) with its missing-weights words."""
    return error.get("type") == "value_not_in_list" or (
        error.get("type") == "custom_validation_failed" and "Missing model weights" in str(error.get("details")))


def validate_prompts(url: str, prompts: list[tuple[str, dict]], failures: list[str], expected: list[str]) -> None:
    """POST each prompt to /prompt and take it out again: validation passes, or is refused only for
    model files that are not installed (expected); anything else joins `failures`."""
    for label, wf in prompts:
        status, body = http_json("POST", f"{url}/prompt", {"prompt": wf, "client_id": "respec-check"})
        pid = body.get("prompt_id") if isinstance(body, dict) else None
        if pid:
            # Validation is what we check: take the prompt out before it runs (or stop it).
            http_json("POST", f"{url}/queue", {"delete": [pid]})
            http_json("POST", f"{url}/interrupt", {"prompt_id": pid})
        node_errors = body.get("node_errors") if isinstance(body, dict) else None
        if status == 200 and not node_errors:
            log(f"PASS  {label}: /prompt accepted it (prompt_id {pid})")
            continue
        reasons = describe_rejection(status, body)
        model_only = bool(node_errors) and all(_model_missing(e) for ne in node_errors.values() for e in ne.get("errors", []))
        tag = "EXPECTED (model files not installed)" if model_only else "FAIL"
        log(f"{tag}  {label}: HTTP {status}")
        for r in reasons:
            log(f"      {r}")
        (expected if model_only else failures).append(f"{label}: " + "; ".join(reasons))
    # Let an interrupted prompt settle before the next step / stopping.
    for _ in range(120):
        status, q = http_json("GET", f"{url}/queue")
        if isinstance(q, dict) and not q.get("queue_running") and not q.get("queue_pending"):
            break
        time.sleep(0.5)


def check_nodes_2(args, url: str, python: str, base: Path, tiny: dict | None, ui_files: list[Path],
                  info: dict) -> list[str]:
    """--vue-nodes: the workflows, every pack node and the sidebar's composer again with the frontend's
    Nodes 2.0 (Vue node renderer) on (check_vue_nodes.py); the setting is switched off afterwards."""
    t0 = time.monotonic()
    helpers = {"open_frontend": _open_frontend, "load_graph": _load_graph, "ui_file_problems": _ui_file_problems,
               "screenshot": _screenshot}
    shots = Path(args.screenshots) if args.screenshots else None
    try:
        failures = check_vue_nodes.check_vue_nodes(url, args.chromium, ui_files, helpers, shots, info)
    except check_vue_nodes.NoNodes2 as e:   # frontend 1.35 (ComfyUI 0.8.0's): no Vue node renderer
        log(f"EXPECTED  frontend/nodes-2.0: {e}; the Nodes 2.0 checks are skipped")
        return []
    failures += check_composer.check_composer(url, args.chromium, python, base, tiny, args.screenshots, vue_nodes=True)
    log(f"Nodes 2.0 checks: {time.monotonic() - t0:.1f} s")
    return failures


def _helpers() -> dict:
    """What the check modules take from this one (they cannot import it: it imports them)."""
    return {"upload_picture": upload_picture, "conversation_prompt": conversation_prompt,
            "queue_and_wait": queue_and_wait, "use_tiny_models": use_tiny_models, "run_benchmark": run_benchmark,
            "checker": checker, "ui_to_api": ui_to_api, "open_frontend": _open_frontend, "load_graph": _load_graph}


def execute_all(args, url: str, pid: int, tiny: dict, info: dict, base: Path) -> list[str]:
    """--execute: the benchmark, conversational and provenance graphs with tiny models, history first
    (check_history_first.py, on sessions seeded in `base`'s store), then the opt-in native OmniGen2 /
    SAM3 / Qwen-Image-Edit / klein / TextGenerate routes. Returns the failures."""
    failures: list[str] = []
    problems, prompt, row = execute_benchmark(url, tiny)
    failures += [f"execute: {p}" for p in problems]
    if not problems:
        log("PASS  execute: benchmark_flux2 ran end to end; unused turn slots were skipped")
        failures += [f"execute/free: {p}" for p in check_native.check_free(url, pid, prompt, row)]
    failures += [f"execute/conversational: {p}" for p in execute_conversation(url, tiny)]
    failures += [f"execute/provenance: {p}" for p in execute_provenance(url, tiny)]
    if args.omnigen2_files:
        failures += [f"execute/native: {p}" for p in
                     check_native.execute_native_omnigen2(url, pid, tiny, run_benchmark)]
    helpers = _helpers()
    failures += [f"execute/history-first: {p}" for p in
                 check_history_first.execute_history_first(url, base, tiny, helpers)]
    if args.native_sam3 and "SAM3_Detect" in info:
        t0 = time.monotonic()
        failures += [f"execute/sam3: {p}" for p in
                     check_native.execute_sam3(url, pid, tiny, helpers, info)]
        log(f"SAM3 checks: {time.monotonic() - t0:.1f} s")
    if args.native_qwen:
        t0 = time.monotonic()
        failures += [f"execute/native-qwen: {p}" for p in
                     check_native.execute_native_qwen(url, pid, tiny, helpers)]
        log(f"native Qwen-Image-Edit checks: {time.monotonic() - t0:.1f} s")
    if args.native_klein:
        t0 = time.monotonic()
        failures += [f"execute/native-klein: {p}" for p in
                     check_native.execute_native_klein(url, pid, tiny, helpers)]
        failures += [f"execute/native-klein4b: {p}" for p in
                     check_native.execute_native_klein4b(url, pid, tiny, helpers, info)]
        if args.native_qwen:
            failures += [f"execute/editor-swap: {p}" for p in
                         check_native.execute_editor_swap(url, pid, tiny, helpers)]
        if "TextGenerate" in info:
            failures += [f"execute/textgen: {p}" for p in
                         check_native.execute_textgen(url, pid, tiny, helpers)]
        log(f"native klein checks: {time.monotonic() - t0:.1f} s")
    return failures


def run(args) -> int:
    """The whole check (the module docstring's steps 1-7); exit status 0 only when everything passed."""
    require_check_packages()
    comfy = Path(args.comfyui).resolve()
    if not (comfy / "main.py").is_file():
        raise SystemExit(f"{comfy} is not a ComfyUI checkout (no main.py)")
    python = args.python
    front_end = resolve_front_end(args.front_end_root) if args.front_end_root else None
    api_files = sorted(API_DIR.glob("*.api.json"))
    ui_files = sorted(WORKFLOWS.glob("*.json"))
    api_wfs = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in api_files}
    pack = pack_nodes(python)
    log(f"pack registers {len(pack['nodes'])} nodes")
    # Steps as in the module docstring; the frontend (6) runs before the executions (5).
    base, tiny = make_base_directory(args, comfy, python, api_wfs)

    port = args.port or free_port()
    url = f"http://127.0.0.1:{port}"
    failures: list[str] = []
    expected: list[str] = []
    proc = None
    try:
        started = time.monotonic()
        extra = (("--front-end-root", str(front_end)) if front_end else ()) + tuple(args.comfyui_arg or ())
        proc = start_comfyui(comfy, python, base, port, extra=extra, env={"RESPEC_HOME": str(base / "respec_home")},
                             timeout=args.start_timeout)
        log(f"ComfyUI up after {time.monotonic() - started:.1f} s at {url}")
        failures += check_startup(url, base, front_end)
        info = check_registration(url, pack, ui_files, failures)
        if args.object_info_out:
            object_info_listing.write(Path(args.object_info_out), info, pack["nodes"])
            log(f"the pack's /object_info listing written to {args.object_info_out}")
        failures += object_info_listing.check_standin(info, pack["v3"], python, comfy)
        if args.object_info_baseline:
            changed = object_info_listing.compare(Path(args.object_info_baseline), info, pack["nodes"])
            log(f"{'FAIL' if changed else 'PASS'}  /object_info: the pack's {len(pack['nodes'])} nodes against "
                f"{args.object_info_baseline}: {len(changed)} difference(s) {changed[:20]}")
            failures += [f"/object_info differs from the baseline: {c}" for c in changed]
        prompts, usable_ui = prompts_to_validate(api_wfs, ui_files, info, failures, expected)
        validate_prompts(url, prompts, failures, expected)
        chats = [p for p in usable_ui if p.stem.startswith("ReSpec chat")]
        if args.readable_only:
            failures += check_readable.check_readable(url, args.chromium, chats, args.vue_nodes, args.screenshots)
            args.frontend, tiny = False, None
        if args.frontend:
            failures += check_frontend(url, args.chromium, usable_ui,
                                       Path(args.screenshots) if args.screenshots else None, info)
            failures += check_first_hour.check_first_hour(url, args.chromium, usable_ui, args.screenshots)
            failures += check_readable.check_readable(url, args.chromium, chats, args.vue_nodes, args.screenshots)
            failures += check_composer.check_composer(url, args.chromium, python, base, tiny, args.screenshots)
            if args.vue_nodes:
                failures += check_nodes_2(args, url, python, base, tiny, usable_ui, info)
        if tiny is not None:
            failures += execute_all(args, url, proc.pid, tiny, info, base)
        failures += [f"blueprints: {p}" for p in check_blueprints.check_blueprints(
            url, PACK_DIR_NAME, args.chromium if args.frontend else None, _helpers(), execute=bool(
                tiny is not None and args.native_klein), shots=Path(args.screenshots) if args.screenshots else None)]
    finally:
        stop(proc, signal.SIGINT)
        if args.keep:
            log(f"kept {base} (ComfyUI log: {base / 'comfyui.log'})")
        else:
            shutil.rmtree(base, ignore_errors=True)
    log(f"summary: {len(failures)} failure(s), {len(expected)} expected rejection(s) (model files not installed, "
        f"or a node newer than this ComfyUI)")
    for f in failures:
        log(f"  FAIL {f}")
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Validate the pack and its workflows in a real ComfyUI.")
    ap.add_argument("--comfyui", required=True, help="path of a ComfyUI source checkout")
    ap.add_argument("--python", default=sys.executable, help="python of ComfyUI's environment")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--keep", action="store_true", help="keep the temporary base directory and log")
    ap.add_argument("--frontend", action="store_true",
                    help="also load every UI workflow in ComfyUI's frontend in headless Chromium")
    ap.add_argument("--vue-nodes", action="store_true",
                    help="with --frontend: also load every workflow, every pack node and the sidebar's composer with "
                         "the frontend's Nodes 2.0 (Vue node renderer, Comfy.VueNodes.Enabled) on")
    ap.add_argument("--screenshots", default=None, metavar="DIR",
                    help="with --frontend: save a PNG of each loaded workflow there")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium", help="Chromium binary")
    ap.add_argument("--front-end-root", default=None, metavar="DIR",
                    help="serve this frontend (ComfyUI's --front-end-root): its static folder, or a folder made by "
                         "`pip install --target DIR comfyui-frontend-package==X`; default: the installed package")
    ap.add_argument("--omnigen2-files", default=None, metavar="DIR",
                    help="with --execute: also run benchmark_native_omnigen2 on ComfyUI's own OmniGen2 loaders with "
                         "the real-size random files in DIR/models (written there by scripts/comfyui/make_omnigen2_files.py "
                         "when missing; ~7.5 GB)")
    ap.add_argument("--native-klein", default=None, metavar="DIR",
                    help="with --execute, on ComfyUI 0.24+: also run conversational_flux2 (two turns) and "
                         "benchmark_native_flux2 (one scenario) on ComfyUI's own klein loaders with the smallest "
                         "random files it accepts, written once into DIR/models by scripts/comfyui/make_klein_files.py "
                         "(~4.4 GB, minutes) and reused; 1 step at 64-96 px. Opt-in, not CI")
    ap.add_argument("--native-qwen", default=None, metavar="DIR",
                    help="with --execute, on ComfyUI 0.24+: also run conversational_qwen_image_edit_2511 (two turns) "
                         "and benchmark_native_qwen_image_edit_2511 (one scenario) on ComfyUI's own Qwen-Image loaders "
                         "with the smallest random files it accepts, written once into DIR/models by "
                         "scripts/comfyui/make_qwen_image_files.py (~8.7 GB, minutes) and reused; 1 step. Opt-in, not CI")
    ap.add_argument("--native-sam3", default=None, metavar="DIR",
                    help="with --execute, on ComfyUI 0.24+: also run occluder_mask_sam3 and the provenance graph's "
                         "edit-region option on ComfyUI's own SAM3 with a random real-size checkpoint, written once "
                         "into DIR/models by scripts/comfyui/make_sam3_file.py (~1.7 GB) and reused. Opt-in, not CI")
    ap.add_argument("--comfyui-arg", action="append", metavar="ARG",
                    help="one more command-line argument for ComfyUI (repeatable), e.g. --comfyui-arg=--bf16-text-enc: "
                         "ComfyUI computes a text encoder in fp16 on a CPU by default, and fp16 matrix products are "
                         "~300x slower than bf16 on a CPU without fp16 arithmetic (0.2 vs 62 GFLOPS measured here)")
    ap.add_argument("--object-info-out", default=None, metavar="FILE",
                    help="write the pack's nodes as /object_info lists them (normalised: object_info_listing.py)")
    ap.add_argument("--object-info-baseline", default=None, metavar="FILE",
                    help="fail on any difference between the pack's /object_info listing and this file's "
                         "(written by --object-info-out), V3's own listing differences aside")
    ap.add_argument("--readable-only", action="store_true",
                    help="only the chat graphs' readability at three screen sizes (with --vue-nodes, in Nodes 2.0 "
                         "too): a quick loop for layout work")
    ap.add_argument("--execute", action="store_true",
                    help="also run the FLUX.2 benchmark workflow on a 2-turn scenario, and the conversational "
                         "workflow for 2 turns, a re-queue and a rewind, with tiny random models")
    try:
        return run(ap.parse_args(argv))
    except HarnessError as e:   # ComfyUI or Chromium did not come up: say why, without a traceback
        raise SystemExit(str(e))


if __name__ == "__main__":
    raise SystemExit(main())
