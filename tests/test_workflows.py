"""The shipped workflows (issue 6, item 3): every UI file and API file checked against the nodes
the pack registers and ComfyUI's core node specs (scripts/workflows/comfy_core_nodes.json, read from a
real ComfyUI), and each UI file against its API twin.

The checks here re-implement what ComfyUI's frontend does when it loads a UI file and turns it
into a prompt (widgets_values map by position onto the widget inputs; a seed widget carries an
extra control_after_generate value, an upload widget an extra "image"), independently of the
generator in scripts/workflows/.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"
CORE = json.loads((ROOT / "scripts" / "workflows" / "comfy_core_nodes.json").read_text(encoding="utf-8"))["nodes"]
UI_ONLY = {"Note", "MarkdownNote"}
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}

UI_FILES = sorted(WORKFLOWS.glob("*.json"))
API_FILES = sorted(API_DIR.glob("*.api.json"))
# The shipped graphs by key (their builder function's name): {"title", "ui", "api"}.
INDEX = json.loads((API_DIR / "index.json").read_text(encoding="utf-8"))["workflows"]
# Nodes a shipped graph may hold bypassed (UI mode 4): options a user switches on with Ctrl+B.
BYPASSED_OPTIONS = {"ReSpecEditRegionFromText", "CheckpointLoaderSimple", "CLIPTextEncode", "ImageBatch", "SAM3_Detect",
                    "ReSpecEditRegionMask", "LoraLoaderModelOnly", "ReSpecVLMLoader", "ReSpecPreservationTarget"}


def _script(name: str):
    """scripts/workflows/<name>.py, imported as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", ROOT / "scripts" / "workflows" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_module():
    return _script("build_workflows")


def _ids(paths):
    return [p.name for p in paths]


@pytest.fixture(scope="module")
def specs(pack):
    out = dict(CORE)
    names = pack.NODE_DISPLAY_NAME_MAPPINGS
    for name, cls in pack.NODE_CLASS_MAPPINGS.items():
        inputs = cls.INPUT_TYPES()
        out[name] = {"input": inputs, "input_order": {k: list(v) for k, v in inputs.items()},
                     "output": list(cls.RETURN_TYPES),
                     "output_node": bool(getattr(cls, "OUTPUT_NODE", False)),
                     "display_name": names.get(name, name)}
    return out


def _inputs(spec):
    """[(name, required?, type, options, choices)] in declaration order (required, then optional)."""
    rows = []
    for section in ("required", "optional"):
        entries = spec.get("input", {}).get(section) or {}
        for name in (spec.get("input_order") or {}).get(section) or list(entries):
            e = list(entries[name])
            t = e[0]
            opts = e[1] if len(e) > 1 and isinstance(e[1], dict) else {}
            if isinstance(t, (list, tuple)):
                rows.append((name, section == "required", "COMBO", opts, list(t)))
            elif t == "COMFY_DYNAMICCOMBO_V3":   # a V3 combo (TextGenerate's sampling_mode): its option keys
                rows.append((name, section == "required", "COMBO", opts, [o["key"] for o in opts["options"]]))
            else:
                rows.append((name, section == "required", t, opts,
                             list(opts.get("options", [])) if t == "COMBO" else None))
    return rows


def _is_widget(t, opts):
    return t in WIDGET_TYPES and not opts.get("forceInput")


def _extras(name, t, opts):
    n = 0
    if t == "INT" and (opts.get("control_after_generate") or name in ("seed", "noise_seed")):
        n += 1
    if opts.get("image_upload"):
        n += 1
    return n


def _types_match(out_t, in_t):
    return out_t == "*" or in_t == "*" or bool(set(out_t.split(",")) & set(in_t.split(",")))


def _value_ok(t, opts, choices, v):
    if choices is not None:
        return not choices or v in choices
    if t == "INT":
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif t == "FLOAT":
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    elif t == "STRING":
        ok = isinstance(v, str)
    else:
        ok = isinstance(v, bool)
    if ok and t in ("INT", "FLOAT"):
        ok = opts.get("min", v) <= v <= opts.get("max", v)
    return ok


def _load(p):
    return json.loads(p.read_text(encoding="utf-8"))


def _backend_nodes(ui):
    return [n for n in ui["nodes"] if n["type"] not in UI_ONLY]


def _through_bypass(link, nodes, links):
    """Follow a link through bypassed nodes as graphToPrompt does: the bypassed node's input at the
    output's slot, else its first input, of the output's type; None when it has none connected."""
    while link is not None and nodes[link[1]]["mode"] == 4:
        src = nodes[link[1]]
        want = src["outputs"][link[2]]["type"]
        candidates = [i for i in [link[2], *range(len(src["inputs"]))] if i < len(src["inputs"])]
        hit = next((src["inputs"][i] for i in candidates if src["inputs"][i]["type"] == want), None)
        link = links.get(hit["link"]) if hit is not None else None
    return link


def ui_to_api(ui, specs):
    """What the frontend sends to /prompt for a UI workflow (no virtual nodes; bypassed nodes left out)."""
    links = {l[0]: l for l in ui["links"]}
    nodes = {n["id"]: n for n in ui["nodes"]}
    api = {}
    for node in _backend_nodes(ui):
        if node["mode"] == 4:
            continue
        spec = specs[node["type"]]
        values = list(node["widgets_values"])
        by_slot = {s["name"]: s for s in node["inputs"]}
        inputs = {}
        for name, _, t, opts, _ in _inputs(spec):
            if _is_widget(t, opts):
                value = values.pop(0)
                del values[:_extras(name, t, opts)]
                inputs[name] = value
            slot = by_slot.get(name)
            if slot is not None and slot.get("link") is not None:
                l = _through_bypass(links[slot["link"]], nodes, links)
                if l is None:
                    inputs.pop(name, None)
                else:
                    inputs[name] = [str(l[1]), l[2]]
        api[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return api


# ------------------------------------------------------------------------------ file set

def test_every_shipped_graph_has_a_ui_file_and_an_api_file():
    ui_names = {p.stem for p in UI_FILES}
    api_names = {p.name[: -len(".api.json")] for p in API_FILES}
    assert ui_names == api_names == {e["title"] for e in INDEX.values()}
    for key, e in INDEX.items():
        assert (e["ui"], e["api"]) == (f"{e['title']}.json", f"{e['title']}.api.json"), key


def test_every_builder_has_one_title_and_every_title_a_builder():
    build = _build_module()
    assert set(build.TITLES) == set(build.GRAPHS)
    assert set(INDEX) == set(build.GRAPHS)
    with pytest.raises(KeyError, match="has no title: add it to TITLES"):
        build.title_of("conversational_not_there")


def test_titles_are_portable_file_names_unique_without_case():
    build = _build_module()
    titles = list(build.TITLES.values())
    for t in titles:
        assert build.TITLE_RULE.fullmatch(t), f"{t!r}: ASCII letters, digits, spaces and .,-() only"
    assert len({t.casefold() for t in titles}) == len(titles)
    # the rule itself refuses what Windows or a URL path would not take as it is
    for bad in ("ReSpec: chat", "ReSpec chat?", "ReSpec / chat", "ReSpec chat ", "ReSpec #1", "Réspec chat"):
        assert not build.TITLE_RULE.fullmatch(bad), bad


def test_conversations_come_first_in_the_template_browsers_a_to_z_order():
    """The browser's "Alphabetical" sort compares titles ignoring case: every conversational graph's
    title sorts before every other's."""
    order = [key for key, _ in sorted(INDEX.items(), key=lambda kv: kv[1]["title"].casefold())]
    conversational = [k for k in order if k.startswith("conversational_")]
    assert conversational and order[:len(conversational)] == conversational
    assert list(INDEX) == order   # the index (and build_all) list them in that order


def test_workflows_folder_holds_only_ui_files_for_the_template_browser():
    # ComfyUI lists workflows/*.json as templates and loads each as a UI graph.
    for p in UI_FILES:
        data = _load(p)
        assert "nodes" in data and "links" in data, p.name


def test_workflow_files_are_generated_from_the_current_node_inputs(pack):
    build = _build_module()
    assert (API_DIR / "index.json").read_text(encoding="utf-8") == build.index_text(), \
        "workflows/api/index.json is out of date: run python scripts/workflows/build_workflows.py"
    for name, g in build.build_all(build.wg.all_specs(pack)).items():
        ui_text, api_text = build.render(g)
        ui_path, api_path = build.paths(name)
        assert ui_path.read_text(encoding="utf-8") == ui_text, \
            f"{ui_path.name} is out of date: run python scripts/workflows/build_workflows.py"
        assert api_path.read_text(encoding="utf-8") == api_text, \
            f"{api_path.name} is out of date: run python scripts/workflows/build_workflows.py"


# ------------------------------------------------------------------------------ UI files

@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_file_has_the_fields_the_frontend_reads(path):
    ui = _load(path)
    for key in ("last_node_id", "last_link_id", "nodes", "links", "version"):
        assert key in ui, key
    ids = [n["id"] for n in ui["nodes"]]
    assert len(ids) == len(set(ids))
    assert ui["last_node_id"] >= max(ids)
    assert ui["last_link_id"] >= max((l[0] for l in ui["links"]), default=0)
    for n in ui["nodes"]:
        for key in ("id", "type", "pos", "size", "flags", "order", "mode", "properties", "inputs",
                    "outputs", "widgets_values"):
            assert key in n, f"node {n.get('id')} lacks {key}"
        # Bypassed (4) only the options a user switches on: the edit region group, the Lightning LoRA,
            # the VLM controller.
        assert n["mode"] == 0 or (n["mode"] == 4 and n["type"] in BYPASSED_OPTIONS), \
            f"node {n['id']} ({n['type']}) is muted or bypassed"
    for l in ui["links"]:
        assert len(l) == 6 and isinstance(l[5], str)


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_node_types_are_registered(path, specs):
    missing = [n["type"] for n in _load(path)["nodes"] if n["type"] not in specs and n["type"] not in UI_ONLY]
    assert not missing, f"{path.name}: node types neither in the pack nor in ComfyUI core: {missing}"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_links_connect_matching_types(path, specs):
    ui = _load(path)
    nodes = {n["id"]: n for n in ui["nodes"]}
    for lid, src, src_slot, dst, dst_slot, ltype in ui["links"]:
        s, d = nodes[src], nodes[dst]
        out_t = specs[s["type"]]["output"][src_slot]
        assert s["outputs"][src_slot]["type"] == out_t == ltype, f"link {lid}"
        assert lid in s["outputs"][src_slot]["links"], f"link {lid} missing from node {src}'s output"
        slot = d["inputs"][dst_slot]
        assert slot["link"] == lid, f"link {lid} does not land on node {dst} slot {dst_slot}"
        in_t = {name: t for name, _, t, _, _ in _inputs(specs[d["type"]])}[slot["name"]]
        assert slot["type"] == in_t
        assert _types_match(out_t, in_t), f"link {lid}: {out_t} -> {d['type']}.{slot['name']} ({in_t})"
    for n in ui["nodes"]:
        for slot in n["inputs"]:
            if slot["link"] is not None:
                assert any(l[0] == slot["link"] and l[3] == n["id"] for l in ui["links"])
        for out in n["outputs"]:
            for lid in out["links"] or []:
                assert any(l[0] == lid and l[1] == n["id"] for l in ui["links"])


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_widget_counts_match_the_widget_inputs(path, specs):
    for n in _backend_nodes(_load(path)):
        expected = sum(1 + _extras(name, t, opts) for name, _, t, opts, _ in _inputs(specs[n["type"]])
                       if _is_widget(t, opts))
        assert len(n["widgets_values"]) == expected, \
            f"{path.name}: node {n['id']} ({n['type']}) has {len(n['widgets_values'])} widget values, expected {expected}"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_widget_values_are_valid_for_their_inputs(path, specs):
    for n in _backend_nodes(_load(path)):
        values = list(n["widgets_values"])
        for name, _, t, opts, choices in _inputs(specs[n["type"]]):
            if not _is_widget(t, opts):
                continue
            v = values.pop(0)
            extras = [values.pop(0) for _ in range(_extras(name, t, opts))]
            assert _value_ok(t, opts, choices, v), f"{path.name}: {n['type']}.{name} = {v!r}"
            if t == "INT" and extras:
                assert extras[0] in ("fixed", "increment", "decrement", "randomize")


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_required_inputs_are_connected_or_given(path, specs):
    for n in _backend_nodes(_load(path)):
        slots = {s["name"]: s for s in n["inputs"]}
        for name, required, t, opts, _ in _inputs(specs[n["type"]]):
            if _is_widget(t, opts):
                continue
            assert name in slots, f"{path.name}: node {n['id']} ({n['type']}) has no socket {name}"
            if required:
                assert slots[name]["link"] is not None, \
                    f"{path.name}: required input {n['type']}.{name} (node {n['id']}) is not connected"
        known = {name for name, *_ in _inputs(specs[n["type"]])}
        assert set(slots) <= known, f"{path.name}: node {n['id']} has unknown inputs {set(slots) - known}"


# ------------------------------------------------------------------------------ API files

@pytest.mark.parametrize("path", API_FILES, ids=_ids(API_FILES))
def test_api_file_has_every_required_input(path, specs):
    api = _load(path)
    assert any(specs[n["class_type"]].get("output_node") for n in api.values()), "no output node"
    for nid, n in api.items():
        assert n["class_type"] in specs, f"{path.name}: unknown node type {n['class_type']}"
        for name, required, t, opts, choices in _inputs(specs[n["class_type"]]):
            if required:
                assert name in n["inputs"], f"{path.name}: node {nid} ({n['class_type']}) lacks {name}"
            v = n["inputs"].get(name)
            if isinstance(v, list):
                src = api[v[0]]
                out_t = specs[src["class_type"]]["output"][v[1]]
                assert _types_match(out_t, t), f"{path.name}: {nid}.{name} gets {out_t}, takes {t}"
            elif v is not None:
                assert _is_widget(t, opts), f"{path.name}: socket {nid}.{name} given a literal"
                assert _value_ok(t, opts, choices, v), f"{path.name}: {n['class_type']}.{name} = {v!r}"
        known = {name for name, *_ in _inputs(specs[n["class_type"]])}
        assert set(n["inputs"]) <= known, f"{path.name}: node {nid} has unknown inputs"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_ui_and_api_files_describe_the_same_graph(path, specs):
    api_path = API_DIR / f"{path.stem}.api.json"
    api = {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in _load(api_path).items()}
    assert ui_to_api(_load(path), specs) == api


# ---------------------------------------------------------------------------- the native route

def _api(key):
    return json.loads((API_DIR / INDEX[key]["api"]).read_text(encoding="utf-8"))


def _ui(key):
    return json.loads((WORKFLOWS / INDEX[key]["ui"]).read_text(encoding="utf-8"))


def _upstream(wf, node_id):
    seen, todo = set(), [node_id]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += [v[0] for v in wf[n]["inputs"].values() if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)]
    return seen


@pytest.mark.parametrize("editor, guider, steps", [("flux2", "CFGGuider", 30), ("omnigen2", "DualCFGGuider", 50)])
def test_native_benchmark_runs_every_turn_on_comfyuis_own_models_behind_lazy_slots(editor, guider, steps):
    wf = _api(f"benchmark_native_{editor}")
    types = [n["class_type"] for n in wf.values()]
    assert not any(t.startswith(("ReSpecFlux2", "ReSpecOmniGen2")) for t in types), "no diffusers editor"
    assert all(types.count(t) == 1 for t in ("UNETLoader", "CLIPLoader", "VAELoader"))
    switches = {n["inputs"]["exists"][0]: nid for nid, n in wf.items() if n["class_type"] == "ReSpecTurnSwitch"}
    assert len(switches) == 5
    for nid, node in wf.items():
        if node["class_type"] != "ReSpecTurnSwitch":
            continue
        # the slot's sampling sits behind the switch's lazy input: nothing of it runs for a missing turn
        slot = _upstream(wf, node["inputs"]["history_after"][0]) - _upstream(wf, node["inputs"]["history_before"][0])
        slot_types = [wf[n]["class_type"] for n in slot]
        for t in (guider, "SamplerCustomAdvanced", "ReSpecReferenceConditioning", "RandomNoise", "ImageScale",
                  "ReSpecPreservationTarget", "ReSpecHistoryAppend"):
            assert t in slot_types, (nid, t)
    guiders = [n for n in wf.values() if n["class_type"] == guider]
    assert len(guiders) == 5
    if editor == "flux2":
        assert all(g["inputs"]["cfg"] == 4.0 for g in guiders)
    else:
        assert all((g["inputs"]["cfg_conds"], g["inputs"]["cfg_cond2_negative"]) == (5.0, 2.0) for g in guiders)
    assert sorted(n["inputs"]["value"] for n in wf.values() if n["class_type"] == "PrimitiveInt") == [steps]
    titles = sorted(n["_meta"]["title"] for n in wf.values() if n["class_type"] == "PrimitiveBoolean")
    assert any(t.startswith("HRS") for t in titles) and any(t.startswith("PTI") for t in titles)
    writer = next(n for n in wf.values() if n["class_type"] == "ReSpecResultsWriter")
    assert writer["inputs"]["editor"] == f"{editor}-native"


def test_native_loaders_default_to_the_template_files_and_list_them_for_the_missing_models_dialog():
    for name in ("benchmark_native_flux2", "conversational_flux2", "conversational_omnigen2"):
        ui = _ui(name)
        loaders = [n for n in ui["nodes"] if n["type"] in ("UNETLoader", "CLIPLoader", "VAELoader")]
        assert len(loaders) == 3
        for n in loaders:
            if n["widgets_values"][0] == "flux-2-klein-base-9b-fp8.safetensors":
                # gated, no public URL: not listed (the frontend's schema requires a url per entry)
                assert "models" not in n.get("properties", {})
                continue
            (entry,) = n["properties"]["models"]
            assert entry["name"] == n["widgets_values"][0]
            assert entry["directory"] == {"UNETLoader": "diffusion_models", "CLIPLoader": "text_encoders",
                                          "VAELoader": "vae"}[n["type"]]
            assert entry["url"].startswith("https://huggingface.co/") and entry["url"].endswith("/" + entry["name"])


def test_every_listed_model_file_has_a_url_as_the_frontends_schema_requires():
    for path in sorted(WORKFLOWS.glob("*.json")):
        for n in json.loads(path.read_text(encoding="utf-8"))["nodes"]:
            for entry in (n.get("properties") or {}).get("models", []):
                assert entry.get("url"), (path.name, n["type"], entry)
    clip = next(n for n in _ui("conversational_flux2")["nodes"] if n["type"] == "CLIPLoader")
    assert clip["widgets_values"][:2] == ["qwen_3_8b_fp8mixed.safetensors", "flux2"]


def test_the_conversational_template_is_native_and_the_diffusers_graphs_say_they_are_paper_exact():
    assert "UNETLoader" in {n["class_type"] for n in _api("conversational_flux2").values()}
    for name in ("conversational_flux2_diffusers", "benchmark_flux2", "benchmark_baseline_omnigen2"):
        notes = " ".join(n["widgets_values"][0] for n in _ui(name)["nodes"] if n["type"] == "MarkdownNote")
        assert "Paper-exact diffusers route" in notes, name


def _thumbnails_module():
    return _script("render_thumbnails")


def test_every_ui_workflow_has_its_template_browser_thumbnail():
    """ComfyUI's template browser shows workflows/<title>.jpg beside workflows/<title>.json, in a
    square box (scripts/workflows/render_thumbnails.py draws what the graph does)."""
    from PIL import Image
    ui = sorted((ROOT / "workflows").glob("*.json"))
    assert ui
    for wf in ui:
        thumb = wf.with_suffix(".jpg")
        assert thumb.is_file(), f"{thumb.name} is missing: run scripts/workflows/render_thumbnails.py"
        with Image.open(thumb) as im:
            assert im.format == "JPEG" and im.size == (512, 512), thumb.name
    assert not {p.stem for p in (ROOT / "workflows").glob("*.jpg")} - {p.stem for p in ui}


def test_every_graph_has_a_thumbnail_kind_and_a_new_key_gets_one_or_a_clear_error():
    thumbs = _thumbnails_module()
    kinds = {key: thumbs.kind_of(key) for key in INDEX}
    assert kinds["conversational_provenance_flux2"] == "reveal" and kinds["conversational_flux2"] == "chat"
    assert kinds["benchmark_native_baseline_omnigen2"] == "baseline" and kinds["benchmark_flux2"] == "eval"
    assert thumbs.kind_of("conversational_qwen_image_edit_2511") == "chat"   # a new graph of a known kind
    with pytest.raises(KeyError, match="add a rule to KIND_RULES"):
        thumbs.kind_of("inpainting_flux2")


def test_titles_sort_the_same_with_or_without_case_and_the_conversations_come_first():
    """The template browser shows a pack's list in the server's (directory) order, or sorted A-Z when the
    user asks; the pack does not re-sort the frontend's list (no shared-object patch, issue 45), so its
    titles must sort alike whichever A-Z the browser uses."""
    titles = [e["title"] for e in INDEX.values()]
    assert sorted(titles) == sorted(titles, key=str.casefold)
    assert sorted(titles)[0].startswith("ReSpec chat") and sorted(titles)[-1].startswith("ReSpec paper")


def test_the_template_category_is_titled_with_the_packs_display_name():
    """The frontend titles a pack's template category by its folder name, through its i18n key
    templateWorkflows.category.<folder>: the pack's locales give it the display name for the folder
    names a clone or the registry makes."""
    import tomllib
    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["comfy"]["DisplayName"]
    categories = json.loads((ROOT / "locales" / "en" / "main.json").read_text(encoding="utf-8"))["templateWorkflows"]["category"]
    assert categories == {"ReSpec-ComfyUI": name, "respec-comfyui": name, "respec-occur": name}   # the docs', git's, the registry's


def test_the_chat_cards_thumbnails_tell_the_graphs_apart():
    """Each conversation's card says what it does differently (its editor, files and route): no two
    chat thumbnails, nor their words, are alike (issue 44: seven cards shared one)."""
    import itertools

    import numpy as np
    from PIL import Image
    thumbs = _thumbnails_module()
    chats = [k for k in INDEX if k.startswith("conversational_")]
    words = {k: tuple(thumbs.card_of(k)["text"]) for k in chats}
    assert len(set(words.values())) == len(chats), words
    pics = {k: np.asarray(Image.open(WORKFLOWS / f"{INDEX[k]['title']}.jpg"), np.float32) for k in chats}
    for a, b in itertools.combinations(chats, 2):
        assert np.abs(pics[a] - pics[b]).max() > 100, (a, b)


@pytest.mark.slow
def test_the_thumbnails_are_what_the_renderer_draws_now(tmp_path):
    """Re-running the renderer gives the committed thumbnails (the sim world is seeded), and a
    baseline's third tile is not ReSpec's."""
    import numpy as np
    from PIL import Image
    thumbs = _thumbnails_module()
    keys = ["conversational_flux2", "benchmark_native_baseline_flux2", "occluder_mask_sam3"]
    assert thumbs.main(["--only", *keys, "--out", str(tmp_path)]) == 0
    new = {k: np.asarray(Image.open(tmp_path / f"{INDEX[k]['title']}.jpg"), np.float32) for k in keys}
    for k in keys:
        shipped = np.asarray(Image.open(WORKFLOWS / f"{INDEX[k]['title']}.jpg"), np.float32)
        assert np.abs(new[k] - shipped).mean() < 1.0, k
    third = slice(260, 512), slice(0, 250)
    assert np.abs(new[keys[0]][third] - new[keys[1]][third]).mean() > 10
    assert np.abs(new[keys[0]][third] - new[keys[2]][third]).mean() > 10   # the mask, not the restored patch


def test_klein_4b_graphs_use_the_4b_template_files_and_settings():
    """klein 4B (Apache-2.0): ComfyUI's own 4B base edit template's files, CFG 5.0, 20 steps."""
    files = {"UNETLoader": "flux-2-klein-base-4b-fp8.safetensors", "CLIPLoader": "qwen_3_4b.safetensors",
             "VAELoader": "full_encoder_small_decoder.safetensors"}
    for name, guiders in (("conversational_flux2_klein4b", 1), ("benchmark_native_flux2_klein4b", 5)):
        wf = _api(name)
        for cls, file in files.items():
            (node,) = [n for n in wf.values() if n["class_type"] == cls]
            assert file in node["inputs"].values(), (name, cls)
        cfgs = [n["inputs"]["cfg"] for n in wf.values() if n["class_type"] == "CFGGuider"]
        assert cfgs == [5.0] * guiders, name
        assert [n["inputs"]["value"] for n in wf.values() if n["class_type"] == "PrimitiveInt"] == [20], name
        clip = next(n for n in wf.values() if n["class_type"] == "CLIPLoader")
        assert clip["inputs"]["type"] == "flux2"
    writer = next(n for n in _api("benchmark_native_flux2_klein4b").values() if n["class_type"] == "ReSpecResultsWriter")
    assert writer["inputs"]["editor"] == "flux2-klein4b-native"
    notes = " ".join(n["widgets_values"][0] for n in _ui("conversational_flux2_klein4b")["nodes"]
                     if n["type"] == "MarkdownNote")
    assert "Apache-2.0" in notes and "non-commercial" in notes


def test_textgen_graph_plans_with_comfyuis_textgenerate_and_says_0_8_has_none():
    wf = _api("conversational_textgen_flux2")
    by_type = {}
    for nid, n in wf.items():
        by_type.setdefault(n["class_type"], []).append(nid)
    assert "ReSpecPreservationTarget" not in by_type and "ReSpecVLMLoader" not in by_type
    (prompt,), (gen,), (plan,) = by_type["ReSpecControllerPrompt"], by_type["TextGenerate"], by_type["ReSpecPlanFromText"]
    g = wf[gen]["inputs"]
    assert g["prompt"] == [prompt, 0] and g["image"] == [prompt, 1] and g["sampling_mode"] == "off"
    assert wf[g["clip"][0]]["inputs"]["clip_name"] == "qwen3.5_4b_bf16.safetensors"
    assert wf[plan]["inputs"]["generated_text"] == [gen, 0] and wf[plan]["inputs"]["controller_call"] == [prompt, 2]
    # the selector, rewriter and History Append read Plan from Text's plan, as in conversational_flux2
    for cls in ("ReSpecReferenceSelector", "ReSpecInstructionRewriter", "ReSpecHistoryAppend"):
        (nid,) = by_type[cls]
        assert wf[nid]["inputs"]["plan"] == [plan, 0], cls
    assert "UNETLoader" in by_type and "SamplerCustomAdvanced" in by_type
    ui = _ui("conversational_textgen_flux2")
    notes = " ".join(n["widgets_values"][0] for n in ui["nodes"] if n["type"] == "MarkdownNote")
    assert "ComfyUI 0.8 has no\nTextGenerate" in notes
    loader = next(n for n in ui["nodes"] if n["type"] == "CLIPLoader" and n.get("title", "").startswith("Controller"))
    (entry,) = loader["properties"]["models"]
    assert entry == {"name": "qwen3.5_4b_bf16.safetensors", "directory": "text_encoders",
                     "url": "https://huggingface.co/Comfy-Org/Qwen3.5/resolve/main/text_encoders/qwen3.5_4b_bf16.safetensors"}


def test_the_checkers_ui_to_api_conversion_gives_every_api_file(specs):
    """scripts/comfyui/check_in_comfyui.py converts UI files as the frontend does (TextGenerate's dynamic
    sampling_mode combo included) before it queues them in a real ComfyUI."""
    import importlib.util
    import sys
    sys.path.insert(0, str(ROOT / "scripts" / "comfyui"))
    try:
        spec = importlib.util.spec_from_file_location("check_in_comfyui", ROOT / "scripts" / "comfyui" / "check_in_comfyui.py")
        checker = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(checker)
    finally:
        sys.path.remove(str(ROOT / "scripts" / "comfyui"))
    assert checker.NEWER_CORE_NODES == {"TextGenerate": "0.24.0", "SAM3_Detect": "0.24.0"}
    for path in UI_FILES:
        api = {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in _load(API_DIR / f"{path.stem}.api.json").items()}
        assert checker.ui_to_api(_load(path), specs) == api, path.name


# ---------------------------------------------------------------------------- graphs that open readable

TITLE_BAR = 30                 # the frontend draws a node's title above its pos
READABLE = 0.6                 # the frontend stops drawing node text below 8 / 14 = 0.57 (its LOD default)
VIEWPORT = (1920, 960)         # a 1920 x 1080 screen's browser window
ROOM = 300                     # Preview / Save Image grow by about this much when a picture arrives


def _boxes(ui):
    """(id, type, x0, y0, x1, y1) of every node and note as drawn, title bar included."""
    return [(n["id"], n["type"], n["pos"][0], n["pos"][1] - TITLE_BAR, n["pos"][0] + n["size"][0],
             n["pos"][1] + (0 if n.get("flags", {}).get("collapsed") else n["size"][1])) for n in ui["nodes"]]


def _overlap(a, b):
    return a[2] < b[4] and b[2] < a[4] and a[3] < b[5] and b[3] < a[5]


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_no_two_nodes_overlap_as_drawn(path):
    boxes = _boxes(_load(path))
    hits = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a, b)]
    assert not hits, f"{path.name}: overlapping nodes {hits[:5]}"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_a_node_that_shows_a_picture_has_room_to_grow_below_it(path):
    """A Preview / Save Image (or Mask Preview) grows by ~250-300 px when it gets a picture; it must not
    cover the next node (issue 36: "References given to the editor" covered the edit node's inputs)."""
    boxes = _boxes(_load(path))
    for b in boxes:
        if b[1] not in ("PreviewImage", "SaveImage", "MaskPreview"):
            continue
        room = (b[0], b[1], b[2], b[5], b[4], b[5] + ROOM)
        covered = [o[0] for o in boxes if o[0] != b[0] and _overlap(room, o)]
        assert not covered, f"{path.name}: node {b[0]} ({b[1]}) would cover nodes {covered} when it shows a picture"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_no_two_group_boxes_overlap(path):
    """Groups in neighbouring columns (the editor block beside an option) are drawn apart."""
    groups = _load(path).get("groups") or []
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            (ax, ay, aw, ah), (bx, by, bw, bh) = a["bounding"], b["bounding"]
            assert not (ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah), (a["title"], b["title"])


def _segment_meets_box(p, q, box) -> bool:
    """Whether the segment p-q meets the box (x0, y0, x1, y1) (Liang-Barsky clipping)."""
    (x0, y0, x1, y1), (dx, dy) = box, (q[0] - p[0], q[1] - p[1])
    t0, t1 = 0.0, 1.0
    for pp, qq in ((-dx, p[0] - x0), (dx, x1 - p[0]), (-dy, p[1] - y0), (dy, y1 - p[1])):
        if pp == 0:
            if qq < 0:
                return False
            continue
        t = qq / pp
        t0, t1 = (max(t0, t), t1) if pp < 0 else (t0, min(t1, t))
        if t0 > t1:
            return False
    return True


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_no_link_runs_across_a_bypassed_option_group(path):
    """A switched-off option (a bypassed group) sits where no other link crosses it: a link drawn over a
    bypassed group reads as if it ran through the option (issue 45). Links as straight lines between
    their slots (LiteGraph: a slot every 20 px from 14 px under a node's top)."""
    ui = _load(path)
    nodes = {n["id"]: n for n in ui["nodes"]}
    crossing = []
    for group in ui.get("groups") or []:
        if not group["title"].startswith("Option:"):
            continue
        x, y, w, h = group["bounding"]
        inside = {i for i, n in nodes.items() if x <= n["pos"][0] < x + w and y <= n["pos"][1] < y + h}
        for _, src, src_slot, dst, dst_slot, _ in ui["links"]:
            if src in inside or dst in inside:
                continue
            a, b = nodes[src], nodes[dst]
            start = (a["pos"][0] + a["size"][0], a["pos"][1] + 14 + 20 * src_slot)
            end = (b["pos"][0], b["pos"][1] + 14 + 20 * dst_slot)
            if _segment_meets_box(start, end, (x, y, x + w, y + h)):
                crossing.append((group["title"], a["type"], b["type"]))
    assert not crossing, crossing


def _fit(x0, y0, x1, y1):
    """The zoom the frontend's fitView gives these bounds (LGraphCanvas.fitToBounds fills 75 %)."""
    return min(0.75 * VIEWPORT[0] / max(x1 - x0, 300), 0.75 * VIEWPORT[1] / max(y1 - y0, 300))


# The canvas of a 1366 x 768, 1600 x 1000 and 1920 x 1080 page (frontend 1.58.1 fits a graph into the
# page less ~10 px: a 1690 x 1140 graph opened at 0.50 on the 1366 x 768 page).
SCREENS = [(1366, 758), (1600, 990), (1920, 1070)]
CHATS = [k for k in INDEX if k.startswith("conversational_")]


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}")
@pytest.mark.parametrize("key", CHATS)
def test_a_conversational_graph_opened_whole_is_readable(key, screen):
    """The template browser of frontends >= 1.45 fits every node in the view (it ignores the saved
    view): a conversation's nodes must then still be drawn with their text, on a laptop too (issue 45)."""
    boxes = _boxes(_ui(key))
    x0, y0 = min(b[2] for b in boxes), min(b[3] for b in boxes)
    x1, y1 = max(b[4] for b in boxes), max(b[5] for b in boxes)
    scale = min(0.75 * screen[0] / max(x1 - x0, 300), 0.75 * screen[1] / max(y1 - y0, 300))
    assert scale >= READABLE, f"{key}: opens whole at {scale:.2f} on {screen}"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_no_two_nodes_overlap_in_nodes_2(path):
    """Nodes 2.0 draws nodes taller than their classic size (workflow_graph.VUE_EXTRA, measured in the
    frontend): the layout keeps that room free below every open node (issue 45)."""
    wg = _script("workflow_graph")
    ui = _load(path)
    open_ = {n["id"] for n in ui["nodes"] if not n.get("flags", {}).get("collapsed") and n["type"] != "MarkdownNote"}
    boxes = [(*b[:5], b[5] + (wg.vue_extra(b[1]) if b[0] in open_ else 0)) for b in _boxes(ui)]
    hits = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlap(a, b)]
    assert not hits, f"{path.name}: overlapping nodes in Nodes 2.0 {hits[:5]}"


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_a_note_is_as_tall_as_its_text_in_nodes_2(path):
    """A markdown note grows to its text in Nodes 2.0 (over the node below it when made too short)."""
    wg = _script("workflow_graph")
    short = [(n["title"], n["size"][1], wg.note_height(n["widgets_values"][0], n["size"][0]))
             for n in _load(path)["nodes"] if n["type"] == "MarkdownNote"
             and n["size"][1] < wg.note_height(n["widgets_values"][0], n["size"][0])]
    assert not short, short


@pytest.mark.parametrize("key", CHATS)
def test_a_conversation_shows_open_only_what_a_user_sets(key):
    """The steps that run by themselves are collapsed to their titles; the picture, the request, the
    session, the model files and the pictures shown stay open (options stay switched off, collapsed)."""
    users_set = _build_module().USER_SETS
    for n in _ui(key)["nodes"]:
        if n["type"] == "MarkdownNote" or n.get("mode") == 4:
            continue
        collapsed = bool(n.get("flags", {}).get("collapsed"))
        assert collapsed == (n["type"] not in users_set), (key, n["id"], n["type"], collapsed)


@pytest.mark.parametrize("path", UI_FILES, ids=_ids(UI_FILES))
def test_the_saved_view_is_readable_and_shows_where_the_graph_starts(path):
    ui = _load(path)
    ds = ui["extra"]["ds"]
    assert READABLE <= ds["scale"] <= 1.0
    first = min((n for n in ui["nodes"] if n["type"] in ("LoadImage", "ReSpecScenarioLoader")), key=lambda n: n["id"])
    sx = (first["pos"][0] + ds["offset"][0]) * ds["scale"]
    sy = (first["pos"][1] - TITLE_BAR + ds["offset"][1]) * ds["scale"]
    assert 0 <= sx <= VIEWPORT[0] - 100 and 0 <= sy <= VIEWPORT[1] - 100, (path.name, sx, sy)
