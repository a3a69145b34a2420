"""Build the shipped workflows: workflows/<name>.json (UI format) and workflows/api/<name>.api.json.

Every graph is described once below, in Python; both files are generated from it against the
registered nodes' INPUT_TYPES (and a table of ComfyUI core node specs), so widget order, socket
types and defaults are always those ComfyUI will load. Run after changing a node's inputs:

    python scripts/workflows/build_workflows.py            # write the files
    python scripts/workflows/build_workflows.py --check    # exit 1 if a file is out of date
    python scripts/workflows/build_workflows.py --refresh-core http://127.0.0.1:8188
        # re-read the core node specs from a running ComfyUI (scripts/workflows/comfy_core_nodes.json)

API files live in workflows/api/ because ComfyUI's template browser lists every *.json directly
in workflows/ and loads it as a UI workflow.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:   # a script, not part of the pack: its sibling module
    sys.path.insert(0, str(HERE))

import workflow_graph as wg  # noqa: E402
from blueprint import Blueprint  # noqa: E402

ROOT = wg.ROOT
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"

# ComfyUI core nodes the workflows use; their specs are read from a real ComfyUI.
CORE_NODES = [
    "LoadImage", "SaveImage", "PreviewImage", "CLIPTextEncode", "ConditioningZeroOut",
    "DualCFGGuider", "CFGGuider", "BasicGuider", "FluxGuidance", "SamplerCustomAdvanced",
    "KSamplerSelect", "BasicScheduler", "Flux2Scheduler", "RandomNoise", "VAEDecode", "VAEEncode",
    "UNETLoader", "CLIPLoader", "VAELoader", "EmptySD3LatentImage", "EmptyFlux2LatentImage",
    "ReferenceLatent", "ImageScaleToTotalPixels", "ImageScale", "GetImageSize", "ImageFromBatch", "ImageBatch",
    "PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveStringMultiline", "PrimitiveBoolean",
    "TextGenerate",
    # Qwen-Image-Edit 2511 (the nodes of ComfyUI's own 2511 template) and SAM3
    "TextEncodeQwenImageEditPlus", "ModelSamplingAuraFlow", "CFGNorm", "FluxKontextMultiReferenceLatentMethod",
    "KSampler", "LoraLoaderModelOnly", "CheckpointLoaderSimple", "MaskPreview", "SAM3_Detect",
]
# Core nodes newer than ComfyUI 0.8.0, with the version they were read from: a refresh from an
# older server keeps their entries.
NEWER_CORE_NODES = {"TextGenerate": "0.24.0", "SAM3_Detect": "0.24.0"}
_KEEP = ("input", "input_order", "output", "output_is_list", "output_name", "name", "display_name",
         "category", "output_node", "python_module")


def _strip(entry):
    """An input entry without its tooltip (the table keeps what validation and layout need)."""
    if isinstance(entry, list) and len(entry) > 1 and isinstance(entry[1], dict):
        return [entry[0], {k: v for k, v in entry[1].items() if k != "tooltip"}] + entry[2:]
    return entry


def _server_version(url: str) -> str | None:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/system_stats", timeout=30) as r:
            return json.load(r).get("system", {}).get("comfyui_version")
    except Exception:
        return None


def _table_entry(info: dict, name: str) -> dict:
    """/object_info's entry of one node as the table keeps it (tooltips dropped, loader file lists
    emptied: they depend on the machine, so a value must then be given explicitly)."""
    info = {k: info[k] for k in _KEEP if k in info}
    info["input"] = {sec: {n: _strip(e) for n, e in ents.items()} for sec, ents in info["input"].items()}
    for sec, ents in info["input"].items():
        for n, e in ents.items():
            if name.endswith(("Loader", "LoaderSimple", "LoaderModelOnly")) and isinstance(e, list) \
                    and isinstance(e[0], list) and n.endswith("_name"):
                ents[n] = [[]] + e[1:]
    return info


def refresh_core(url: str) -> None:
    """Rewrite scripts/workflows/comfy_core_nodes.json from a running ComfyUI's /object_info.

    The table's base is the oldest supported ComfyUI (its `comfyui_version`, 0.8.0): a server of that
    version re-reads every node it has; the nodes it lacks (NEWER_CORE_NODES) keep their entries. A
    server of any other version fills only the nodes the table lacks or lists under newer_nodes (and
    records its version there), so the base entries stay what the oldest ComfyUI says: a newer
    ComfyUI may add optional widgets to a node (CFGNorm's pre_cfg in 0.24), which a graph written
    for it would send to 0.8 too."""
    old = json.loads(wg.CORE_TABLE.read_text(encoding="utf-8")) if wg.CORE_TABLE.exists() else {"nodes": {}}
    newer = {**NEWER_CORE_NODES, **(old.get("newer_nodes") or {})}
    version = _server_version(url)
    base = old.get("comfyui_version") or version
    from_base = version == base
    nodes = {}
    for name in CORE_NODES:
        if not from_base and name in old["nodes"] and name not in newer:
            nodes[name] = old["nodes"][name]   # a base entry: only the base version rewrites it
            continue
        with urllib.request.urlopen(f"{url.rstrip('/')}/object_info/{name}", timeout=60) as r:
            info = json.load(r).get(name)
        if info is None and name in newer:
            if name in old["nodes"]:
                nodes[name] = old["nodes"][name]   # a newer node than this server has: keep its entry
            else:
                print(f"{url} (ComfyUI {version}) has no {name}: read it from a ComfyUI >= {newer[name]}")
            continue
        if info is None:
            raise SystemExit(f"{url} has no node {name}: use a ComfyUI >= 0.8")
        if name in newer and version:
            newer[name] = version
        nodes[name] = _table_entry(info, name)
    table = {"comment": "ComfyUI core node specs, from GET /object_info/<name> of a real ComfyUI "
                        "(tooltips dropped, loader file lists emptied). Regenerate with "
                        "`python scripts/workflows/build_workflows.py --refresh-core URL`, from ComfyUI "
                        f"{base} first (the base), then from the newest ComfyUI for the nodes under "
                        f"newer_nodes ({base} lacks them).",
             "comfyui_version": base, "nodes": nodes, "newer_nodes": newer}
    wg.CORE_TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {wg.CORE_TABLE} ({len(nodes)} nodes; base ComfyUI {base}, this server {version})")


# ------------------------------------------------------------------------------ names

# ComfyUI's template browser shows a workflow's file name as its title, on one line of about
# 250 px (frontends 1.35-1.58), so every graph's files are named by this table, keyed by the
# function that builds it (the graph's key: its file name before issue 36, used by the code, the
# tests and the checker). "ReSpec chat": a conversation, one prompt per turn; "ReSpec eval": the
# OCCUR benchmark on ComfyUI's own loaders; "ReSpec paper": the benchmark on the paper's own
# (diffusers) pipelines; "ReSpec mask": an occluder mask on ComfyUI's SAM3. Sorted A-Z (the
# browser's "Alphabetical" order) the conversations come first. A new graph is one builder function
# and one entry here; tests/test_workflows.py checks the rules (TITLE_RULE, a title for every builder
# and no other, the order).
TITLES = {
    "conversational_flux2": "ReSpec chat - FLUX.2 klein 9B",
    "conversational_flux2_klein4b": "ReSpec chat - FLUX.2 klein 4B",
    "conversational_omnigen2": "ReSpec chat - OmniGen2",
    "conversational_textgen_flux2": "ReSpec chat - Klein, TextGenerate",
    "conversational_provenance_flux2": "ReSpec chat - No VLM, provenance",
    "conversational_flux2_diffusers": "ReSpec chat - Klein 9B diffusers",
    "conversational_qwen_image_edit_2511": "ReSpec chat - Qwen Edit 2511",
    "benchmark_native_flux2": "ReSpec eval - FLUX.2 klein 9B",
    "benchmark_native_flux2_klein4b": "ReSpec eval - FLUX.2 klein 4B",
    "benchmark_native_omnigen2": "ReSpec eval - OmniGen2",
    "benchmark_native_baseline_flux2": "ReSpec eval - Klein 9B baseline",
    "benchmark_native_baseline_omnigen2": "ReSpec eval - OmniGen2 baseline",
    "benchmark_native_qwen_image_edit_2511": "ReSpec eval - Qwen Edit 2511",
    "benchmark_flux2": "ReSpec paper - Klein 9B",
    "benchmark_omnigen2": "ReSpec paper - OmniGen2",
    "benchmark_baseline_flux2": "ReSpec paper - Klein 9B baseline",
    "benchmark_baseline_omnigen2": "ReSpec paper - OmniGen2 baseline",
    "occluder_mask_sam3": "ReSpec mask - SAM3 occluder",
}
# A file name every OS and URL takes as it is (the frontend puts it in a URL path unescaped):
# ASCII letters, digits, spaces and . , - ( ); no leading or trailing space.
TITLE_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 .,()-]{0,40}[A-Za-z0-9)]")
INDEX = "index.json"   # workflows/api/index.json: key -> files, for the core (respec/bench/workflow.py)


def title_of(key: str) -> str:
    """The title (= file name) of the graph built by `key`; a clear error when it has none."""
    if key not in TITLES:
        raise KeyError(f"graph {key!r} has no title: add it to TITLES in scripts/workflows/build_workflows.py")
    return TITLES[key]


def graph_order(keys) -> list[str]:
    """Keys in the order the template browser's A-Z sort shows their titles."""
    return sorted(keys, key=lambda k: title_of(k).casefold())


# ------------------------------------------------------------------------------ the graphs

GRAPHS = {}


def graph(fn):
    GRAPHS[fn.__name__] = fn
    return fn


# Model files the native workflows select: the names ComfyUI's own FLUX.2 [klein] / OmniGen2
# templates use, with the public download each UI file lists in its loaders' properties.models
# (ComfyUI's missing-models dialog offers them). klein base 9B is Black Forest Labs' own gated
# repository (FLUX Non-Commercial License): no direct URL.
HF = "https://huggingface.co/"
KLEIN_TE_REPO = HF + "Comfy-Org/vae-text-encorder-for-flux-klein-9b/resolve/main/split_files/"
OMNIGEN2_REPO = HF + "Comfy-Org/Omnigen2_ComfyUI_repackaged/resolve/main/split_files/"
NATIVE_FILES = {
    "flux2": {"unet": ("flux-2-klein-base-9b-fp8.safetensors", "diffusion_models", None),
              "clip": ("qwen_3_8b_fp8mixed.safetensors", "text_encoders",
                       KLEIN_TE_REPO + "text_encoders/qwen_3_8b_fp8mixed.safetensors"),
              "vae": ("flux2-vae.safetensors", "vae", KLEIN_TE_REPO + "vae/flux2-vae.safetensors")},
    "omnigen2": {"unet": ("omnigen2_fp16.safetensors", "diffusion_models",
                          OMNIGEN2_REPO + "diffusion_models/omnigen2_fp16.safetensors"),
                 "clip": ("qwen_2.5_vl_fp16.safetensors", "text_encoders",
                          OMNIGEN2_REPO + "text_encoders/qwen_2.5_vl_fp16.safetensors"),
                 "vae": ("ae.safetensors", "vae",
                         HF + "Comfy-Org/Lumina_Image_2.0_Repackaged/resolve/main/split_files/vae/ae.safetensors")},
}
# klein 4B (Apache-2.0): the files of ComfyUI's own "FLUX.2 [klein] 4B base" edit template
# (comfyui-workflow-templates: image_flux2_klein_image_edit_4b_base), public downloads.
NATIVE_FILES["flux2-klein4b"] = {
    "unet": ("flux-2-klein-base-4b-fp8.safetensors", "diffusion_models",
             HF + "black-forest-labs/FLUX.2-klein-base-4b-fp8/resolve/main/flux-2-klein-base-4b-fp8.safetensors"),
    "clip": ("qwen_3_4b.safetensors", "text_encoders",
             HF + "Comfy-Org/z_image_turbo/resolve/main/split_files/text_encoders/qwen_3_4b.safetensors"),
    "vae": ("full_encoder_small_decoder.safetensors", "vae",
            HF + "black-forest-labs/FLUX.2-small-decoder/resolve/main/full_encoder_small_decoder.safetensors")}
# Qwen-Image-Edit 2511 (Apache-2.0): the files and settings of ComfyUI's own "Qwen-Image-Edit 2511" template
# (comfyui-workflow-templates: image_qwen_image_edit_2511): the fp8-mixed diffusion model (its bf16 file,
# qwen_image_edit_2511_bf16.safetensors, 38 GB, works the same), Qwen2.5-VL 7B fp8 text encoder, the
# Qwen-Image VAE; ModelSamplingAuraFlow shift 3.1, CFGNorm 1.0, reference method index_timestep_zero,
# KSampler euler / simple, 40 steps at CFG 4.0 (its note: ComfyUI's own choice is 20 steps), or the
# Lightning LoRA at 4 steps, CFG 1.0.
QWEN = "qwen-image-edit-2511"
NATIVE_FILES[QWEN] = {
    "unet": ("qwen_image_edit_2511_fp8mixed.safetensors", "diffusion_models",
             HF + "Comfy-Org/Qwen-Image-Edit_ComfyUI/resolve/main/split_files/diffusion_models/"
                  "qwen_image_edit_2511_fp8mixed.safetensors"),
    "clip": ("qwen_2.5_vl_7b_fp8_scaled.safetensors", "text_encoders",
             HF + "Comfy-Org/HunyuanVideo_1.5_repackaged/resolve/main/split_files/text_encoders/"
                  "qwen_2.5_vl_7b_fp8_scaled.safetensors"),
    "vae": ("qwen_image_vae.safetensors", "vae",
            HF + "Comfy-Org/Qwen-Image_ComfyUI/resolve/main/split_files/vae/qwen_image_vae.safetensors")}
QWEN_LORA = ("Qwen-Image-Edit-2511-Lightning-4steps-V1.0-bf16.safetensors", "loras",
             HF + "lightx2v/Qwen-Image-Edit-2511-Lightning/resolve/main/Qwen-Image-Edit-2511-Lightning-4steps-V1.0-bf16.safetensors")
QWEN_SETTINGS = {"steps": 40, "cfg": 4.0, "shift": 3.1, "cfg_norm": 1.0, "reference_method": "index_timestep_zero",
                 "sampler": "euler", "scheduler": "simple", "lightning_steps": 4, "lightning_cfg": 1.0}
# SAM3 (ComfyUI 0.24+): the checkpoint of ComfyUI's own SAM3 segmentation template (utility_image_segment_sam3).
SAM3_FILE = ("sam3.1_multiplex_fp16.safetensors", "checkpoints",
             HF + "Comfy-Org/sam3.1/resolve/main/checkpoints/sam3.1_multiplex_fp16.safetensors")
CLIP_TYPES = {"flux2": "flux2", "flux2-klein4b": "flux2", "omnigen2": "omnigen2", QWEN: "qwen_image"}
NATIVE_NEGATIVE = {"flux2": "", "flux2-klein4b": "", "omnigen2": "blurry, low quality, distorted, deformed, watermark"}
# CFGGuider scale of the FLUX.2 graphs: the paper's 4.0 for klein base 9B; ComfyUI's 4B base
# template's 5.0 for klein 4B.
NATIVE_CFG = {"flux2": 4.0, "flux2-klein4b": 5.0}
LABELS = {"flux2": "FLUX.2 [klein]", "flux2-klein4b": "FLUX.2 [klein] 4B", "omnigen2": "OmniGen2",
          QWEN: "Qwen-Image-Edit 2511"}
FIRST_REQUEST = "add a large bouquet of sunflowers in front of the person"
SESSION_NOTE = """\
**One prompt per turn.** Type your request in the **ReSpec** sidebar tab's composer and press
Enter (or type it in *Your request* and queue). The session (`session_id`) is kept on disk
between prompts: every queue adds one turn, starting from the image in *Load Image* the first
time. Queueing the same request again does not add it twice. To undo, press *Undo to here* on a
turn card in the panel (or set History Store's mode to `rewind`, which rewinds and runs nothing
else). Start another conversation with another `session_id`, or *Branch from here*. A request
that takes back what an earlier turn added ("remove the hat") is answered from the history,
exactly, and the editor does not run (the Drift Guard's `history_first`; off: it always runs).

The controller (Qwen3-VL by default, or an OpenAI-compatible server) reads the history and,
on a turn that uncovers something an earlier edit hid, picks the past image that still shows
it and rewrites the request (paper §4). Weights: see docs/workflows.md."""


# Layout of the conversational graphs (issues 36, 45): columns left to right that follow the turn,
# compact enough that the whole graph opens readable on a 1366 x 768 screen (the template browser of
# frontends >= 1.45 fits every node in the view: tests/test_workflows.py checks the zoom that gives,
# in the classic renderer and in Nodes 2.0). What a user sets stays open: the picture, the request,
# the session, the model files, Steps, the pictures shown. The steps that run by themselves are
# collapsed to their title bars (a click opens one), and so is the long note on models and options.
CHAT_GAP = 30
CHAT_HEIGHT = 900        # the tallest column, title bars and Nodes 2.0's taller nodes included
README_SIZE = (300, 300)
MODELS_SIZE = (280, 440)
USER_SETS = {"LoadImage", "PrimitiveStringMultiline", "PrimitiveInt", "PrimitiveFloat", "ReSpecHistoryStore",
             "UNETLoader", "CLIPLoader", "VAELoader", "CheckpointLoaderSimple", "ReSpecVLMLoader",
             "ReSpecFlux2Loader", "ReSpecOmniGen2Loader", "ReSpecFlux2Edit", "PreviewImage", "SaveImage"}


def _collapse_what_runs(g: wg.Graph) -> None:
    """Collapse every node of a conversation a user does not set (USER_SETS); options stay as they are."""
    for n in g.nodes:
        if n.class_type not in USER_SETS:
            n.collapsed = True


def _cost(item, room: bool = True) -> int:
    """The height an item of g.columns takes in its column (a number is space; a list is a block);
    without `room`, less the room kept below it (a column's last item may reach past CHAT_HEIGHT with
    its room: a picture grows into it later, and Nodes 2.0 draws below it)."""
    if isinstance(item, list):
        return sum(_cost(i) for i in item[:-1]) + _cost(item[-1], room) if item else 0
    return wg.Graph.column_height(item, room=room)


def _flow(*runs: list) -> list[list]:
    """Columns for g.columns from `runs` of items in the turn's order: each run starts a new column
    and fills columns of at most CHAT_HEIGHT; a list inside a run (an option's group) is kept whole;
    None is left out."""
    columns: list[list] = []
    for run in runs:
        column, height = [], 0
        for item in (i for i in run if i is not None):
            if column and height + _cost(item, room=False) > CHAT_HEIGHT:
                columns.append(column)
                column, height = [], 0
            column += item if isinstance(item, list) else [item]
            height += _cost(item)
        if column:
            columns.append(column)
    return columns


def _session_controller(g: wg.Graph, request_default: str) -> SimpleNamespace:
    """Load Image -> History Store (persistent session) + the user's request + the ReSpec
    controller chain (Preservation Target -> Reference Selector, Instruction Rewriter); the nodes
    by name."""
    c = SimpleNamespace()
    c.image = g.node("LoadImage", image="example.png")
    c.store = g.node("ReSpecHistoryStore", mode="new", session_id="my-session", image=c.image["IMAGE"])
    c.request = g.node("PrimitiveStringMultiline", title="Your request", value=request_default)
    c.vlm = g.node("ReSpecVLMLoader")
    c.plan = g.node("ReSpecPreservationTarget", history=c.store["history"], instruction=c.request[0],
                    vlm=c.vlm["vlm"])
    c.select = g.node("ReSpecReferenceSelector", history=c.store["history"], plan=c.plan["plan"])
    c.rewrite = g.node("ReSpecInstructionRewriter", plan=c.plan["plan"])
    c.preview = g.node("PreviewImage", title="References given to the editor", images=c.select["editor_images"])
    return c


def _guard(g, previous, image, instruction, history, plan, **optional):
    """Drift Guard after the editor (on by default: its `enabled` widget says so), with history first on
    (issue 43): a request that takes back what an earlier turn added is answered from `history`, and
    the editor's image (its lazy `edited` input, and `mask` and `reveal`, made from it) is then not
    asked for, so ComfyUI runs none of the editor's branch. `optional`: its optional inputs the graph
    feeds: `reveal` (Reveal Composite's record), `mask` (the edit region option's MASK,
    `_edit_region_option`). No output node may hang on the editor's branch (tests/test_workflows.py)."""
    return g.node("ReSpecDriftGuard", previous=previous, edited=image, enabled=True, instruction=instruction,
                  plan=plan, history=history, history_first=True, **optional)


def _models(name: str, directory: str, url: str) -> dict:
    """A loader's properties.models entry (ComfyUI's missing-models dialog)."""
    return {"models": [{"name": name, "directory": directory, "url": url}]}


# An option a user switches on (select it, Ctrl+B): bypassed, and collapsed to its title bar so the
# conversation still opens whole and readable (tests/test_workflows.py).
OPTION = {"bypassed": True, "collapsed": True}
EDIT_REGION_GROUP = "Option: edit region (Ctrl+B)"   # fits its box at 20 px: the box sits among other nodes
EDIT_REGION_NOTE = """\
**Option: the edit region from your words** (ComfyUI 0.24+, beyond the paper). The group *%s* is
bypassed. Switched on (select the group, Ctrl+B), *Edit Region from Text* reads the object your
request changes ("add a red hat on the dog" -> "red hat"; a global request names none), ComfyUI's
**SAM3** segments it in the previous image and in the edit (`%s` in models/checkpoints), and
*Edit Region Mask* keeps the turn's change only inside that object, grown by a margin: the Drift
Guard then puts the previous image's own pixels back everywhere else, so details the editor re-drew
elsewhere (a face, fur, a texture) come back as they were. Nothing found, or nothing changed there:
the guard decides from its own change mask, as with the group off.""" % (EDIT_REGION_GROUP.split(" (")[0], SAM3_FILE[0])


def _edit_region_option(g: wg.Graph, previous, edited, request, plan=None):
    """The bypassed edit-region group (Edit Region from Text -> SAM3 on [I_(t-1), I_t] -> Edit Region
    Mask); returns (the MASK output for the Drift Guard, the group's nodes, for `_option_group`).
    Bypassed, the guard's mask input is simply not connected (the frontend's bypass rule finds no
    MASK input upstream)."""
    extra = {"plan": plan} if plan is not None else {}
    phrase = g.node("ReSpecEditRegionFromText", instruction=request[0], **OPTION, **extra)
    sam3 = g.node("CheckpointLoaderSimple", title="SAM3", ckpt_name=SAM3_FILE[0], properties=_models(*SAM3_FILE),
                  **OPTION)
    text = g.node("CLIPTextEncode", title="Object to segment", text=phrase["phrase"], clip=sam3["CLIP"], **OPTION)
    both = g.node("ImageBatch", title="Previous image + edit", image1=previous, image2=edited, **OPTION)
    found = g.node("SAM3_Detect", model=sam3["MODEL"], image=both[0], conditioning=text[0], threshold=0.5,
                   refine_iterations=2, individual_masks=False, **OPTION)
    region = g.node("ReSpecEditRegionMask", previous=previous, edited=edited, phrase=phrase["phrase"],
                    object_masks=found["masks"], **OPTION)
    return region["mask"], [phrase, sam3, text, both, found, region]


def _append_and_save(g, c: SimpleNamespace, image, editor_name: str, reveal=None, mask=None) -> None:
    """Drift Guard (with Reveal Composite's record when `reveal` ran before, and the edit region
    option's `mask`) -> History Append (with that record too) -> Save Image after the edit (c.guard,
    c.append, c.save)."""
    record = {"reveal": reveal["reveal"]} if reveal is not None else {}
    region = {"mask": mask} if mask is not None else {}
    c.guard = _guard(g, c.select["current_image"], image, c.request[0], c.store["history"], c.plan["plan"], **record,
                     **region)
    c.append = g.node("ReSpecHistoryAppend", history=c.store["history"], image=c.guard["image"],
                      instruction=c.request[0], sent_instruction=c.rewrite["instruction"], plan=c.plan["plan"],
                      meta=json.dumps({"editor": editor_name}), editor_image_ids=c.select["image_ids"],
                      guard=c.guard["guard"], **record)
    c.save = g.node("SaveImage", images=c.append["current_image"], filename_prefix="respec/turn")


DIFFUSERS_NOTE = ("**Paper-exact diffusers route.** This graph runs the pack's own FLUX.2 [klein] / OmniGen2 "
                 "pipelines (diffusers folders or single files, including ComfyUI's fp8 files): the setting of "
                 "the paper's tables. The native graphs (*{native}*) run the same ReSpec steps on ComfyUI's own "
                 "loaders and sampler, which most users' files and cards suit better.")


@graph
def conversational_flux2_diffusers(specs):
    g = wg.Graph("conversational_flux2_diffusers", specs,
                 summary="ReSpec conversational editing (FLUX.2 [klein], paper-exact diffusers)",
                 description="One prompt per turn on a persistent session: history -> controller -> "
                             "references + rewritten request -> the pack's diffusers FLUX.2 [klein] edit -> "
                             "append -> save.")
    c = _session_controller(g, FIRST_REQUEST)
    editor = g.node("ReSpecFlux2Loader")
    edit = g.node("ReSpecFlux2Edit", editor=editor["editor"], editor_images=c.select["editor_images"],
                  current_image=c.select["current_image"], instruction=c.rewrite["instruction"],
                  seed=42, steps=30, guidance=4.0)
    _append_and_save(g, c, edit["image"], "flux2-klein")
    readme = g.note(SESSION_NOTE, size=README_SIZE)
    route = g.note(DIFFUSERS_NOTE.format(native=title_of("conversational_flux2")), title="Models",
                   size=MODELS_SIZE, collapsed=True)
    _collapse_what_runs(g)
    g.columns(_flow([readme, c.image], [c.request, c.store], [c.vlm, c.plan, c.select, c.rewrite, c.preview],
                    [editor, edit], [c.guard, c.append, route, c.save]), gap_x=CHAT_GAP)
    return g


PROVENANCE_NOTE = """\
**No VLM: pixel provenance** (beyond the paper, docs/provenance.md). One prompt per turn on a
persistent session, as in the other conversational graphs, but no controller model: every turn
keeps the pixels it changed (History Append), and on a turn that uncovers something an earlier
edit hid, *Reference Selector, provenance* finds that earlier turn k from your request and those
pixels, gives the editor I_{k-1} (the latest image before it) with the current image, and adds
"revealing what was there in the first image exactly as it was" to your request. *Reveal
Composite* then pastes I_{k-1}'s own pixels into the uncovered area when the scene around it did
not move (its `report` says what it did and why; switch it off with `enabled`). The panel shows
each turn's changed pixels and what was pasted ("show changes" on a turn card)."""


@graph
def conversational_provenance_flux2(specs):
    g = wg.Graph("conversational_provenance_flux2", specs,
                 summary="ReSpec conversational editing without a VLM (pixel provenance, FLUX.2 [klein])",
                 description="One prompt per turn on a persistent session: history -> provenance reference selector "
                             "(no VLM) -> FLUX.2 [klein] edit -> Reveal Composite -> append -> save.")
    image = g.node("LoadImage", image="example.png")
    store = g.node("ReSpecHistoryStore", mode="new", session_id="my-provenance-session", image=image["IMAGE"])
    request = g.node("PrimitiveStringMultiline", title="Your request", value=FIRST_REQUEST)
    select = g.node("ReSpecProvenanceSelector", history=store["history"], instruction=request[0])
    preview = g.node("PreviewImage", title="References given to the editor", images=select["editor_images"])
    editor = g.node("ReSpecFlux2Loader")
    edit = g.node("ReSpecFlux2Edit", editor=editor["editor"], editor_images=select["editor_images"],
                  current_image=select["current_image"], instruction=select["instruction"],
                  seed=42, steps=30, guidance=4.0)
    reveal = g.node("ReSpecRevealComposite", history=store["history"], image=edit["image"], instruction=request[0],
                    plan=select["plan"])
    region, option = _edit_region_option(g, select["current_image"], reveal["image"], request, select["plan"])
    guard = _guard(g, select["current_image"], reveal["image"], request[0], store["history"], select["plan"],
                   reveal=reveal["reveal"], mask=region)
    append = g.node("ReSpecHistoryAppend", history=store["history"], image=guard["image"], instruction=request[0],
                    sent_instruction=select["instruction"], plan=select["plan"],
                    meta=json.dumps({"editor": "flux2-klein", "selector": "provenance"}),
                    editor_image_ids=select["image_ids"], reveal=reveal["reveal"], guard=guard["guard"])
    save = g.node("SaveImage", images=append["current_image"], filename_prefix="respec/turn")
    readme = g.note(PROVENANCE_NOTE, title="Read me", size=README_SIZE)
    note = g.note(DIFFUSERS_NOTE.format(native=title_of("conversational_flux2")) + "\n\n" + EDIT_REGION_NOTE,
                  title="Models and options", size=MODELS_SIZE, collapsed=True)
    _collapse_what_runs(g)
    # The option's group has a column of its own: no link runs across the bypassed group.
    g.columns(_flow([readme, image], [request, store, editor], [select, preview, edit],
                    [reveal, guard, append, note, save], [_option_group(g, option)]), gap_x=CHAT_GAP)
    return g


def native_loaders(g: wg.Graph, editor: str):
    """UNETLoader / CLIPLoader / VAELoader with the template file names, each listing its file in
    properties.models (name, directory, public URL) for ComfyUI's missing-models dialog. A file
    with no public download (klein 9B is gated) is not listed: the frontend's workflow schema
    requires a url there, and 1.35 shows "Invalid workflow against zod schema" for an entry without."""
    out = []
    for kind, cls, widget in (("unet", "UNETLoader", "unet_name"), ("clip", "CLIPLoader", "clip_name"),
                              ("vae", "VAELoader", "vae_name")):
        name, directory, url = NATIVE_FILES[editor][kind]
        props = {"models": [{"name": name, "directory": directory, "url": url}]} if url else {}
        extra = {"type": CLIP_TYPES[editor]} if kind == "clip" else {}
        out.append(g.node(cls, properties=props, **{widget: name}, **extra))
    return out


class NativeParts:
    """The nodes a native edit shares across turn slots: loaders, the negative text, the sampler
    (and OmniGen2's scheduler, which depends only on the model and the steps). Qwen-Image-Edit:
    the model through the template's ModelSamplingAuraFlow and CFGNorm, the Lightning LoRA (bypassed:
    the option) and a CFG value; its negative reads the images, so each turn encodes its own."""

    def __init__(self, g: wg.Graph, editor: str, steps):
        self.editor = editor
        self.unet, self.clip, self.vae = native_loaders(g, editor)
        self.model, self.extra, self.cfg = self.unet[0], [], None
        self.negative = self.sampler = self.scheduler = None
        if editor == QWEN:
            shift = g.node("ModelSamplingAuraFlow", model=self.unet[0], shift=QWEN_SETTINGS["shift"])
            norm = g.node("CFGNorm", model=shift[0], strength=QWEN_SETTINGS["cfg_norm"])
            lora = g.node("LoraLoaderModelOnly", title="Lightning LoRA (4 steps, CFG 1)",
                          model=norm[0], lora_name=QWEN_LORA[0], strength_model=1.0, properties=_models(*QWEN_LORA),
                          **OPTION)
            self.cfg = g.node("PrimitiveFloat", title="CFG", value=QWEN_SETTINGS["cfg"])
            self.model, self.extra = lora[0], [shift, norm, lora, self.cfg]
        else:
            self.negative = g.node("CLIPTextEncode", title="Negative", text=NATIVE_NEGATIVE[editor], clip=self.clip[0])
            self.sampler = g.node("KSamplerSelect", sampler_name="euler")
        if editor == "omnigen2":
            self.scheduler = g.node("BasicScheduler", model=self.unet[0], scheduler="simple", steps=steps, denoise=1.0)
        self.steps = steps

    def nodes(self) -> list:
        return [n for n in (self.unet, self.clip, self.vae, *self.extra, self.negative, self.sampler, self.scheduler)
                if n]


def qwen_edit(g: wg.Graph, parts: NativeParts, images, current, instruction, seed: int, slots=None) -> list:
    """Qwen-Image-Edit 2511 on ComfyUI's own nodes, as its template wires them: the editor images as
    image1..image3 of TextEncodeQwenImageEditPlus (positive: the instruction; negative: empty), their
    reference latents (Reference Latents (ReSpec), 1 megapixel as the template) with the 2511 method
    index_timestep_zero, KSampler (euler / simple, Steps, CFG) on an empty latent of the current
    image's size -> VAEDecode -> back to the current size. `slots`: an Editor Images as image1..3
    node the graph already has (else one is made, first of the new nodes). Returns the new nodes;
    the last one's IMAGE is the edit."""
    made = [] if slots is not None else [g.node("ReSpecEditorImageSlots", editor_images=images)]
    slots = slots if slots is not None else made[0]
    encoded = []
    for title, text in (("Instruction", instruction), ("Negative", "")):
        enc = g.node("TextEncodeQwenImageEditPlus", title=title, clip=parts.clip[0], prompt=text,
                     image1=slots["image1"], image2=slots["image2"], image3=slots["image3"])
        ref = g.node("ReSpecReferenceConditioning", conditioning=enc[0], vae=parts.vae[0], editor_images=images)
        method = g.node("FluxKontextMultiReferenceLatentMethod", conditioning=ref[0],
                        reference_latents_method=QWEN_SETTINGS["reference_method"])
        encoded.append((enc, ref, method))
    size = g.node("GetImageSize", image=current)
    latent = g.node("EmptySD3LatentImage", width=size["width"], height=size["height"], batch_size=1)
    sample = g.node("KSampler", model=parts.model, seed=seed, steps=parts.steps, cfg=parts.cfg[0],
                    sampler_name=QWEN_SETTINGS["sampler"], scheduler=QWEN_SETTINGS["scheduler"],
                    positive=encoded[0][2][0], negative=encoded[1][2][0], latent_image=latent[0], denoise=1.0)
    decoded = g.node("VAEDecode", samples=sample[0], vae=parts.vae[0])
    resized = g.node("ImageScale", title="Edited image (current size)", image=decoded[0], upscale_method="lanczos",
                     width=size["width"], height=size["height"], crop="disabled")
    return [*made, *(n for trio in encoded for n in trio), size, latent, sample, decoded, resized]


def native_edit(g: wg.Graph, parts: NativeParts, images, current, instruction, seed: int) -> list:
    """ComfyUI-native edit of `current` with `images` as reference latents: text encode -> Reference
    Latents (ReSpec) on positive and negative -> guider (FLUX.2: CFGGuider 4.0; OmniGen2:
    DualCFGGuider text 5.0 / image 2.0) -> SamplerCustomAdvanced -> VAEDecode -> back to the
    current image's size (Qwen-Image-Edit: `qwen_edit`). Returns the new nodes; the last one's
    IMAGE is the edit."""
    if parts.editor == QWEN:
        return qwen_edit(g, parts, images, current, instruction, seed)
    positive = g.node("CLIPTextEncode", title="Instruction", text=instruction, clip=parts.clip[0])
    pos = g.node("ReSpecReferenceConditioning", conditioning=positive[0], vae=parts.vae[0], editor_images=images)
    neg = g.node("ReSpecReferenceConditioning", conditioning=parts.negative[0], vae=parts.vae[0], editor_images=images)
    size = g.node("GetImageSize", image=current)
    if parts.editor in NATIVE_CFG:
        guider = g.node("CFGGuider", model=parts.unet[0], positive=pos[0], negative=neg[0],
                        cfg=NATIVE_CFG[parts.editor])
        sigmas = g.node("Flux2Scheduler", steps=parts.steps, width=size["width"], height=size["height"])
        latent = g.node("EmptyFlux2LatentImage", width=size["width"], height=size["height"], batch_size=1)
        new = [sigmas]
    else:
        # cond1: instruction + references, cond2: negative + references (image guidance),
        # negative: the plain negative. Paper: text guidance 5.0, image guidance 2.0.
        guider = g.node("DualCFGGuider", model=parts.unet[0], cond1=pos[0], cond2=neg[0], negative=parts.negative[0],
                        cfg_conds=5.0, cfg_cond2_negative=2.0, style="regular")
        sigmas = parts.scheduler
        latent = g.node("EmptySD3LatentImage", width=size["width"], height=size["height"], batch_size=1)
        new = []
    noise = g.node("RandomNoise", noise_seed=seed)
    sample = g.node("SamplerCustomAdvanced", noise=noise[0], guider=guider[0], sampler=parts.sampler[0],
                    sigmas=sigmas[0], latent_image=latent[0])
    decoded = g.node("VAEDecode", samples=sample["output"], vae=parts.vae[0])
    # The latent grid rounds the size down to a multiple of 16; the history keeps the current size.
    resized = g.node("ImageScale", title="Edited image (current size)", image=decoded[0], upscale_method="lanczos",
                     width=size["width"], height=size["height"], crop="disabled")
    return [positive, pos, neg, size, guider, *new, latent, noise, sample, decoded, resized]


NATIVE_NOTE = {
    "flux2": ("**Native models.** ComfyUI's own loaders read the files of its FLUX.2 [klein] template "
              "(`flux-2-klein-base-9b-fp8.safetensors` in models/diffusion_models, `qwen_3_8b_fp8mixed.safetensors` "
              "in models/text_encoders, `flux2-vae.safetensors` in models/vae; the bf16 "
              "`flux-2-klein-base-9b.safetensors` works the same); pick yours in the three loaders. klein base runs "
              "real CFG: CFGGuider 4.0, 30 steps (the paper's setting). Needs a ComfyUI that loads the klein text "
              "encoder (CLIPLoader type flux2 with Qwen3-8B; ComfyUI 0.8.0 does not)."),
    "flux2-klein4b": ("**Native models: FLUX.2 [klein] 4B** (Apache-2.0, runs on 12-16 GB cards; klein 9B is "
                      "non-commercial). ComfyUI's own loaders read the files of its klein 4B base edit template "
                      "(`flux-2-klein-base-4b-fp8.safetensors` in models/diffusion_models, `qwen_3_4b.safetensors` "
                      "in models/text_encoders, `full_encoder_small_decoder.safetensors` in models/vae; "
                      "`flux2-vae.safetensors` works the same) with that template's settings: CFGGuider 5.0, 20 "
                      "steps. The distilled 4B (`flux-2-klein-4b-fp8.safetensors`) takes 4 steps at CFG 1.0 (set "
                      "*Steps* and the guiders' cfg). Needs ComfyUI 0.24 or later: ComfyUI 0.8.0 reads a Qwen3-4B "
                      "file as Z-Image's text encoder, so it validates this graph but cannot run klein 4B."),
    "omnigen2": ("**Native models.** ComfyUI's own loaders read the files of its OmniGen2 template "
                 "(`omnigen2_fp16.safetensors`, `qwen_2.5_vl_fp16.safetensors`, the FLUX.1 `ae.safetensors`) from "
                 "models/diffusion_models, models/text_encoders and models/vae. DualCFGGuider: text guidance 5.0, "
                 "image guidance 2.0, 50 steps (the paper's setting)."),
}


NATIVE_NOTE[QWEN] = (
    "**Native models: Qwen-Image-Edit 2511** (Apache-2.0). ComfyUI's own loaders read the files of its "
    "Qwen-Image-Edit 2511 template: `%s` in models/diffusion_models (the bf16 `qwen_image_edit_2511_bf16.safetensors`, "
    "38 GB, works the same), `%s` in models/text_encoders (CLIPLoader type qwen_image), `%s` in models/vae; with that "
    "template's settings: ModelSamplingAuraFlow shift %.1f, CFGNorm %.1f, reference method %s, KSampler %s / %s, "
    "*Steps* %d at *CFG* %.1f (the template's note: ComfyUI's own choice is 20 steps). The editor images go in as "
    "image1, image2 of TextEncodeQwenImageEditPlus in the plan's order (restoration source, identity anchor; the "
    "current image alone on other turns), so \"the first image\" of the rewritten instruction is Picture 1. "
    "**Lightning** (4 steps): switch on the bypassed *Lightning LoRA* node (Ctrl+B; `%s` in models/loras) and set "
    "*Steps* %d, *CFG* %.1f." % (
        NATIVE_FILES[QWEN]["unet"][0], NATIVE_FILES[QWEN]["clip"][0], NATIVE_FILES[QWEN]["vae"][0],
        QWEN_SETTINGS["shift"], QWEN_SETTINGS["cfg_norm"], QWEN_SETTINGS["reference_method"], QWEN_SETTINGS["sampler"],
        QWEN_SETTINGS["scheduler"], QWEN_SETTINGS["steps"], QWEN_SETTINGS["cfg"], QWEN_LORA[0],
        QWEN_SETTINGS["lightning_steps"], QWEN_SETTINGS["lightning_cfg"]))
POST_EDIT_NOTE = ("**Reveal Composite and Drift Guard are on.** On a turn that uncovers what an earlier edit hid, "
                  "Reveal Composite pastes that turn's own pixels back where the scene held; the Drift Guard then "
                  "keeps the editor's pixels only where the edit changed the picture and undoes the zoom and shift "
                  "Qwen-Image-Edit adds on a call. Switch either off with its `enabled` widget.")


def _native_runs(c: SimpleNamespace, parts: "NativeParts", edit: list, controller: list, models) -> list[list]:
    """The runs (_flow) of a native conversation from the controller on: `controller` (its nodes up to
    the plan) with the selector, rewriter and preview, then the loaders and the editor's steps ->
    Drift Guard -> History Append -> the `models` note -> Save Image."""
    positive, pos, neg, size, guider, *schedule, latent, noise, sample, decoded, resized = edit
    loaders = [parts.unet, parts.clip, parts.vae, parts.negative, parts.sampler]
    loaders += [parts.scheduler] if parts.scheduler else []
    return [[*controller, c.select, c.rewrite, c.preview],
            loaders + [positive, size, pos, neg, guider, *schedule, latent, noise, sample, decoded, resized,
                       c.guard, c.append, models, c.save]]


def _conversation_native(name: str, editor: str, specs) -> wg.Graph:
    label = LABELS[editor]
    g = wg.Graph(name, specs, summary=f"ReSpec conversational editing ({label}, ComfyUI's own models)",
                 description=f"One prompt per turn on a persistent session: history -> controller -> references + "
                             f"rewritten request -> ComfyUI-native {label} sampling with the references as reference "
                             f"latents -> append -> save.")
    c = _session_controller(g, FIRST_REQUEST)
    steps = g.node("PrimitiveInt", title="Steps", value=EDITORS[editor][2]["steps"])
    parts = NativeParts(g, editor, steps[0])
    edit = native_edit(g, parts, c.select["editor_images"], c.select["current_image"], c.rewrite["instruction"], 42)
    _append_and_save(g, c, edit[-1][0], f"{editor}-native")
    readme = g.note(SESSION_NOTE, title="Read me", size=README_SIZE)
    models = g.note(NATIVE_NOTE[editor], title="Models", size=MODELS_SIZE, collapsed=True)
    _collapse_what_runs(g)
    g.columns(_flow([readme, c.image], [c.request, c.store, steps],
                    *_native_runs(c, parts, edit, [c.vlm, c.plan], models)), gap_x=CHAT_GAP)
    return g


def _option_group(g: wg.Graph, option: list, *notes, title: str = EDIT_REGION_GROUP) -> list:
    """An option's nodes (and `notes`) in a titled group (default: the edit-region option): a
    column's worth of items for `g.columns`, with room for the group's box above and below."""
    g.group(title, [*option, *notes], font_size=20)
    return [30, *option, *notes, 20]


@graph
def conversational_flux2(specs):
    return _conversation_native("conversational_flux2", "flux2", specs)


@graph
def conversational_omnigen2(specs):
    return _conversation_native("conversational_omnigen2", "omnigen2", specs)


# ------------------------------------------------------------------------------ any editor (issue 44)

# The editor as one block: a group whose only sockets are those of ComfyUI's "Image Edit (...)"
# blueprints (0.24+): the instruction text, the current image and the references in, IMAGE out.
# Deleting the group and dropping in any blueprint or editor node, wired to the same sockets, keeps
# the conversation working (docs/any-editor.md; scripts/workflows/editor_block.py swaps it in code).
EDITOR_GROUP = "Editor: %s (swap in any Image Edit block)"
VLM_GROUP = "Option: VLM controller (Ctrl+B)"
VLM_OPTION_NOTE = """\
**Option: the VLM controller** (the paper's ReSpec). The group *%s* is bypassed: turns are
planned from the history's own pixels, with no model (*Reference Selector, provenance*). Switched
on (select the group, Ctrl+B) and with a VLM in *VLM Loader*, the VLM reads the history and writes
the instruction (Preservation Target, one call per restoration turn), and provenance still picks
the images.""" % VLM_GROUP.split(" (")[0]
ANY_EDITOR_NOTE = """\
**The best conversation on ComfyUI's own files.** One prompt per turn on a persistent session;
no VLM by default. *Reference Selector, provenance* finds the earlier turn that hid what your
request reveals and gives the editor that turn's image with the current one. After the edit,
*Reveal Composite* pastes the hidden pixels back exactly, and the *Drift Guard* keeps the
previous image wherever the edit did not change it. A request that takes back what an earlier
turn added ("remove the hat") is answered from the history, exactly: the editor does not run.

**Any editor.** The editor is one group with the sockets of ComfyUI's *Image Edit* blocks: the
instruction, the current image and the references (*Editor inputs*: image1..3) in, IMAGE out.
Delete the group, add another editor (a core *Image Edit* blueprint or your own nodes), and
connect it the same way. docs/any-editor.md shows how, editor by editor."""


def editor_block(g: wg.Graph, editor: str, instruction, current, images, slots) -> list:
    """`editor`'s nodes on ComfyUI's own files, as one block with the blueprints' sockets: `instruction`
    (STRING), `current` (the image edited), the references as `images` (one batch, for reference
    latents) and `slots` (image1..3, for Qwen-Image-Edit). Returns its nodes, the IMAGE-giving last."""
    steps = g.node("PrimitiveInt", title="Steps", value=EDITORS[editor][2]["steps"])
    parts = NativeParts(g, editor, steps[0])
    if editor == QWEN:
        edit = qwen_edit(g, parts, images, current, instruction, 42, slots=slots)
    else:
        edit = native_edit(g, parts, images, current, instruction, 42)
    return [steps, *parts.nodes(), *edit]


def _conversation_any_editor(name: str, editor: str, specs) -> wg.Graph:
    """The conversation without a VLM on ComfyUI's own files of `editor` (the template's): provenance
    selector (the VLM controller as a bypassed option feeding its plan) -> the editor block -> Reveal
    Composite -> Drift Guard (history first; the edit-region option feeds its mask) -> History Append."""
    label = LABELS[editor]
    g = wg.Graph(name, specs, summary=f"ReSpec conversational editing without a VLM ({label}, ComfyUI's own files)",
                 description=f"One prompt per turn on a persistent session: history -> provenance reference selector "
                             f"(no VLM; a VLM controller as an option) -> the {label} editor block -> Reveal Composite "
                             f"-> Drift Guard (history first) -> append -> save.")
    image = g.node("LoadImage", image="example.png")
    store = g.node("ReSpecHistoryStore", mode="new", session_id="my-session", image=image["IMAGE"])
    request = g.node("PrimitiveStringMultiline", title="Your request", value=FIRST_REQUEST)
    vlm = g.node("ReSpecVLMLoader", **OPTION)
    target = g.node("ReSpecPreservationTarget", history=store["history"], instruction=request[0], vlm=vlm["vlm"],
                    **OPTION)
    select = g.node("ReSpecProvenanceSelector", history=store["history"], instruction=request[0],
                    plan=target["plan"])
    preview = g.node("PreviewImage", title="References given to the editor", images=select["editor_images"])
    slots = g.node("ReSpecEditorImageSlots", title="Editor inputs: image1..3", editor_images=select["editor_images"])
    block = editor_block(g, editor, select["instruction"], select["current_image"], select["editor_images"], slots)
    reveal = g.node("ReSpecRevealComposite", history=store["history"], image=block[-1][0], instruction=request[0],
                    plan=select["plan"])
    region, option = _edit_region_option(g, select["current_image"], reveal["image"], request, select["plan"])
    guard = _guard(g, select["current_image"], reveal["image"], request[0], store["history"], select["plan"],
                   reveal=reveal["reveal"], mask=region)
    append = g.node("ReSpecHistoryAppend", history=store["history"], image=guard["image"], instruction=request[0],
                    sent_instruction=select["instruction"], plan=select["plan"],
                    meta=json.dumps({"editor": f"{editor}-native", "selector": "provenance"}),
                    editor_image_ids=select["image_ids"], reveal=reveal["reveal"], guard=guard["guard"])
    save = g.node("SaveImage", images=append["current_image"], filename_prefix="respec/turn")
    readme = g.note(ANY_EDITOR_NOTE, title="Read me", size=README_SIZE)
    models = g.note(NATIVE_NOTE[editor] + "\n\n" + VLM_OPTION_NOTE + "\n\n" + EDIT_REGION_NOTE,
                    title="Models and options", size=MODELS_SIZE, collapsed=True)
    g.group(EDITOR_GROUP % label, block)
    g.editor_block = block
    _collapse_what_runs(g)
    # The options' groups begin their columns: no link of the conversation runs across a bypassed group.
    # The editor's group has columns of its own (30: room for its title).
    g.columns(_flow([readme, image], [_option_group(g, [vlm, target], title=VLM_GROUP), request, store,
                                       select, slots, preview],
                    [30, *block], [_option_group(g, option), reveal, guard, append, models, save]), gap_x=CHAT_GAP)
    return g


@graph
def conversational_flux2_klein4b(specs):
    return _conversation_any_editor("conversational_flux2_klein4b", "flux2-klein4b", specs)


@graph
def conversational_qwen_image_edit_2511(specs):
    return _conversation_any_editor("conversational_qwen_image_edit_2511", QWEN, specs)


# The controller on ComfyUI's own TextGenerate (0.24+): Qwen3.5 4B of Comfy-Org's repackaged
# Qwen3.5 (its CLIPLoader type as in ComfyUI's Qwen3.5 text-generation template).
TEXTGEN_FILE = ("qwen3.5_4b_bf16.safetensors", "text_encoders",
                HF + "Comfy-Org/Qwen3.5/resolve/main/text_encoders/qwen3.5_4b_bf16.safetensors")
TEXTGEN_MAX_LENGTH = 768   # new tokens: the JSON plan needs a few hundred (the VLM node's default cap)
TEXTGEN_NOTE = f"""\
**Controller on ComfyUI's own TextGenerate** (ComfyUI 0.24 or later; **ComfyUI 0.8 has no
TextGenerate node**: there this graph opens with one missing node, use *{TITLES["conversational_flux2"]}*).
*Controller Prompt* builds the paper's restoration or rewrite prompt with the edit history, and the
history images as one batch; *Generate Text* runs the model under ComfyUI's memory manager;
*Plan from Text* reads its answer into the plan with the same rules as Preservation Target VLM
(appendix C.2 / C.3; `on_parse_failure` = request sends your words to the editor when the answer
holds no JSON). Turn 1 and skipped turns do not run Generate Text at all.

Controller model: `qwen3.5_4b_bf16.safetensors` (Comfy-Org/Qwen3.5, models/text_encoders; the
0.8B / 2B / 9B / 27B files of that repository work the same), or Gemma 3 / 4 with vision,
Qwen2.5-VL-7B; ComfyUI 0.38 adds Qwen3-VL (`qwen3vl_4b_fp8_scaled.safetensors`, Comfy-Org/Qwen3-VL).
Sampling is off (greedy: a re-queued turn plans the same); nothing forces the answer to be JSON."""


@graph
def conversational_textgen_flux2(specs):
    g = wg.Graph("conversational_textgen_flux2", specs,
                 summary="ReSpec conversational editing, controller on ComfyUI's TextGenerate (FLUX.2 [klein])",
                 description="One prompt per turn on a persistent session: history -> Controller Prompt -> "
                             "ComfyUI's Generate Text -> Plan from Text -> references + rewritten request -> "
                             "ComfyUI-native FLUX.2 [klein] sampling -> append -> save.")
    c = SimpleNamespace()
    c.image = g.node("LoadImage", image="example.png")
    c.store = g.node("ReSpecHistoryStore", mode="new", session_id="my-session", image=c.image["IMAGE"])
    c.request = g.node("PrimitiveStringMultiline", title="Your request", value=FIRST_REQUEST)
    name, directory, url = TEXTGEN_FILE
    controller = g.node("CLIPLoader", title="Controller model (TextGenerate)", clip_name=name,
                        type="stable_diffusion", properties={"models": [{"name": name, "directory": directory,
                                                                        "url": url}]})
    prompt = g.node("ReSpecControllerPrompt", history=c.store["history"], instruction=c.request[0])
    answer = g.node("TextGenerate", clip=controller[0], prompt=prompt["prompt"], image=prompt["images"],
                    max_length=TEXTGEN_MAX_LENGTH, sampling_mode="off", thinking=False, use_default_template=True)
    c.plan = g.node("ReSpecPlanFromText", controller_call=prompt["controller_call"], generated_text=answer[0],
                    on_parse_failure="request")
    c.select = g.node("ReSpecReferenceSelector", history=c.store["history"], plan=c.plan["plan"])
    c.rewrite = g.node("ReSpecInstructionRewriter", plan=c.plan["plan"])
    c.preview = g.node("PreviewImage", title="References given to the editor", images=c.select["editor_images"])
    steps = g.node("PrimitiveInt", title="Steps", value=EDITORS["flux2"][2]["steps"])
    parts = NativeParts(g, "flux2", steps[0])
    edit = native_edit(g, parts, c.select["editor_images"], c.select["current_image"], c.rewrite["instruction"], 42)
    _append_and_save(g, c, edit[-1][0], "flux2-native")
    about, model = TEXTGEN_NOTE.split("\n\nController model: ")
    readme = g.note(about, title="Read me", size=README_SIZE)
    models = g.note("**Controller model:** " + model + "\n\n" + NATIVE_NOTE["flux2"], title="Models",
                    size=MODELS_SIZE, collapsed=True)
    _collapse_what_runs(g)
    g.columns(_flow([readme, c.image], [c.request, c.store, steps],
                    *_native_runs(c, parts, edit, [controller, prompt, answer, c.plan], models)), gap_x=CHAT_GAP)
    return g


SAM3_NOTE = """\
**Occluder masks on ComfyUI's SAM3** (ComfyUI 0.24+; no YOLO-World, so no AGPL package). Appendix
B.1's rules around `SAM3_Detect`: *SAM3 Query* writes the label's query chain (the label, its last
word, that word's singular) as one SAM3 prompt, so SAM3 detects each query on its own; SAM3_Detect
runs at threshold 0 with individual masks, so every query returns its best object in order;
*Occluder Mask, SAM3* accepts the first query whose score reaches B.1's 0.2 and gives its mask (all
zero when none does), with a record of every query's score. Any IMAGE batch works: one picture, or a
conversation's turns from *History to Images*. Model: `%s` in models/checkpoints (ComfyUI's SAM3
template's file). The paper-exact benchmark keeps YOLO-World + SAM-H (Occluder Mask (ReSpec))."""


@graph
def occluder_mask_sam3(specs):
    g = wg.Graph("occluder_mask_sam3", specs, summary="ReSpec occluder mask on ComfyUI's SAM3 (appendix B.1 rules)",
                 description="An image and a label -> the label's B.1 query chain as one SAM3 prompt -> SAM3_Detect "
                             "(threshold 0, one object per query) -> the first query scoring >= 0.2 gives the mask.")
    image = g.node("LoadImage", image="example.png")
    query = g.node("ReSpecSam3Query", label="bouquet of flowers")
    sam3 = g.node("CheckpointLoaderSimple", title="SAM3", ckpt_name=SAM3_FILE[0], properties=_models(*SAM3_FILE))
    text = g.node("CLIPTextEncode", title="Queries", text=query["prompt"], clip=sam3["CLIP"])
    found = g.node("SAM3_Detect", model=sam3["MODEL"], image=image["IMAGE"], conditioning=text[0],
                   threshold=0.0, refine_iterations=2, individual_masks=True)
    mask = g.node("ReSpecSam3OccluderMask", image=image["IMAGE"], masks=found["masks"], bboxes=found["bboxes"],
                  label=query["label"])
    preview = g.node("MaskPreview", mask=mask["mask"])
    readme = g.note(SAM3_NOTE % SAM3_FILE[0], title="Read me", size=README_SIZE)
    g.columns([[readme, image], [query, sam3, text], [found, mask], [preview]], gap_x=CHAT_GAP)
    return g


# ------------------------------------------------------------------------------ the pack's blueprints

# subgraphs/<name>.json: ComfyUI (0.24+) lists a pack's subgraphs/*.json at GET /global_subgraphs, and
# the frontend's node library offers them. The two halves of a ReSpec turn around any editor.
SUBGRAPHS = ROOT / "subgraphs"
BLUEPRINT_CATEGORY = "ReSpec"
BLUEPRINTS = {}


def blueprint(fn):
    BLUEPRINTS[fn.__name__] = fn
    return fn


def _blueprint_graph(specs, name: str, description: str) -> tuple[wg.Graph, Blueprint]:
    """An empty graph and the blueprint `name` over it (the pack's category)."""
    g = wg.Graph(name.lower().replace(": ", "_").replace(" ", "_"), specs)
    return g, Blueprint(g, name, category=BLUEPRINT_CATEGORY, description=description)


@blueprint
def respec_before_the_edit(specs) -> Blueprint:
    g, bp = _blueprint_graph(specs, "ReSpec: before the edit", (
        "History -> plan -> the editor's inputs, with no VLM: the session's history (History Store), the "
        "provenance Reference Selector's plan, the instruction to send and the editor's images, as image1..3 "
        "for editors with numbered image inputs and as one batch for reference latents. Connect a VLM "
        "controller's plan to 'plan' to let it write the instruction."))
    image, request = bp.input("image", "IMAGE"), bp.input("request", "STRING")
    session, plan = bp.input("session_id", "STRING"), bp.input("plan", "RESPEC_PLAN", optional=True)
    store = g.node("ReSpecHistoryStore", mode="new", image=image, session_id=session)
    select = g.node("ReSpecProvenanceSelector", history=store["history"], instruction=request, plan=plan)
    slots = g.node("ReSpecEditorImageSlots", title="Editor inputs: image1..3", editor_images=select["editor_images"])
    g.columns([[store], [select], [slots]], gap_x=CHAT_GAP)
    for name, out in (("instruction", select["instruction"]), ("current_image", select["current_image"]),
                      ("image1", slots["image1"]), ("image2", slots["image2"]), ("image3", slots["image3"]),
                      ("editor_images", select["editor_images"]), ("history", store["history"]),
                      ("plan", select["plan"]), ("image_ids", select["image_ids"])):
        bp.output(name, out)
    return bp


@blueprint
def respec_after_the_edit(specs) -> Blueprint:
    g, bp = _blueprint_graph(specs, "ReSpec: after the edit", (
        "Reveal Composite -> Drift Guard (history first) -> History Append, after any editor: pastes back "
        "exactly what the edit revealed, keeps the previous image where the edit did not change it, answers "
        "'remove what you added' from the history (the editor then does not run), and keeps the turn. "
        "Connect the outputs of 'ReSpec: before the edit' and your editor's IMAGE to 'edited'."))
    history, plan = bp.input("history", "RESPEC_HISTORY"), bp.input("plan", "RESPEC_PLAN")
    request, current = bp.input("request", "STRING"), bp.input("current_image", "IMAGE")
    edited, sent = bp.input("edited", "IMAGE"), bp.input("instruction", "STRING")
    ids = bp.input("image_ids", "STRING")
    reveal = g.node("ReSpecRevealComposite", history=history, image=edited, instruction=request, plan=plan)
    guard = _guard(g, current, reveal["image"], request, history, plan, reveal=reveal["reveal"])
    append = g.node("ReSpecHistoryAppend", history=history, image=guard["image"], instruction=request,
                    sent_instruction=sent, plan=plan, meta=json.dumps({"editor": "any", "selector": "provenance"}),
                    editor_image_ids=ids, reveal=reveal["reveal"], guard=guard["guard"])
    g.columns([[reveal], [guard], [append]], gap_x=CHAT_GAP)
    bp.output("image", append["current_image"])
    bp.output("history", append["history"])
    return bp


def blueprint_example(editor: str = "flux2-klein4b", specs: dict | None = None) -> dict:
    """A UI graph that wraps `editor`'s block (ComfyUI's own files) with the two blueprints, as a user
    wires it: Load Image, the request and the session -> before -> the editor -> after -> Save Image.
    Carries the blueprints' definitions (definitions.subgraphs), as the frontend saves a graph that uses
    them. Not shipped: the checker loads it in a real frontend and runs it."""
    specs = dict(specs if specs is not None else wg.all_specs())
    made = {name: fn(specs) for name, fn in BLUEPRINTS.items()}
    for bp in made.values():
        specs[bp.spec()["name"]] = bp.spec()
    before_id, after_id = (made[k].spec()["name"] for k in ("respec_before_the_edit", "respec_after_the_edit"))
    g = wg.Graph(f"blueprint_example_{editor}", specs)
    image = g.node("LoadImage", image="example.png")
    request = g.node("PrimitiveStringMultiline", title="Your request", value=FIRST_REQUEST)
    session = g.node("PrimitiveString", title="Session", value="my-session")
    before = g.node(before_id, image=image["IMAGE"], request=request[0], session_id=session[0])
    block = editor_block(g, editor, before["instruction"], before["current_image"], before["editor_images"], before)
    after = g.node(after_id, history=before["history"], plan=before["plan"], request=request[0],
                   current_image=before["current_image"], edited=block[-1][0], instruction=before["instruction"],
                   image_ids=before["image_ids"])
    save = g.node("SaveImage", images=after["image"], filename_prefix="respec/turn")
    third = -(-len(block) // 3)
    g.columns([[image, request, session], [before], block[:third], block[third:2 * third], block[2 * third:],
               [after, save]], gap_x=CHAT_GAP)
    ui = g.to_ui()
    ui["definitions"] = {"subgraphs": [bp.to_json()["definitions"]["subgraphs"][0] for bp in made.values()]}
    return ui


def blueprint_files(specs: dict | None = None) -> dict[Path, str]:
    """subgraphs/<name>.json of every blueprint, as written to disk."""
    specs = specs if specs is not None else wg.all_specs()
    out = {}
    for fn in BLUEPRINTS.values():
        bp = fn(specs)
        out[SUBGRAPHS / f"{bp.name.replace(':', '')}.json"] = json.dumps(bp.to_json(), indent=1) + "\n"
    return out


# ------------------------------------------------------------------------------ benchmark graphs

TURN_SLOTS = 5   # the paper's longest scenarios have 5 turns
EDITORS = {
    # name: (loader, edit node, its settings: the paper's)
    "flux2": ("ReSpecFlux2Loader", "ReSpecFlux2Edit", {"steps": 30, "guidance": 4.0}),
    "omnigen2": ("ReSpecOmniGen2Loader", "ReSpecOmniGen2Edit",
                 {"steps": 50, "text_guidance": 5.0, "image_guidance": 2.0}),
    # native only: ComfyUI's klein 4B base template (20 steps, CFG 5.0)
    "flux2-klein4b": (None, None, {"steps": 20}),
    # native only: ComfyUI's Qwen-Image-Edit 2511 template (40 steps, CFG 4.0)
    QWEN: (None, None, {"steps": QWEN_SETTINGS["steps"]}),
}
# Editors whose benchmark graph runs Reveal Composite and the Drift Guard after each edit (switches on
# the left; the row's config then says so).
POST_EDIT_EDITORS = (QWEN,)
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
        y += n.size()[1] + n.room() + gap
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


def _benchmark(name: str, editor_name: str, specs: dict, *, respec: bool, native: bool = False) -> wg.Graph:
    loader_cls, edit_cls, edit_settings = EDITORS[editor_name]
    label = LABELS[editor_name]
    route = "ComfyUI's own models" if native else "paper-exact diffusers"
    if respec:
        title = f"OCCUR benchmark: ReSpec + {label} ({route}; PTI / HRS switches)"
        desc = (f"The full benchmark loop with ReSpec and {label}: scenario -> {TURN_SLOTS} turn slots (controller, "
                "selector, rewriter, editor, append) -> trajectory masks -> OCCUR score -> results row. "
                "The PTI / HRS switches give the paper's table 2 rows.")
    else:
        title = f"OCCUR benchmark: baseline {label} (no ReSpec; {route})"
        desc = (f"The benchmark loop without ReSpec (paper table 1 baseline): each turn sends the user's "
                f"instruction and the current image only to {label}.")
    g = wg.Graph(name, specs, summary=title, description=desc)
    loader, store = _scenario_start(g)
    if native:
        steps = g.node("PrimitiveInt", title="Editor steps", value=edit_settings["steps"])
        parts = NativeParts(g, editor_name, steps[0])
        left = [loader, store, steps, *parts.nodes()]
    else:
        editor = g.node(loader_cls)
        steps = g.node("PrimitiveInt", title="Editor steps", value=edit_settings["steps"])
        left = [loader, store, editor, steps]
    if respec:
        vlm = g.node("ReSpecVLMLoader")
        hrs = g.node("PrimitiveBoolean", title="HRS: give the editor the history reference", value=True)
        pti = g.node("PrimitiveBoolean", title="PTI: send the rewritten instruction", value=True)
        skip = g.node("PrimitiveBoolean", title="Skip the VLM on non-restoration turns", value=False)
        left += [vlm, hrs, pti, skip]
    post_edit = editor_name in POST_EDIT_EDITORS
    if post_edit:
        reveal_on = g.node("PrimitiveBoolean", title="Reveal Composite", value=True)
        guard_on = g.node("PrimitiveBoolean", title="Drift Guard", value=True)
        left += [reveal_on, guard_on]
    stack(left, 60)
    first = 60 + max(n.size()[0] for n in left) + 40   # the turn slots start clear of the widest (the VLM loader)
    history, current = store["history"], store["current_image"]
    row_editor = f"{editor_name}-native" if native else editor_name
    for t in range(1, TURN_SLOTS + 1):
        turn = g.node("ReSpecScenarioTurn", title=f"Turn {t}", scenario=loader["scenario"], turn=t)
        seed = t   # per-slot seed; `python -m respec bench --server` sets the runner's per-turn seeds
        if respec:
            plan = g.node("ReSpecPreservationTarget", history=history, instruction=turn["instruction"],
                          vlm=vlm["vlm"], is_restoration=turn["is_restoration"], skip_non_restoration=skip[0],
                          on_parse_failure="paper",   # C.2's rule, as the in-process runner
                          history_images="paper")     # every image, as the paper and the runner
            select = g.node("ReSpecReferenceSelector", history=history, plan=plan["plan"],
                            use_history_reference=hrs[0])
            rewrite = g.node("ReSpecInstructionRewriter", plan=plan["plan"], use_pti=pti[0])
            images, now, instruction = select["editor_images"], select["current_image"], rewrite["instruction"]
            chain = [turn, plan, select, rewrite]
        else:
            images, now, instruction = current, current, turn["instruction"]
            chain = [turn]
        if native:
            edit_nodes = native_edit(g, parts, images, now, instruction, seed)
            edited = edit_nodes[-1][0]
        else:
            edit_nodes = [g.node(edit_cls, editor=editor["editor"], editor_images=images, current_image=now,
                                 instruction=instruction, seed=seed, **dict(edit_settings, steps=steps[0]))]
            edited = edit_nodes[0]["image"]
        kept = {}
        if post_edit:
            reveal = g.node("ReSpecRevealComposite", history=history, image=edited, instruction=turn["instruction"],
                            enabled=reveal_on[0], plan=plan["plan"], is_restoration=turn["is_restoration"])
            guard = g.node("ReSpecDriftGuard", previous=now, edited=reveal["image"], enabled=guard_on[0],
                           instruction=turn["instruction"], plan=plan["plan"])
            edited, kept = guard["image"], {"reveal": reveal["reveal"], "guard": guard["guard"]}
            edit_nodes += [reveal, guard]
        if respec:
            append = g.node("ReSpecHistoryAppend", history=history, image=edited, instruction=turn["instruction"],
                            sent_instruction=rewrite["instruction"], plan=plan["plan"],
                            meta=json.dumps({"seed": seed, "editor": row_editor}),
                            editor_image_ids=select["image_ids"], **kept)
        else:
            append = g.node("ReSpecHistoryAppend", history=history, image=edited, instruction=turn["instruction"],
                            meta=json.dumps({"seed": seed, "editor": row_editor, "editor_image_ids": [t - 1]}))
        switch = g.node("ReSpecTurnSwitch", title=f"Turn {t} switch", exists=turn["exists"],
                        history_before=history, history_after=append["history"])
        chain += edit_nodes + [append, switch]
        stack(chain, first + 420 * (t - 1))
        g.group(f"Turn {t}", chain)
        # The next slot starts from this slot's result. Its current image is this slot's
        # edit: a slot only runs when every earlier slot ran (turns are consecutive).
        history, current = switch["history"], append["current_image"]
        if t == 1:
            first_slot = chain
    config = ("respec+reveal+guard" if post_edit else "respec") if respec else "baseline"
    _scenario_end(g, loader, history, config, row_editor, first + 420 * TURN_SLOTS)
    edit_text = f"{label} edit" if not native else f"native {label} sampling (reference latents)"
    chain_text = ("Preservation Target VLM (ReSpec) -> Reference Selector + Instruction Rewriter -> " + edit_text
                  if respec else edit_text + " (user instruction, current image)")
    switches = ("**Ablations (table 2).** HRS / PTI switches on the left; set Results Writer's `config` to "
                "match: both on = `respec`, PTI only = `pti`, HRS only (+ skip on) = `hrs`. The `baseline` "
                "row comes from the baseline workflow.\n\n" if respec else
                "**Baseline (table 1).** No controller: this is the `baseline` config of the tables.\n\n")
    if post_edit:
        switches += ("**Reveal Composite and Drift Guard** run after every edit (switches on the left); the row's "
                     "`config` is `respec+reveal+guard` (both off: `respec`).\n\n")
    readme = g.note(BENCH_NOTE.format(slots=TURN_SLOTS, chain=chain_text, switches=switches))
    g.main(readme, *left, *first_slot)   # the saved view: the read-me, the scenario and the first turn
    if native:
        g.note(NATIVE_NOTE[editor_name] + f" Rows are labelled editor `{row_editor}`.", title="Models")
    else:
        g.note(DIFFUSERS_NOTE.format(native=title_of(name.replace("benchmark_", "benchmark_native_"))), title="Route")
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


@graph
def benchmark_native_flux2(specs):
    return _benchmark("benchmark_native_flux2", "flux2", specs, respec=True, native=True)


@graph
def benchmark_native_omnigen2(specs):
    return _benchmark("benchmark_native_omnigen2", "omnigen2", specs, respec=True, native=True)


@graph
def benchmark_native_baseline_flux2(specs):
    return _benchmark("benchmark_native_baseline_flux2", "flux2", specs, respec=False, native=True)


@graph
def benchmark_native_flux2_klein4b(specs):
    return _benchmark("benchmark_native_flux2_klein4b", "flux2-klein4b", specs, respec=True, native=True)


@graph
def benchmark_native_qwen_image_edit_2511(specs):
    return _benchmark("benchmark_native_qwen_image_edit_2511", QWEN, specs, respec=True, native=True)


@graph
def benchmark_native_baseline_omnigen2(specs):
    return _benchmark("benchmark_native_baseline_omnigen2", "omnigen2", specs, respec=False, native=True)


def build_all(specs: dict | None = None) -> dict[str, wg.Graph]:
    """Every graph by key, in the template browser's order."""
    specs = specs if specs is not None else wg.all_specs()
    graphs = {}
    for key in graph_order(GRAPHS):
        graphs[key] = GRAPHS[key](specs)
        graphs[key].title = title_of(key)   # what the browser shows, also in extra.respec.title
    return graphs


def render(g: wg.Graph) -> tuple[str, str]:
    """(UI JSON text, API JSON text) of a graph, exactly as written to disk."""
    return (json.dumps(g.to_ui(), indent=1, ensure_ascii=False) + "\n",
            json.dumps(g.to_api(), indent=1, ensure_ascii=False) + "\n")


def paths(key: str) -> tuple[Path, Path]:
    """(UI file, API file) of the graph built by `key`: named by its title."""
    title = title_of(key)
    return WORKFLOWS / f"{title}.json", API_DIR / f"{title}.api.json"


def index_text() -> str:
    """workflows/api/index.json: each key's title and files, in the browser's order (the core reads
    it to find a shipped graph; it imports nothing from scripts/)."""
    entries = {key: {"title": title_of(key), "ui": paths(key)[0].name, "api": paths(key)[1].name}
               for key in graph_order(GRAPHS)}
    return json.dumps({"comment": "Generated by scripts/workflows/build_workflows.py (TITLES): the shipped "
                                  "graphs by key (their file names before issue 36) and their files.",
                       "workflows": entries}, indent=1) + "\n"


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
    files = {API_DIR / INDEX: index_text()}
    for key, g in build_all().items():
        files.update(zip(paths(key), render(g)))
    SUBGRAPHS.mkdir(exist_ok=True)
    files.update(blueprint_files())
    for path, text in files.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    known = set(files)
    extra = [p for p in [*WORKFLOWS.glob("*.json"), *API_DIR.glob("*.json"), *SUBGRAPHS.glob("*.json")]
             if p not in known]
    for p in stale:
        print(("out of date: " if args.check else "wrote: ") + str(p.relative_to(ROOT)))
    for p in extra:
        print(f"not built by this script: {p.relative_to(ROOT)}")
    if args.check and (stale or extra):
        print("run `python scripts/workflows/build_workflows.py` and commit the result")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
