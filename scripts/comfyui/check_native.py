"""Memory and native-route checks for scripts/comfyui/check_in_comfyui.py --execute (a real ComfyUI).

- check_free: after a benchmark prompt, ComfyUI's own POST /free {unload_models, free_memory} must
  leave none of the pack's models referenced. Shown three ways: the pack's GET /respec/models
  (its model cache; its managed models, held in a weak set, so one still listed is one something
  still references; those in ComfyUI's `current_loaded_models`), and the server's RSS before and
  after. The same prompt queued again must reload them and give the same results row.
- execute_native_omnigen2: benchmark_native_omnigen2 end to end on ComfyUI's own OmniGen2 loaders
  (UNETLoader / CLIPLoader / VAELoader) with real-size random files (scripts/comfyui/make_omnigen2_files.py:
  ComfyUI 0.8 accepts no smaller OmniGen2), a tiny controller, 64 px images and 1 step.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from comfyui_harness import http_json, log

HERE = Path(__file__).resolve().parent
OMNIGEN2_FILES = {"diffusion_models": "omnigen2_fp16.safetensors", "text_encoders": "qwen_2.5_vl_fp16.safetensors",
                  "vae": "ae.safetensors"}
_VOLATILE = ("second", "time", "timing", "written", "remote", "duration", "prompt_id", "date", "finished")


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def pack_models(url: str) -> dict:
    status, body = http_json("GET", f"{url}/respec/models")
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"GET /respec/models answered {status}: {body}")
    return body


def _stable(value):
    """A results row without the parts that differ between two runs of one prompt (timings, ids)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not any(w in k.lower() for w in _VOLATILE)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _rerun(url: str, prompt: dict) -> dict | None:
    import asyncio
    from respec.bench import remote
    rows: list[dict] = []
    asyncio.run(remote.run_jobs([(0, "rerun", prompt)], [url], lambda i, label, row, info: rows.append(row),
                                remote.QueueSettings(poll_interval=2.0, max_attempts=1, timeout=1800)))
    return rows[0] if rows else None


def free(url: str, pid: int, wait: float = 60.0) -> tuple[dict, dict, float, float]:
    """POST /free {unload_models, free_memory}; wait until the pack holds no model (or `wait` s).
    Returns (models before, models after, RSS MiB before, RSS MiB after)."""
    before, rss0 = pack_models(url), rss_mb(pid)
    status, _ = http_json("POST", f"{url}/free", {"unload_models": True, "free_memory": True})
    if status != 200:
        raise RuntimeError(f"POST /free answered {status}")
    deadline = time.monotonic() + wait
    after = pack_models(url)
    while (after["managed"] or after["cached"] or after["comfyui_loaded"]) and time.monotonic() < deadline:
        time.sleep(1.0)
        after = pack_models(url)
    time.sleep(2.0)   # ComfyUI's worker collects garbage after the unload
    return before, after, rss0, rss_mb(pid)


def check_free(url: str, pid: int, prompt: dict, row: dict | None) -> list[str]:
    """/free after a benchmark prompt leaves none of the pack's models; the rerun reloads them and
    gives the same row. Returns the problems found."""
    problems = []
    before, after, rss0, rss1 = free(url, pid)
    log(f"before /free: GET /respec/models = {json.dumps(before)}; server RSS {rss0:.0f} MiB")
    log(f"after  /free: GET /respec/models = {json.dumps(after)}; server RSS {rss1:.0f} MiB")
    if not before["managed"] or not before["comfyui_loaded"]:
        problems.append(f"before /free the pack's models were not under ComfyUI's manager: {before}")
    if after["managed"] or after["cached"] or after["comfyui_loaded"]:
        problems.append(f"after /free the pack still holds models: {after}")
    else:
        log("PASS  execute/free: POST /free left none of the pack's models referenced "
            f"({len(before['managed'])} managed, {sum(before['cached'].values())} cached before)")
    again = _rerun(url, prompt)
    reloaded = pack_models(url)
    log(f"after the rerun: GET /respec/models = {json.dumps(reloaded)}")
    if again is None:
        problems.append("the same prompt after /free gave no row")
    elif _stable(again) != _stable(row):
        a, b = _stable(again), _stable(row or {})
        diff = {k: (b.get(k), a.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
        log(f"FAIL  execute/free: the rerun's row differs: {json.dumps(diff, default=str)[:1500]}")
        problems.append(f"the rerun after /free gave another row (fields {sorted(diff)})")
    elif not reloaded["managed"]:
        problems.append("the rerun did not reload the pack's models")
    else:
        log(f"PASS  execute/free: the same prompt after /free reloaded {len(reloaded['managed'])} models and "
            f"gave the same row (S_TC {again.get('S_TC')}, sent {[t.get('sent_instruction', '')[:30] for t in again.get('turns') or []]})")
    return problems


def install_omnigen2_files(python: str, comfy: Path, cache: Path, models: Path) -> None:
    """Link the OmniGen2 files of `cache` (made with make_omnigen2_files.py when missing) into `models`,
    replacing the empty placeholders of the same names."""
    _install_files(python, comfy, cache, models, OMNIGEN2_FILES, {d: (f,) for d, f in OMNIGEN2_FILES.items()},
                   "make_omnigen2_files.py", "real-size random OmniGen2 files (a few minutes, ~7.5 GB)",
                   "OmniGen2 files (random weights, real sizes, fp8 mixed layout)")


def execute_native_omnigen2(url: str, pid: int, tiny: dict, run_benchmark) -> list[str]:
    """benchmark_native_omnigen2 end to end on ComfyUI's own OmniGen2 loaders, then /free."""
    # One step: a 4 B transformer (3 passes a step with DualCFGGuider) takes minutes a step on a CPU.
    config = {"ReSpecScenarioLoader.max_side": 64, "steps": 1,
              # references at their own (64 px) size, not ComfyUI's usual 1 megapixel: CPU time
              "ReSpecReferenceConditioning.megapixels": 0.0}
    rss0 = rss_mb(pid)
    problems, _, row = run_benchmark(url, "benchmark_native_omnigen2", tiny, config,
                                     {"ReSpecPreservationTarget", "ReSpecReferenceSelector", "DualCFGGuider",
                                      "SamplerCustomAdvanced", "ReSpecHistoryAppend"})
    rss1 = rss_mb(pid)
    log(f"server RSS before / after the native OmniGen2 prompt: {rss0:.0f} / {rss1:.0f} MiB")
    if row is not None and row.get("editor") != "omnigen2-native":
        problems.append(f"the row's editor is {row.get('editor')!r}, expected 'omnigen2-native'")
    if not problems:
        log("PASS  execute/native: benchmark_native_omnigen2 ran end to end on ComfyUI's OmniGen2 loaders")
    _, after, f0, f1 = free(url, pid)
    log(f"/free after the native prompt: server RSS {f0:.0f} -> {f1:.0f} MiB; pack models {json.dumps(after)}")
    return problems


# ------------------------------------------------------------------------------ native klein (ComfyUI 0.24+)

KLEIN_FILES = {"diffusion_models": "klein-check.safetensors", "text_encoders": "qwen_3_4b-check.safetensors",
               "vae": "flux2-vae-check.safetensors"}   # as scripts/comfyui/make_klein_files.py writes them
# The names the native klein graphs select (9B names: conversational_flux2, benchmark_native_flux2; the
# 4B graphs' names too): every one links to the small random files.
KLEIN_NAMES = {"diffusion_models": ("flux-2-klein-base-9b-fp8.safetensors", "flux-2-klein-base-4b-fp8.safetensors"),
               "text_encoders": ("qwen_3_8b_fp8mixed.safetensors", "qwen_3_4b.safetensors"),
               "vae": ("flux2-vae.safetensors", "full_encoder_small_decoder.safetensors")}
KLEIN_SESSION = "check-native-klein"


def install_klein_files(python: str, comfy: Path, cache: Path, models: Path) -> None:
    """Link the klein files of `cache` (written there once by make_klein_files.py) into `models`
    under the names the native klein graphs select, replacing the empty placeholders."""
    _install_files(python, comfy, cache, models, KLEIN_FILES, KLEIN_NAMES, "make_klein_files.py",
                   "the smallest klein files ComfyUI accepts (minutes; the Qwen3-4B text encoder is ~4.4 GB)",
                   "klein files (random weights; 1+1-block 2-head transformer, real-size Qwen3-4B fp8 mixed, real VAE)")


def _install_files(python: str, comfy: Path, cache: Path, models: Path, files: dict, names: dict, script: str,
                   writing: str, what: str) -> None:
    """Link the files of `cache`/models (written there once by `script` when missing) into `models`
    under every name of `names` (folder -> names the graphs select), replacing the placeholders."""
    src = cache / "models"
    if not all((src / d / f).is_file() for d, f in files.items()):
        log(f"writing {writing} into {src}")
        t0 = time.monotonic()
        out = subprocess.run([python, str(HERE / script), "--comfyui", str(comfy), "--models", str(src)],
                             capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise SystemExit(f"{script} failed:\n{out.stderr[-3000:]}")
        log(f"written in {time.monotonic() - t0:.0f} s: {out.stdout.strip().splitlines()[-1]}")
    for d, f in files.items():
        for name in names[d]:
            dst = models / d / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.exists() or dst.is_symlink():
                dst.unlink()
            dst.symlink_to(src / d / f)
    sizes = {f: f"{(src / d / f).stat().st_size / 2**30:.2f} GiB" for d, f in files.items()}
    log(f"{what}: {sizes}")


def _begin(url: str, helpers: dict, label: str) -> tuple[list[str], object, str | None]:
    """A check's start: (its problems list, its PASS/FAIL `check` under `label`, the name of the
    uploaded picture, or None when the upload failed: then one FAIL line says why)."""
    problems: list[str] = []
    check = helpers["checker"](label, problems)
    image_name, why = helpers["upload_picture"](url)
    if image_name is None:
        check("upload", False, why)
    return problems, check, image_name


def _native_tiny(prompt: dict, steps: int = 1) -> dict:
    """A native klein prompt at its smallest: `steps` sampling steps, references at their own size (in place)."""
    for node in prompt.values():
        if node["class_type"] == "PrimitiveInt" and str(node.get("_meta", {}).get("title", "")).startswith(
                ("Steps", "Editor steps")):
            node["inputs"]["value"] = steps
        elif node["class_type"] == "ReSpecReferenceConditioning":
            node["inputs"]["megapixels"] = 0.0
    return prompt


def execute_native_klein(url: str, pid: int, tiny: dict, helpers: dict) -> list[str]:
    """conversational_flux2 for two turns (a persistent session, the tiny controller) and
    benchmark_native_flux2 on one 2-turn scenario, on ComfyUI's own klein loaders with the files
    install_klein_files linked, 64-96 px images, 1 step. `helpers`: check_in_comfyui's upload_picture,
    conversation_prompt, queue_and_wait, use_tiny_models, run_benchmark, checker. Returns the problems."""
    return _execute_native(url, pid, tiny, helpers, "execute/native-klein", "conversational_flux2",
                           "benchmark_native_flux2", KLEIN_SESSION, "flux2-native", {"CFGGuider", "SamplerCustomAdvanced"})


def _execute_native(url: str, pid: int, tiny: dict, helpers: dict, label: str, conversation: str,
                    benchmark: str, session: str, row_editor: str, sampler: set[str], turn_check=None,
                    requests=("add a red box on the left", "remove the red box"), vlm: bool = True) -> list[str]:
    """The `conversation` graph for two turns (`requests`) on `session` (the tiny controller; `vlm`: whether
    turn 2 is planned by it) and the `benchmark` graph on one 2-turn scenario (its row labelled
    `row_editor`; the slots' controller, selector, `sampler` nodes and append must run in slots 1-2
    only), with native files already linked, 64-96 px images, 1 step. `turn_check(check, turns)`: more
    checks on the session's turns. Returns the problems."""
    import sys
    sys.path.insert(0, str(HERE.parents[1]))
    from respec.bench import workflow
    problems, check, image_name = _begin(url, helpers, label)
    if image_name is None:
        return problems
    wf = _native_tiny(helpers["use_tiny_models"](workflow.load_api_workflow(workflow.shipped_workflow(conversation)), tiny))
    rss0 = rss_mb(pid)
    for turn_label, request in zip(("turn 1", "turn 2"), requests):
        prompt = helpers["conversation_prompt"](wf, image_name, session, request)
        t0 = time.monotonic()
        entry, why = helpers["queue_and_wait"](url, prompt, timeout=3600)
        seconds = time.monotonic() - t0
        if why:
            check(f"{conversation} {turn_label}", False, why)
            return problems
        log(f"      {conversation} {turn_label}: {seconds:.1f} s; server RSS {rss_mb(pid):.0f} MiB")
    status, body = http_json("GET", f"{url}/respec/sessions/{session}")
    turns = body.get("turns") if isinstance(body, dict) else None
    last = (turns or [{}])[-1]
    check(f"{conversation}: two turns on ComfyUI's own loaders",
          status == 200 and [t.get("index") for t in turns or []] == [0, 1, 2]
          and (last.get("plan") or {}).get("vlm_called") is vlm,
          f"session turns {[t.get('index') for t in turns or []]}, turn 2 plan vlm_called "
          f"{(last.get('plan') or {}).get('vlm_called')}, meta {last.get('meta')}, image "
          f"{last.get('width')}x{last.get('height')}")
    if turn_check is not None and turns:
        turn_check(check, turns)
    t0 = time.monotonic()
    bench_problems, _, row = helpers["run_benchmark"](
        url, benchmark, tiny, {"ReSpecScenarioLoader.max_side": 64, "steps": 1,
                               "ReSpecReferenceConditioning.megapixels": 0.0},
        {"ReSpecPreservationTarget", "ReSpecReferenceSelector", *sampler, "ReSpecHistoryAppend"})
    log(f"      {benchmark}: {time.monotonic() - t0:.1f} s; server RSS {rss0:.0f} -> {rss_mb(pid):.0f} MiB")
    if row is not None and row.get("editor") != row_editor:
        bench_problems.append(f"the row's editor is {row.get('editor')!r}, expected {row_editor!r}")
    check(f"{benchmark}: one scenario end to end", not bench_problems,
          "; ".join(bench_problems) or f"row {row.get('key') if row else None}, {len((row or {}).get('turns') or [])} "
                                       f"turns, config {(row or {}).get('config')}")
    return problems


QWEN_FILES = {"diffusion_models": "qwen-image-edit-check.safetensors", "text_encoders": "qwen_2.5_vl_7b-check.safetensors",
              "vae": "qwen-image-vae-check.safetensors"}   # as scripts/comfyui/make_qwen_image_files.py writes them
QWEN_NAMES = {"diffusion_models": ("qwen_image_edit_2511_fp8mixed.safetensors",),
              "text_encoders": ("qwen_2.5_vl_7b_fp8_scaled.safetensors",), "vae": ("qwen_image_vae.safetensors",)}
QWEN_SESSION = "check-native-qwen"


def install_qwen_files(python: str, comfy: Path, cache: Path, models: Path) -> None:
    """Link the Qwen-Image-Edit files of `cache` (written there once by make_qwen_image_files.py) into
    `models` under the names the Qwen graphs select."""
    _install_files(python, comfy, cache, models, QWEN_FILES, QWEN_NAMES, "make_qwen_image_files.py",
                   "the smallest Qwen-Image-Edit 2511 files ComfyUI accepts (minutes; the Qwen2.5-VL 7B text encoder "
                   "is ~8.3 GB)", "Qwen-Image-Edit files (random weights; 1-block transformer, real-size Qwen2.5-VL 7B "
                   "fp8 mixed, 16-wide Wan 2.1 VAE)")


def _qwen_turn_check(check, turns: list[dict]) -> None:
    """Each Qwen turn records what Reveal Composite and the Drift Guard did (both on by default)."""
    steps = [[e.get("step") for e in (t.get("meta") or {}).get("post_edit") or []] for t in turns[1:]]
    check("Reveal Composite and Drift Guard ran on every turn",
          all("reveal_composite" in s and "drift_guard" in s for s in steps), f"post_edit steps per turn {steps}")


def execute_native_qwen(url: str, pid: int, tiny: dict, helpers: dict) -> list[str]:
    """conversational_qwen_image_edit_2511 for two edit turns (no VLM: provenance plans them) and
    benchmark_native_qwen_image_edit_2511 on one 2-turn scenario, on ComfyUI's own Qwen-Image loaders with
    the files install_qwen_files linked (64-96 px images; TextEncodeQwenImageEditPlus reads each image at
    384 x 384 whatever its size), 1 step."""
    return _execute_native(url, pid, tiny, helpers, "execute/native-qwen", "conversational_qwen_image_edit_2511",
                           "benchmark_native_qwen_image_edit_2511", QWEN_SESSION, "qwen-image-edit-2511-native",
                           {"KSampler", "ReSpecDriftGuard"}, _qwen_turn_check,
                           requests=("add a red box on the left", "put a blue ball on the right"), vlm=False)


# ------------------------------------------------------------------------------ any editor (issue 44)

KLEIN4B = "conversational_flux2_klein4b"
KLEIN4B_SESSION = "check-native-klein4b"
SAMPLERS = {"SamplerCustomAdvanced", "KSampler"}
VLM_OPTION = {"ReSpecVLMLoader", "ReSpecPreservationTarget"}


def turns_watched(url: str, session: str, image_name: str, helpers: dict, turns) -> tuple[list[set], list[dict], str]:
    """Queue `turns` ((request, API prompt) pairs) on `session`, each followed on ComfyUI's websocket:
    ([the classes of the nodes that executed, per turn: a lazy input never asked for runs nothing],
    the session's turns, '' or why a turn did not finish)."""
    import asyncio
    import copy

    from check_history_first import _watched
    ran = []
    for request, wf in turns:
        prompt = helpers["conversation_prompt"](wf, image_name, session, request)
        run = asyncio.run(_watched(url, copy.deepcopy(prompt), timeout=3600))
        if run["error"]:
            return ran, [], f"{request!r}: {run['error']}"
        ran.append({prompt[n]["class_type"] for n in run["ran"]})
        log(f"      {session} {request!r}: {run['seconds']:.1f} s")
    status, body = http_json("GET", f"{url}/respec/sessions/{session}")
    return ran, (body.get("turns") or []) if status == 200 and isinstance(body, dict) else [], ""


def _steps(turn: dict) -> list[str]:
    return [e.get("step") for e in (turn.get("meta") or {}).get("post_edit") or []]


def execute_native_klein4b(url: str, pid: int, tiny: dict, helpers: dict, info: dict) -> list[str]:
    """conversational_flux2_klein4b on the small random klein files, three turns: 'add a red box on the
    left' (no VLM: the sampler, Reveal Composite and the Drift Guard run), 'remove the red box'
    (whatever the random editor drew at turn 1 is taken back from the history: the sampler does not
    run, the image is I_0), then with the VLM option switched on (its group made active, converted as the
    frontend converts it; the tiny controller) 'put a blue ball on the right'. Returns the problems."""
    import sys
    sys.path.insert(0, str(HERE.parents[1]))
    from respec.bench import workflow
    problems, check, image_name = _begin(url, helpers, "execute/native-klein4b")
    if image_name is None:
        return problems
    plain = _native_tiny(helpers["use_tiny_models"](workflow.load_api_workflow(workflow.shipped_workflow(KLEIN4B)), tiny))
    ui = json.loads((HERE.parents[1] / "workflows" / workflow.shipped_workflows()[KLEIN4B]["ui"]).read_text("utf-8"))
    for node in ui["nodes"]:
        if node["type"] in VLM_OPTION:
            node["mode"] = 0                 # the user switches the VLM option on (Ctrl+B on its group)
    with_vlm = _native_tiny(helpers["use_tiny_models"](helpers["ui_to_api"](ui, info), tiny))
    ran, turns, why = turns_watched(url, KLEIN4B_SESSION, image_name, helpers, (
        ("add a red box on the left", plain), ("remove the red box", plain), ("put a blue ball on the right", with_vlm)))
    if why:
        check("three turns", False, why)
        return problems
    if len(turns) != 4:
        check("three turns kept", False, f"session turns {[t.get('index') for t in turns]}")
        return problems
    steps = [_steps(t) for t in turns[1:]]
    plans = [t.get("plan") or {} for t in turns[1:]]
    check("turn 1 (no VLM): the sampler, Reveal Composite and the Drift Guard ran",
          bool(ran[0] & SAMPLERS) and {"ReSpecProvenanceSelector", "ReSpecRevealComposite", "ReSpecDriftGuard"} <= ran[0]
          and not ran[0] & VLM_OPTION and plans[0].get("vlm_called") is False,
          f"sampler {sorted(ran[0] & SAMPLERS)}; post-edit steps {steps[0]}; vlm_called {plans[0].get('vlm_called')}")
    check("turn 2 is taken back from the history: the sampler did not run, the image is I_0",
          not ran[1] & SAMPLERS and (turns[2].get("meta") or {}).get("editor_run") is False
          and turns[2].get("image") == turns[0].get("image"),
          f"sampler {sorted(ran[1] & SAMPLERS)}; editor_run {(turns[2].get('meta') or {}).get('editor_run')}; "
          f"image {str(turns[2].get('image'))[:12]}, I_0 {str(turns[0].get('image'))[:12]}")
    check("turn 3 with the VLM option on: the controller planned, the sampler ran",
          VLM_OPTION <= ran[2] and bool(ran[2] & SAMPLERS) and plans[2].get("vlm_called") is True,
          f"ran {sorted(ran[2] & (VLM_OPTION | SAMPLERS))}; vlm_called {plans[2].get('vlm_called')}")
    return problems


def execute_editor_swap(url: str, pid: int, tiny: dict, helpers: dict) -> list[str]:
    """The editor block swapped in a real server: conversational_flux2_klein4b with the Qwen-Image-Edit 2511
    block (scripts/workflows/editor_block.py), and the Qwen graph with the klein block, one edit turn
    each on the small random files of both: the other editor's sampler runs, and the turn is kept with
    Reveal Composite's and the Drift Guard's records. Returns the problems."""
    import sys
    sys.path.insert(0, str(HERE.parents[1] / "scripts" / "workflows"))
    import editor_block
    problems, check, image_name = _begin(url, helpers, "execute/editor-swap")
    if image_name is None:
        return problems
    for key, donor, marker in ((KLEIN4B, "conversational_qwen_image_edit_2511", "TextEncodeQwenImageEditPlus"),
                               ("conversational_qwen_image_edit_2511", KLEIN4B, "SamplerCustomAdvanced")):
        api, block = editor_block.shipped(key)
        wf = _native_tiny(editor_block.swap_editor(api, block, *editor_block.shipped(donor)))
        ran, turns, why = turns_watched(url, f"check-swap-{len(problems)}-{key[-6:]}", image_name, helpers,
                                 (("add a red box on the left", wf),))
        if why:
            check(f"{key} with the block of {donor}", False, why)
            continue
        steps = _steps(turns[-1]) if len(turns) == 2 else []
        check(f"{key} with the editor block of {donor}: one turn, the other editor ran",
              marker in ran[0] and {"reveal_composite", "drift_guard"} <= set(steps),
              f"ran {sorted(ran[0] & (SAMPLERS | {marker}))}; post-edit steps {steps}")
    return problems


TEXTGEN_SESSION = "check-textgen"


def execute_textgen(url: str, pid: int, tiny: dict, helpers: dict) -> list[str]:
    """conversational_textgen_flux2 for two turns on ComfyUI's own TextGenerate, its controller being
    the random real-size Qwen3-4B of install_klein_files loaded as a plain text model (CLIPLoader type
    stable_diffusion: Qwen3 0.6-8B generate in ComfyUI 0.24; this one reads no images) and 4 new
    tokens: turn 1 makes no controller call; turn 2's plan comes from TextGenerate's text through Plan
    from Text (random text: the C.2 / C.3 fallbacks and on_parse_failure=request). Returns the problems."""
    import sys
    sys.path.insert(0, str(HERE.parents[1]))
    from respec.bench import workflow
    problems, check, image_name = _begin(url, helpers, "execute/textgen")
    if image_name is None:
        return problems
    wf = _native_tiny(workflow.load_api_workflow(workflow.shipped_workflow("conversational_textgen_flux2")))
    for node in wf.values():
        if node["class_type"] == "CLIPLoader" and node["inputs"]["type"] != "flux2":
            node["inputs"].update(clip_name=KLEIN_NAMES["text_encoders"][1], type="stable_diffusion")
        elif node["class_type"] == "TextGenerate":
            node["inputs"]["max_length"] = 4
    for label, request in (("turn 1", "add a red box on the left"), ("turn 2", "remove the red box")):
        prompt = helpers["conversation_prompt"](wf, image_name, TEXTGEN_SESSION, request)
        t0 = time.monotonic()
        entry, why = helpers["queue_and_wait"](url, prompt, timeout=3600)
        if why:
            check(f"conversational_textgen_flux2 {label}", False, why)
            return problems
        log(f"      conversational_textgen_flux2 {label}: {time.monotonic() - t0:.1f} s; server RSS {rss_mb(pid):.0f} MiB")
    status, body = http_json("GET", f"{url}/respec/sessions/{TEXTGEN_SESSION}")
    turns = body.get("turns") if isinstance(body, dict) else []
    plans = [t.get("plan") or {} for t in turns or []]
    ok = (status == 200 and len(plans) == 3 and plans[1].get("vlm_called") is False
          and plans[2].get("vlm_called") is True and plans[2].get("controller") == "TextGenerate")
    check("two turns, turn 2 planned from TextGenerate's text", ok,
          f"turns {[t.get('index') for t in turns or []]}; turn 1 vlm_called {plans[1].get('vlm_called') if len(plans) > 1 else None}; "
          f"turn 2 controller {plans[2].get('controller') if len(plans) > 2 else None!r}, "
          f"fallbacks {plans[2].get('fallbacks') if len(plans) > 2 else None}, "
          f"sent {(turns[2].get('sent_instruction') if len(turns or []) > 2 else None)!r}")
    return problems


# ------------------------------------------------------------------------------ SAM3 (ComfyUI 0.24+)

SAM3_FILES = {"checkpoints": "sam3-check.safetensors"}   # as scripts/comfyui/make_sam3_file.py writes it
SAM3_NAMES = {"checkpoints": ("sam3.1_multiplex_fp16.safetensors",)}
EDIT_REGION_SESSION = "check-edit-region"


def install_sam3_file(python: str, comfy: Path, cache: Path, models: Path) -> None:
    """Link the random SAM3 checkpoint of `cache` (written there once by make_sam3_file.py) into `models`
    under the name the SAM3 graphs select."""
    _install_files(python, comfy, cache, models, SAM3_FILES, SAM3_NAMES, "make_sam3_file.py",
                   "a random real-size SAM3 checkpoint (~1.7 GB)", "SAM3 file (random weights, real sizes, bf16)")


def execute_sam3(url: str, pid: int, tiny: dict, helpers: dict, info: dict) -> list[str]:
    """occluder_mask_sam3 on the uploaded picture (SAM3_Detect without refinement passes: each pass runs
    SAM3's 1008 px backbone again, minutes on a CPU), its record read from /history; then
    conversational_provenance_flux2 with its edit-region option switched on (the bypassed group made
    active, converted as the frontend converts it) for two turns on the tiny klein: Edit Region from
    Text, SAM3_Detect and Edit Region Mask must run and the Drift Guard must take their mask.
    `helpers`: check_in_comfyui's upload_picture, conversation_prompt, queue_and_wait, use_tiny_models,
    checker, ui_to_api. Returns the problems."""
    import sys
    sys.path.insert(0, str(HERE.parents[1]))
    from respec.bench import workflow
    problems, check, image_name = _begin(url, helpers, "execute/sam3")
    if image_name is None:
        return problems
    wf = workflow.load_api_workflow(workflow.shipped_workflow("occluder_mask_sam3"))
    for node in wf.values():
        if node["class_type"] == "LoadImage":
            node["inputs"]["image"] = image_name
        elif node["class_type"] == "SAM3_Detect":
            node["inputs"]["refine_iterations"] = 0
    t0 = time.monotonic()
    entry, why = helpers["queue_and_wait"](url, wf, timeout=3600)
    if why:
        check("occluder_mask_sam3", False, why)
        return problems
    records = [json.loads(r) for out in (entry.get("outputs") or {}).values() for r in out.get("respec_masks") or []]
    attempts = [a.get("query") for a in (records[0][0].get("attempts") if records else [])]
    check("occluder_mask_sam3: SAM3_Detect -> the B.1 acceptance", bool(records) and attempts == [
              "bouquet of flowers", "flowers", "flower"],
          f"{time.monotonic() - t0:.1f} s; record: status {records[0][0].get('status') if records else None}, "
          f"queries {attempts}, scores {[a.get('best_confidence') for a in records[0][0].get('attempts', [])] if records else None}; "
          f"server RSS {rss_mb(pid):.0f} MiB")
    ui_file = HERE.parents[1] / "workflows" / workflow.shipped_workflows()["conversational_provenance_flux2"]["ui"]
    ui = json.loads(ui_file.read_text(encoding="utf-8"))
    for node in ui["nodes"]:
        if node.get("mode") == 4:
            node["mode"] = 0                 # the user switches the option on (Ctrl+B on the group)
    prompt_wf = helpers["use_tiny_models"](helpers["ui_to_api"](ui, info), tiny)
    for node in prompt_wf.values():
        if node["class_type"] == "SAM3_Detect":
            node["inputs"].update(refine_iterations=0, threshold=0.0)   # random weights: keep its best object
    wanted = {"ReSpecEditRegionFromText", "SAM3_Detect", "ReSpecEditRegionMask", "ReSpecDriftGuard"}
    for label, request in (("turn 1", "add a red box on the left"), ("turn 2", "remove the red box")):
        prompt = helpers["conversation_prompt"](prompt_wf, image_name, EDIT_REGION_SESSION, request)
        t0 = time.monotonic()
        entry, why = helpers["queue_and_wait"](url, prompt, timeout=3600)
        if why:
            check(f"edit region option {label}", False, why)
            return problems
        cached = {str(n) for kind, d in (entry.get("status") or {}).get("messages") or []
                  if kind == "execution_cached" for n in d.get("nodes") or []}
        ran = {prompt[n]["class_type"] for n in set(prompt) - cached}
        log(f"      edit region option {label}: {time.monotonic() - t0:.1f} s")
        check(f"edit region option {label}: its nodes ran", wanted <= ran, f"ran {sorted(ran & wanted)}")
    status, body = http_json("GET", f"{url}/respec/sessions/{EDIT_REGION_SESSION}")
    turns = body.get("turns") if isinstance(body, dict) else []
    guards = [next((e for e in (t.get("meta") or {}).get("post_edit") or [] if e.get("step") == "drift_guard"), {})
              for t in turns[1:]]
    check("edit region option: two turns, the guard's record says where its region came from",
          [t.get("index") for t in turns] == [0, 1, 2] and all(guards),
          f"turns {[t.get('index') for t in turns]}; guard per turn: "
          f"{[(g.get('applied'), g.get('region_from') or g.get('reason')) for g in guards]}")
    return problems
