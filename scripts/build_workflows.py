"""Build the shipped workflows: workflows/<name>.json (UI format) and workflows/api/<name>.api.json.

Every graph is described once below, in Python; both files are generated from it against the
registered nodes' INPUT_TYPES (and a table of ComfyUI core node specs), so widget order, socket
types and defaults are always those ComfyUI will load. Run after changing a node's inputs:

    python scripts/build_workflows.py            # write the files
    python scripts/build_workflows.py --check    # exit 1 if a file is out of date
    python scripts/build_workflows.py --refresh-core http://127.0.0.1:8188
        # re-read the core node specs from a running ComfyUI (scripts/comfy_core_nodes.json)

API files live in workflows/api/ because ComfyUI's template browser lists every *.json directly
in workflows/ and loads it as a UI workflow.
"""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # a script, not part of the pack: its sibling module
    sys.path.insert(0, str(HERE))

import workflow_graph as wg  # noqa: E402

ROOT = wg.ROOT
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"

# ComfyUI core nodes the workflows use; their specs are read from a real ComfyUI.
CORE_NODES = [
    "LoadImage", "SaveImage", "PreviewImage", "CLIPTextEncode", "ConditioningZeroOut",
    "DualCFGGuider", "CFGGuider", "BasicGuider", "FluxGuidance", "SamplerCustomAdvanced",
    "KSamplerSelect", "BasicScheduler", "Flux2Scheduler", "RandomNoise", "VAEDecode", "VAEEncode",
    "UNETLoader", "CLIPLoader", "VAELoader", "EmptySD3LatentImage", "EmptyFlux2LatentImage",
    "ReferenceLatent", "ImageScaleToTotalPixels", "GetImageSize", "ImageFromBatch", "ImageBatch",
    "PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveStringMultiline", "PrimitiveBoolean",
]
_KEEP = ("input", "input_order", "output", "output_is_list", "output_name", "name", "display_name",
         "category", "output_node", "python_module")


def _strip(entry):
    """An input entry without its tooltip (the table keeps what validation and layout need)."""
    if isinstance(entry, list) and len(entry) > 1 and isinstance(entry[1], dict):
        return [entry[0], {k: v for k, v in entry[1].items() if k != "tooltip"}] + entry[2:]
    return entry


def refresh_core(url: str) -> None:
    """Rewrite scripts/comfy_core_nodes.json from a running ComfyUI's /object_info."""
    nodes, version = {}, None
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/system_stats", timeout=30) as r:
            version = json.load(r).get("system", {}).get("comfyui_version")
    except Exception:
        pass
    for name in CORE_NODES:
        with urllib.request.urlopen(f"{url.rstrip('/')}/object_info/{name}", timeout=60) as r:
            info = json.load(r).get(name)
        if info is None:
            raise SystemExit(f"{url} has no node {name}: use a ComfyUI >= 0.8")
        info = {k: info[k] for k in _KEEP if k in info}
        info["input"] = {sec: {n: _strip(e) for n, e in ents.items()} for sec, ents in info["input"].items()}
        # File lists depend on the machine: keep them empty (a value must then be given explicitly).
        for sec, ents in info["input"].items():
            for n, e in ents.items():
                if name.endswith("Loader") and isinstance(e, list) and isinstance(e[0], list) and \
                        n.endswith("_name"):
                    ents[n] = [[]] + e[1:]
        nodes[name] = info
    table = {"comment": "ComfyUI core node specs, from GET /object_info/<name> of a real ComfyUI "
                        "(tooltips dropped, loader file lists emptied). Regenerate with "
                        "`python scripts/build_workflows.py --refresh-core URL`.",
             "comfyui_version": version, "nodes": nodes}
    wg.CORE_TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {wg.CORE_TABLE} ({len(nodes)} nodes, ComfyUI {version})")


# ------------------------------------------------------------------------------ the graphs

GRAPHS = {}


def graph(fn):
    GRAPHS[fn.__name__] = fn
    return fn


# Model files the native workflows select. They are the names ComfyUI's own FLUX.2 / OmniGen2
# example workflows use (Comfy-Org's repackaged files); rename in the loaders if yours differ.
FLUX2_NATIVE = {"unet": "flux-2-klein-base-9b.safetensors", "clip": "qwen_3_8b.safetensors",
                "vae": "flux2-vae.safetensors"}
OMNIGEN2_NATIVE = {"unet": "omnigen2_fp16.safetensors", "clip": "qwen_2.5_vl_fp16.safetensors",
                   "vae": "ae.safetensors"}
FIRST_REQUEST = "add a large bouquet of sunflowers in front of the person"
SESSION_NOTE = """\
**One prompt per turn.** Type your request in *Your request* and queue. The session
(`session_id`) is kept on disk between prompts: every queue adds one turn, starting from the
image in *Load Image* the first time. Queueing the same request again does not add it twice.
To undo, set History Store's mode to `rewind` and `turn` to the last turn to keep, queue once,
then set it back to `new`. Start another conversation with another `session_id`.

The controller (Qwen3-VL by default, or an OpenAI-compatible server) reads the history and,
on a turn that uncovers something an earlier edit hid, picks the past image that still shows
it and rewrites the request (paper §4). Weights: see docs/workflows.md."""


def _session_controller(g: wg.Graph, request_default: str):
    """Load Image -> History Store (persistent session) + the user's request + the ReSpec
    controller chain (Preservation Target -> Reference Selector, Instruction Rewriter)."""
    image = g.node("LoadImage", image="example.png")
    store = g.node("ReSpecHistoryStore", mode="new", session_id="my-session", image=image["IMAGE"])
    request = g.node("PrimitiveStringMultiline", title="Your request", value=request_default)
    vlm = g.node("ReSpecVLMLoader")
    plan = g.node("ReSpecPreservationTarget", history=store["history"], instruction=request[0],
                  vlm=vlm["vlm"])
    select = g.node("ReSpecReferenceSelector", history=store["history"], plan=plan["plan"])
    rewrite = g.node("ReSpecInstructionRewriter", plan=plan["plan"])
    g.node("PreviewImage", title="References given to the editor", images=select["editor_images"])
    return store, request, plan, select, rewrite


def _append_and_save(g, store, request, plan, select, rewrite, image, editor_name: str):
    append = g.node("ReSpecHistoryAppend", history=store["history"], image=image, instruction=request[0],
                    sent_instruction=rewrite["instruction"], plan=plan["plan"],
                    meta=json.dumps({"editor": editor_name}), editor_image_ids=select["image_ids"])
    g.node("SaveImage", images=append["current_image"], filename_prefix="respec/turn")
    return append


@graph
def conversational_flux2(specs):
    g = wg.Graph("conversational_flux2", specs, title="ReSpec conversational editing (FLUX.2 [klein])",
                 description="One prompt per turn on a persistent session: history -> controller -> "
                             "references + rewritten request -> FLUX.2 [klein] edit -> append -> save.")
    store, request, plan, select, rewrite = _session_controller(g, FIRST_REQUEST)
    editor = g.node("ReSpecFlux2Loader")
    edit = g.node("ReSpecFlux2Edit", editor=editor["editor"], editor_images=select["editor_images"],
                  current_image=select["current_image"], instruction=rewrite["instruction"],
                  seed=42, steps=30, guidance=4.0)
    _append_and_save(g, store, request, plan, select, rewrite, edit["image"], "flux2-klein")
    g.note(SESSION_NOTE)
    return g


def _native(g: wg.Graph, files: dict, clip_type: str):
    """Loaders + positive / negative text conditioning with the selected references appended."""
    unet = g.node("UNETLoader", unet_name=files["unet"])
    clip = g.node("CLIPLoader", clip_name=files["clip"], type=clip_type)
    vae = g.node("VAELoader", vae_name=files["vae"])
    return unet, clip, vae


@graph
def native_flux2_reference(specs):
    g = wg.Graph("native_flux2_reference", specs,
                 title="ReSpec with ComfyUI's own FLUX.2 loaders (reference latents)",
                 description="The ReSpec controller and Reference Selector feeding ComfyUI-native FLUX.2 "
                             "sampling: the references become reference latents on the conditioning.")
    store, request, plan, select, rewrite = _session_controller(g, FIRST_REQUEST)
    unet, clip, vae = _native(g, FLUX2_NATIVE, "flux2")
    pos_text = g.node("CLIPTextEncode", title="Rewritten request", text=rewrite["instruction"], clip=clip[0])
    neg_text = g.node("CLIPTextEncode", title="Negative (empty)", text="", clip=clip[0])
    pos = g.node("ReSpecReferenceConditioning", conditioning=pos_text[0], vae=vae[0],
                 editor_images=select["editor_images"])
    neg = g.node("ReSpecReferenceConditioning", conditioning=neg_text[0], vae=vae[0],
                 editor_images=select["editor_images"])
    size = g.node("GetImageSize", image=select["current_image"])
    guider = g.node("CFGGuider", model=unet[0], positive=pos[0], negative=neg[0], cfg=4.0)
    sigmas = g.node("Flux2Scheduler", steps=30, width=size["width"], height=size["height"])
    latent = g.node("EmptyFlux2LatentImage", width=size["width"], height=size["height"], batch_size=1)
    noise = g.node("RandomNoise", noise_seed=42)
    sampler = g.node("KSamplerSelect", sampler_name="euler")
    sample = g.node("SamplerCustomAdvanced", noise=noise[0], guider=guider[0], sampler=sampler[0],
                    sigmas=sigmas[0], latent_image=latent[0])
    decoded = g.node("VAEDecode", samples=sample["output"], vae=vae[0])
    _append_and_save(g, store, request, plan, select, rewrite, decoded[0], "flux2-native")
    g.note(SESSION_NOTE + "\n\n**Native models.** Put the FLUX.2 [klein] files in ComfyUI's "
           "`models/diffusion_models`, `models/text_encoders` and `models/vae` and pick them in the three "
           "loaders (a ComfyUI version with native klein support is needed). klein base runs real CFG: "
           "CFGGuider, guidance 4.0, 30 steps (the paper's setting).", title="Read me")
    return g


@graph
def native_omnigen2_reference(specs):
    g = wg.Graph("native_omnigen2_reference", specs,
                 title="ReSpec with ComfyUI's own OmniGen2 loaders (reference latents)",
                 description="The ReSpec controller and Reference Selector feeding ComfyUI-native OmniGen2 "
                             "sampling with text + image guidance (DualCFGGuider).")
    store, request, plan, select, rewrite = _session_controller(g, FIRST_REQUEST)
    unet, clip, vae = _native(g, OMNIGEN2_NATIVE, "omnigen2")
    pos_text = g.node("CLIPTextEncode", title="Rewritten request", text=rewrite["instruction"], clip=clip[0])
    neg_text = g.node("CLIPTextEncode", title="Negative", clip=clip[0],
                      text="blurry, low quality, distorted, deformed, watermark")
    pos = g.node("ReSpecReferenceConditioning", conditioning=pos_text[0], vae=vae[0],
                 editor_images=select["editor_images"])
    neg_ref = g.node("ReSpecReferenceConditioning", conditioning=neg_text[0], vae=vae[0],
                     editor_images=select["editor_images"])
    size = g.node("GetImageSize", image=select["current_image"])
    # cond1: request + references, cond2: negative + references (image guidance),
    # negative: plain negative. Paper: text guidance 5.0, image guidance 2.0, 50 steps.
    guider = g.node("DualCFGGuider", model=unet[0], cond1=pos[0], cond2=neg_ref[0], negative=neg_text[0],
                    cfg_conds=5.0, cfg_cond2_negative=2.0, style="regular")
    sigmas = g.node("BasicScheduler", model=unet[0], scheduler="simple", steps=50, denoise=1.0)
    latent = g.node("EmptySD3LatentImage", width=size["width"], height=size["height"], batch_size=1)
    noise = g.node("RandomNoise", noise_seed=42)
    sampler = g.node("KSamplerSelect", sampler_name="euler")
    sample = g.node("SamplerCustomAdvanced", noise=noise[0], guider=guider[0], sampler=sampler[0],
                    sigmas=sigmas[0], latent_image=latent[0])
    decoded = g.node("VAEDecode", samples=sample["output"], vae=vae[0])
    _append_and_save(g, store, request, plan, select, rewrite, decoded[0], "omnigen2-native")
    g.note(SESSION_NOTE + "\n\n**Native models.** Put the OmniGen2 files (`omnigen2_fp16.safetensors`, "
           "`qwen_2.5_vl_fp16.safetensors`, the FLUX.1 `ae.safetensors`) in ComfyUI's `models/diffusion_models`, "
           "`models/text_encoders`, `models/vae`. DualCFGGuider: text guidance 5.0, image guidance 2.0, "
           "50 steps (the paper's setting).", title="Read me")
    return g


# ------------------------------------------------------------------------------ benchmark graphs

TURN_SLOTS = 5   # the paper's longest scenarios have 5 turns
EDITORS = {
    # name: (loader, edit node, its settings: the paper's)
    "flux2": ("ReSpecFlux2Loader", "ReSpecFlux2Edit", {"steps": 30, "guidance": 4.0}),
    "omnigen2": ("ReSpecOmniGen2Loader", "ReSpecOmniGen2Edit",
                 {"steps": 50, "text_guidance": 5.0, "image_guidance": 2.0}),
}
BENCH_NOTE = """\
**OCCUR benchmark loop.** Scenario Loader reads scenario `index` of `dataset` (the shipped
`occur_sample`, or a path to your scenario file); `index` steps by one per queued prompt, so
queue the graph once per scenario (Queue (N)). Each of the {slots} turn-slot groups runs one
turn: Scenario Turn -> {chain} -> History Append -> Scenario Turn Switch. A scenario with
fewer turns leaves the later slots' `exists` False: their switch passes the history through
and their nodes never run. Then masks on the generated turns, OCCUR scores of the final image
against the generated I_ref, and one results row in `output/respec/bench/results.jsonl`
(`python -m respec report` makes the paper's tables from it).

{switches}Headless, on one or more servers: `python -m respec bench --server http://127.0.0.1:8188`
(see docs/workflows.md)."""


def stack(nodes, x: int, y: int = 80, gap: int = 40) -> int:
    """Place nodes top to bottom at column x; returns the y below the last one."""
    for n in nodes:
        n.at = (x, y)
        y += wg.Graph._size(n)[1] + gap
    return y


def _scenario_start(g: wg.Graph):
    loader = g.node("ReSpecScenarioLoader", dataset="occur_sample", index=0, max_side=1024,
                    control={"index": "increment"})
    store = g.node("ReSpecHistoryStore", title="History (in this graph)", mode="in-graph",
                   image=loader["source_image"])
    return loader, store


def _scenario_end(g: wg.Graph, loader, history, config: str, editor_name: str, x: int):
    masker = g.node("ReSpecMaskerLoader")
    scorer = g.node("ReSpecScorerLoader")
    masks = g.node("ReSpecScenarioMasks", masker=masker["masker"], history=history, scenario=loader["scenario"])
    score = g.node("ReSpecOccurScore", scorer=scorer["scorer"], masks=masks["masks"],
                   reference_turn=loader["reference_turn"], history=history)
    writer = g.node("ReSpecResultsWriter", scenario=loader["scenario"], history=history,
                    score_record=score["record"], config=config, editor=editor_name,
                    results_file="bench/results.jsonl")
    nodes = [masker, scorer, masks, score, writer]
    stack(nodes, x)
    g.group("Masks, OCCUR score, results row", nodes)


def _benchmark(name: str, editor_name: str, specs: dict, *, respec: bool) -> wg.Graph:
    loader_cls, edit_cls, edit_settings = EDITORS[editor_name]
    label = {"flux2": "FLUX.2 [klein]", "omnigen2": "OmniGen2"}[editor_name]
    if respec:
        title = f"OCCUR benchmark: ReSpec + {label} (PTI / HRS switches)"
        desc = (f"The full benchmark loop with ReSpec and {label}: scenario -> {TURN_SLOTS} turn slots (controller, "
                "selector, rewriter, editor, append) -> trajectory masks -> OCCUR score -> results row. "
                "The PTI / HRS switches give the paper's table 2 rows.")
    else:
        title = f"OCCUR benchmark: baseline {label} (no ReSpec)"
        desc = (f"The benchmark loop without ReSpec (paper table 1 baseline): each turn sends the user's "
                f"instruction and the current image only to {label}.")
    g = wg.Graph(name, specs, title=title, description=desc)
    loader, store = _scenario_start(g)
    editor = g.node(loader_cls)
    left = [loader, store, editor]
    steps = g.node("PrimitiveInt", title="Editor steps", value=edit_settings["steps"])
    left.append(steps)
    if respec:
        vlm = g.node("ReSpecVLMLoader")
        hrs = g.node("PrimitiveBoolean", title="HRS: give the editor the history reference", value=True)
        pti = g.node("PrimitiveBoolean", title="PTI: send the rewritten instruction", value=True)
        skip = g.node("PrimitiveBoolean", title="Skip the VLM on non-restoration turns", value=False)
        left += [vlm, hrs, pti, skip]
    stack(left, 60)
    history, current = store["history"], store["current_image"]
    for t in range(1, TURN_SLOTS + 1):
        turn = g.node("ReSpecScenarioTurn", title=f"Turn {t}", scenario=loader["scenario"], turn=t)
        seed = t   # per-slot seed; `python -m respec bench --server` sets the runner's per-turn seeds
        edit_kw = dict(edit_settings, steps=steps[0])
        if respec:
            plan = g.node("ReSpecPreservationTarget", history=history, instruction=turn["instruction"],
                          vlm=vlm["vlm"], is_restoration=turn["is_restoration"], skip_non_restoration=skip[0])
            select = g.node("ReSpecReferenceSelector", history=history, plan=plan["plan"],
                            use_history_reference=hrs[0])
            rewrite = g.node("ReSpecInstructionRewriter", plan=plan["plan"], use_pti=pti[0])
            edit = g.node(edit_cls, editor=editor["editor"], editor_images=select["editor_images"],
                          current_image=select["current_image"], instruction=rewrite["instruction"],
                          seed=seed, **edit_kw)
            append = g.node("ReSpecHistoryAppend", history=history, image=edit["image"],
                            instruction=turn["instruction"], sent_instruction=rewrite["instruction"],
                            plan=plan["plan"], meta=json.dumps({"seed": seed, "editor": editor_name}),
                            editor_image_ids=select["image_ids"])
            chain = [turn, plan, select, rewrite, edit, append]
        else:
            edit = g.node(edit_cls, editor=editor["editor"], editor_images=current, current_image=current,
                          instruction=turn["instruction"], seed=seed, **edit_kw)
            # Slot t's editor gets the current image I_{t-1} alone: recorded as its image ids.
            append = g.node("ReSpecHistoryAppend", history=history, image=edit["image"],
                            instruction=turn["instruction"],
                            meta=json.dumps({"seed": seed, "editor": editor_name, "editor_image_ids": [t - 1]}))
            chain = [turn, edit, append]
        switch = g.node("ReSpecTurnSwitch", title=f"Turn {t} switch", exists=turn["exists"],
                        history_before=history, history_after=append["history"])
        chain.append(switch)
        stack(chain, 500 + 420 * (t - 1))
        g.group(f"Turn {t}", chain)
        # The next slot starts from this slot's result. Its current image is this slot's
        # edit: a slot only runs when every earlier slot ran (turns are consecutive).
        history, current = switch["history"], append["current_image"]
    _scenario_end(g, loader, history, "respec" if respec else "baseline", editor_name, 500 + 420 * TURN_SLOTS)
    chain_text = ("Preservation Target (VLM) -> Reference Selector + Instruction Rewriter -> " + label + " edit"
                  if respec else label + " edit (user instruction, current image)")
    switches = ("**Ablations (table 2).** HRS / PTI switches on the left; set Results Writer's `config` to "
                "match: both on = `respec`, PTI only = `pti`, HRS only (+ skip on) = `hrs`. The `baseline` "
                "row comes from the baseline workflow.\n\n" if respec else
                "**Baseline (table 1).** No controller: this is the `baseline` config of the tables.\n\n")
    g.note(BENCH_NOTE.format(slots=TURN_SLOTS, chain=chain_text, switches=switches))
    return g


@graph
def benchmark_flux2(specs):
    return _benchmark("benchmark_flux2", "flux2", specs, respec=True)


@graph
def benchmark_omnigen2(specs):
    return _benchmark("benchmark_omnigen2", "omnigen2", specs, respec=True)


@graph
def benchmark_baseline_flux2(specs):
    return _benchmark("benchmark_baseline_flux2", "flux2", specs, respec=False)


@graph
def benchmark_baseline_omnigen2(specs):
    return _benchmark("benchmark_baseline_omnigen2", "omnigen2", specs, respec=False)


def build_all(specs: dict | None = None) -> dict[str, wg.Graph]:
    specs = specs if specs is not None else wg.all_specs()
    return {name: fn(specs) for name, fn in GRAPHS.items()}


def render(g: wg.Graph) -> tuple[str, str]:
    """(UI JSON text, API JSON text) of a graph, exactly as written to disk."""
    return (json.dumps(g.to_ui(), indent=1, ensure_ascii=False) + "\n",
            json.dumps(g.to_api(), indent=1, ensure_ascii=False) + "\n")


def paths(name: str) -> tuple[Path, Path]:
    return WORKFLOWS / f"{name}.json", API_DIR / f"{name}.api.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date files, write nothing")
    ap.add_argument("--refresh-core", metavar="URL", help="re-read core node specs from a running ComfyUI")
    args = ap.parse_args(argv)
    if args.refresh_core:
        refresh_core(args.refresh_core)
        if not args.check:
            return 0
    stale = []
    API_DIR.mkdir(parents=True, exist_ok=True)
    for name, g in build_all().items():
        ui_text, api_text = render(g)
        for path, text in zip(paths(name), (ui_text, api_text)):
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current != text:
                stale.append(path)
                if not args.check:
                    path.write_text(text, encoding="utf-8")
    known = {p for name in GRAPHS for p in paths(name)}
    extra = [p for p in list(WORKFLOWS.glob("*.json")) + list(API_DIR.glob("*.json")) if p not in known]
    for p in stale:
        print(("out of date: " if args.check else "wrote: ") + str(p.relative_to(ROOT)))
    for p in extra:
        print(f"not built by this script: {p.relative_to(ROOT)}")
    if args.check and (stale or extra):
        print("run `python scripts/build_workflows.py` and commit the result")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
