"""The pack's subgraph blueprints in a real ComfyUI (issue 44), for scripts/comfyui/check_in_comfyui.py.

1. GET /global_subgraphs lists both of the pack's `subgraphs/*.json` ("ReSpec before the edit",
   "ReSpec after the edit") as the pack's, and GET /global_subgraphs/<id> serves each file as written.
2. With --frontend: a graph that wraps an editor with them (build_workflows.blueprint_example: Load
   Image, the request and the session -> before -> the editor's block on ComfyUI's own files -> after
   -> Save Image, the blueprints' definitions in the file) is loaded in the real frontend, which
   must register every node and flatten the two subgraphs (graphToPrompt); POST /prompt must accept
   the prompt it gives (ComfyUI validates every node and link of it).
3. With --execute --native-klein: that prompt runs two turns on the small random klein 4B files ("add a
   red box", then "remove the red box"): the first runs the sampler, Reveal Composite and the Drift
   Guard; the second is taken back from the history, and the sampler does not run.
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from comfyui_harness import browser_page, http_json, log

ROOT = Path(__file__).resolve().parents[2]
NAMES = {"ReSpec before the edit", "ReSpec after the edit"}
SESSION = "check-blueprints"
SAMPLERS = {"SamplerCustomAdvanced", "KSampler"}


def _build():
    sys.path.insert(0, str(ROOT / "scripts" / "workflows"))
    import build_workflows
    return build_workflows


def check_listed(url: str, pack_dir: str, check) -> dict[str, str]:
    """Step 1; returns {blueprint name: its id} of those listed."""
    status, listed = http_json("GET", f"{url}/global_subgraphs")
    if status == 404:
        log("EXPECTED  blueprints: this ComfyUI has no GET /global_subgraphs (0.24 and later list a pack's blueprints)")
        return {}
    ours = {e.get("name"): k for k, e in (listed or {}).items() if isinstance(e, dict)
            and e.get("source") == "custom_node" and e.get("info", {}).get("node_pack") == f"custom_nodes.{pack_dir}"} \
        if status == 200 and isinstance(listed, dict) else {}
    check("GET /global_subgraphs lists the pack's two blueprints", set(ours) == NAMES,
          f"answered {status}; the pack's: {sorted(ours)}; {len(listed or {})} in all")
    files = {f.stem: json.loads(f.read_text(encoding="utf-8")) for f in (ROOT / "subgraphs").glob("*.json")}
    for name, key in ours.items():
        status, entry = http_json("GET", f"{url}/global_subgraphs/{key}")
        data = json.loads(entry["data"]) if status == 200 and isinstance(entry, dict) and entry.get("data") else None
        check(f"GET /global_subgraphs/<id> serves {name!r} as written", data is not None and data == files.get(name),
              f"answered {status}")
    return ours


async def _prompts(url: str, chromium: str, helpers: dict, check, shots: Path | None) -> dict[str, dict]:
    """Step 2 in one browser: {editor: the frontend's prompt of the wrapped graph}."""
    build = _build()
    out = {}
    async with browser_page(chromium, check, "blueprints: frontend", shots, "blueprints-failure.png") as page:
        await helpers["open_frontend"](page, url)
        for editor in ("flux2-klein4b", build.QWEN):
            ui = build.blueprint_example(editor)
            res = await helpers["load_graph"](page, f"blueprints-{editor}.json", ui)
            bad = [f"{n['id']} {n['type']}" for n in res["nodes"] if not n["registered"] or n["has_errors"]]
            prompt = res.get("prompt") or {}
            inner = sorted({v["class_type"] for k, v in prompt.items() if ":" in str(k)})
            check(f"the frontend loads an editor ({editor}) wrapped with the blueprints and flattens them",
                  not bad and not res["errors"] and {"ReSpecProvenanceSelector", "ReSpecDriftGuard",
                                                     "ReSpecHistoryAppend"} <= set(inner),
                  f"{len(res['nodes'])} nodes; missing or flagged {bad}; errors {res['errors'][:3]}; "
                  f"classes from inside the subgraphs {inner}")
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                await page.screenshot(shots / f"blueprints-{editor}.png")
            out[editor] = prompt
    return out


def check_blueprints(url: str, pack_dir: str, chromium: str | None, helpers: dict, execute: bool,
                     shots: Path | None = None) -> list[str]:
    """Steps 1-3 (2 with `chromium`, 3 when `execute` too); returns the problems."""
    problems: list[str] = []
    check = helpers["checker"]("blueprints", problems)
    if not check_listed(url, pack_dir, check) or not chromium:
        return problems
    prompts = asyncio.run(_prompts(url, chromium, helpers, check, shots))
    klein = prompts.get("flux2-klein4b")
    if not klein:
        return problems
    if not execute:
        status, body = http_json("POST", f"{url}/prompt", {"prompt": klein, "client_id": "respec-check-blueprints"})
        check("POST /prompt accepts the wrapped graph's prompt", status == 200 and not (body or {}).get("node_errors"),
              f"answered {status}: {str(body)[:300]}")
        return problems
    _execute(url, klein, helpers, check)
    return problems


def _execute(url: str, prompt: dict, helpers: dict, check) -> None:
    """Step 3."""
    from check_native import _native_tiny, _steps, turns_watched
    image_name, why = helpers["upload_picture"](url)
    if image_name is None:
        check("upload", False, why)
        return
    wf = _native_tiny(prompt)
    ran_per_turn, turns, why = turns_watched(url, SESSION, image_name, helpers, (
        ("add a red box on the left", wf), ("remove the red box", wf)))
    if why:
        check("the wrapped graph's two turns", False, why)
        return
    steps = [_steps(t) for t in turns[1:]]
    if len(turns) != 3:
        check("the wrapped graph's session has turns 0-2", False, f"turns {[t.get('index') for t in turns]}")
        return
    log(f"      wrapped graph: post-edit steps per turn {steps}; sampler ran {[bool(r & SAMPLERS) for r in ran_per_turn]}")
    check("the wrapped graph runs two turns: the edit with Reveal and the guard, then the undo without the editor",
          [t.get("index") for t in turns] == [0, 1, 2] and bool(ran_per_turn[0] & SAMPLERS)
          and not ran_per_turn[1] & SAMPLERS and "drift_guard" in steps[0]
          and (turns[2].get("meta") or {}).get("editor_run") is False,
          f"turns {[t.get('index') for t in turns]}; steps {steps}; sampler ran per turn "
          f"{[sorted(r & SAMPLERS) for r in ran_per_turn]}; turn 2 editor_run "
          f"{(turns[2].get('meta') or {}).get('editor_run')}")
