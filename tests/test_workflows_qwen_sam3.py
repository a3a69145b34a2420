"""The Qwen-Image-Edit 2511 graphs, the SAM3 occluder-mask graph and the edit-region option (issue 35),
and the tools that write and check them: bypassed nodes in the generator and the checker, the core
node table's base entries, the Nodes 2.0 check's rule."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from conftest import core, load_script

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "workflows"
API_DIR = WORKFLOWS / "api"
QWEN_FILES = {"qwen_image_edit_2511_fp8mixed.safetensors": "diffusion_models",
              "qwen_2.5_vl_7b_fp8_scaled.safetensors": "text_encoders", "qwen_image_vae.safetensors": "vae",
              "Qwen-Image-Edit-2511-Lightning-4steps-V1.0-bf16.safetensors": "loras"}


def _script(name, folder="workflows"):
    """A module of scripts/<folder>/ (its folder on sys.path while it loads, as when run)."""
    return load_script(f"scripts/{folder}/{name}.py", f"{name}_under_test")


@pytest.fixture(scope="module")
def wg():
    return _script("workflow_graph")


# The shipped graphs by key (the builder's name): their files are named by their titles (issue 36).
INDEX = json.loads((API_DIR / "index.json").read_text(encoding="utf-8"))["workflows"]


def _api(key):
    return json.loads((API_DIR / INDEX[key]["api"]).read_text(encoding="utf-8"))


def _ui(key):
    return json.loads((WORKFLOWS / INDEX[key]["ui"]).read_text(encoding="utf-8"))


def _of(wf, cls):
    return [n for n in wf.values() if n["class_type"] == cls]


# ------------------------------------------------------------------------------ the Qwen graphs

SELECTOR = {"conversational_qwen_image_edit_2511": "ReSpecProvenanceSelector",
            "benchmark_native_qwen_image_edit_2511": "ReSpecReferenceSelector"}
SENT_BY = {"conversational_qwen_image_edit_2511": "ReSpecProvenanceSelector",
           "benchmark_native_qwen_image_edit_2511": "ReSpecInstructionRewriter"}


@pytest.mark.parametrize("name", ["conversational_qwen_image_edit_2511", "benchmark_native_qwen_image_edit_2511"])
def test_qwen_graphs_give_the_selectors_images_as_image1_to_3_and_the_rewritten_request_as_prompt(name):
    wf = _api(name)
    for enc in _of(wf, "TextEncodeQwenImageEditPlus"):
        slots = wf[enc["inputs"]["image1"][0]]
        assert slots["class_type"] == "ReSpecEditorImageSlots"
        assert [enc["inputs"][f"image{i}"] for i in (1, 2, 3)] == [[enc["inputs"]["image1"][0], i] for i in range(3)]
        # the conversation plans from provenance (the VLM is its option), the benchmark from the VLM
        assert wf[slots["inputs"]["editor_images"][0]]["class_type"] == SELECTOR[name]
    prompts = [e["inputs"]["prompt"] for e in _of(wf, "TextEncodeQwenImageEditPlus")]
    sent = [p for p in prompts if isinstance(p, list)]
    assert sent and all(wf[p[0]]["class_type"] == SENT_BY[name] for p in sent)
    assert sorted(p for p in prompts if not isinstance(p, list)) == [""] * len(sent)   # the negative


@pytest.mark.parametrize("name", ["conversational_qwen_image_edit_2511", "benchmark_native_qwen_image_edit_2511"])
def test_qwen_graphs_use_the_templates_files_and_settings(name):
    wf, ui = _api(name), _ui(name)
    assert _of(wf, "UNETLoader")[0]["inputs"]["unet_name"] == "qwen_image_edit_2511_fp8mixed.safetensors"
    clip = _of(wf, "CLIPLoader")[0]["inputs"]
    assert (clip["clip_name"], clip["type"]) == ("qwen_2.5_vl_7b_fp8_scaled.safetensors", "qwen_image")
    assert _of(wf, "ModelSamplingAuraFlow")[0]["inputs"]["shift"] == 3.1
    assert _of(wf, "CFGNorm")[0]["inputs"]["strength"] == 1.0
    assert {n["inputs"]["reference_latents_method"] for n in _of(wf, "FluxKontextMultiReferenceLatentMethod")} == \
        {"index_timestep_zero"}
    for k in _of(wf, "KSampler"):
        assert (k["inputs"]["sampler_name"], k["inputs"]["scheduler"]) == ("euler", "simple")
        assert wf[k["inputs"]["steps"][0]]["inputs"]["value"] == 40 and wf[k["inputs"]["cfg"][0]]["inputs"]["value"] == 4.0
        assert wf[k["inputs"]["model"][0]]["class_type"] == "CFGNorm"      # the Lightning LoRA is bypassed
    listed = {m["name"]: m["directory"] for n in ui["nodes"] for m in (n.get("properties") or {}).get("models") or []}
    assert {k: v for k, v in listed.items() if k in QWEN_FILES} == QWEN_FILES
    assert all(m["url"].startswith("https://huggingface.co/") for n in ui["nodes"]
               for m in (n.get("properties") or {}).get("models") or [])
    lora = [n for n in ui["nodes"] if n["type"] == "LoraLoaderModelOnly"]
    assert len(lora) == 1 and lora[0]["mode"] == 4 and "4 steps" in lora[0]["title"]


def test_qwen_conversation_keeps_reveal_and_the_guard_on_and_the_edit_region_as_a_bypassed_option():
    wf, ui = _api("conversational_qwen_image_edit_2511"), _ui("conversational_qwen_image_edit_2511")
    reveal, guard, append = (_of(wf, c)[0] for c in ("ReSpecRevealComposite", "ReSpecDriftGuard", "ReSpecHistoryAppend"))
    assert reveal["inputs"]["enabled"] is True and guard["inputs"]["enabled"] is True
    assert wf[guard["inputs"]["edited"][0]]["class_type"] == "ReSpecRevealComposite"
    assert wf[guard["inputs"]["reveal"][0]]["class_type"] == "ReSpecRevealComposite"   # its paste is I_(k-1)'s own
    assert "mask" not in guard["inputs"]          # the option is off: nothing reaches the guard's MASK
    assert wf[append["inputs"]["guard"][0]]["class_type"] == "ReSpecDriftGuard" and "reveal" in append["inputs"]
    assert json.loads(append["inputs"]["meta"])["editor"] == "qwen-image-edit-2511-native"
    option = {n["type"] for n in ui["nodes"] if n["mode"] == 4} - {"LoraLoaderModelOnly"}
    assert option == {"ReSpecEditRegionFromText", "CheckpointLoaderSimple", "CLIPTextEncode", "ImageBatch",
                      "SAM3_Detect", "ReSpecEditRegionMask", "ReSpecVLMLoader", "ReSpecPreservationTarget"}
    ui_guard = next(n for n in ui["nodes"] if n["type"] == "ReSpecDriftGuard")
    link = next(s["link"] for s in ui_guard["inputs"] if s["name"] == "mask")
    src = next(l for l in ui["links"] if l[0] == link)[1]
    assert next(n for n in ui["nodes"] if n["id"] == src)["type"] == "ReSpecEditRegionMask"


def test_the_provenance_graph_has_the_same_edit_region_option():
    ui = _ui("conversational_provenance_flux2")
    assert {n["type"] for n in ui["nodes"] if n["mode"] == 4} >= {"ReSpecEditRegionFromText", "SAM3_Detect",
                                                                    "ReSpecEditRegionMask"}
    guard = _of(_api("conversational_provenance_flux2"), "ReSpecDriftGuard")[0]["inputs"]
    assert "mask" not in guard and "reveal" in guard      # the option off; Reveal's record in (issue 32)
    ui_guard = next(n for n in ui["nodes"] if n["type"] == "ReSpecDriftGuard")
    linked = {s["name"] for s in ui_guard["inputs"] if s["link"] is not None}
    assert {"mask", "reveal"} <= linked                   # switched on, the guard gets both


@pytest.mark.parametrize("key", ["conversational_qwen_image_edit_2511", "conversational_provenance_flux2"])
def test_the_option_is_one_titled_group_of_collapsed_bypassed_nodes(key):
    """Switched off, the option takes little room (the conversation must open whole and readable):
    its nodes are collapsed; the group around them (and only them, and its note) says how to switch it on."""
    ui = _ui(key)
    option = [n for n in ui["nodes"] if n["mode"] == 4 and n["type"] not in
              {"LoraLoaderModelOnly", "ReSpecVLMLoader", "ReSpecPreservationTarget"}]
    assert len(option) == 6 and all(n["flags"].get("collapsed") for n in option)
    (group,) = [g for g in ui["groups"] if g["title"].startswith("Option: edit region")]
    x, y, w, h = group["bounding"]
    inside = {n["id"] for n in ui["nodes"] if x <= n["pos"][0] and n["pos"][0] + n["size"][0] <= x + w
              and y <= n["pos"][1] - 30 and n["pos"][1] <= y + h}
    assert {n["id"] for n in option} <= inside
    assert all(n["type"] == "MarkdownNote" for n in ui["nodes"] if n["id"] in inside - {n["id"] for n in option})


def test_qwen_benchmark_runs_reveal_and_the_guard_in_each_slot_and_labels_its_rows():
    wf = _api("benchmark_native_qwen_image_edit_2511")
    assert len(_of(wf, "KSampler")) == 5 and len(_of(wf, "ReSpecDriftGuard")) == 5 and len(_of(wf, "ReSpecRevealComposite")) == 5
    switches = {n["_meta"]["title"]: nid for nid, n in wf.items() if n["class_type"] == "PrimitiveBoolean"}
    for node in _of(wf, "ReSpecRevealComposite") + _of(wf, "ReSpecDriftGuard"):
        assert node["inputs"]["enabled"][0] in (switches["Reveal Composite"], switches["Drift Guard"])
    for node in _of(wf, "ReSpecRevealComposite"):
        assert wf[node["inputs"]["is_restoration"][0]]["class_type"] == "ReSpecScenarioTurn"
    writer = _of(wf, "ReSpecResultsWriter")[0]["inputs"]
    assert (writer["editor"], writer["config"]) == ("qwen-image-edit-2511-native", "respec+reveal+guard")


def test_the_sam3_graph_runs_b1_around_sam3_detect():
    wf, ui = _api("occluder_mask_sam3"), _ui("occluder_mask_sam3")
    detect = _of(wf, "SAM3_Detect")[0]["inputs"]
    assert detect["threshold"] == 0.0 and detect["individual_masks"] is True      # every query returns its best
    text = wf[detect["conditioning"][0]]
    assert wf[text["inputs"]["text"][0]]["class_type"] == "ReSpecSam3Query"
    mask = _of(wf, "ReSpecSam3OccluderMask")[0]["inputs"]
    assert mask["accept_threshold"] == 0.2 and wf[mask["bboxes"][0]]["class_type"] == "SAM3_Detect"
    ckpt = next(n for n in ui["nodes"] if n["type"] == "CheckpointLoaderSimple")
    assert ckpt["properties"]["models"][0]["name"] == "sam3.1_multiplex_fp16.safetensors"


# ------------------------------------------------------------------------------ bypassed nodes

def test_a_bypassed_node_passes_on_its_input_of_the_same_type_or_drops_the_link(wg, pack):
    specs = wg.all_specs(pack)
    g = wg.Graph("t", specs)
    unet = g.node("UNETLoader", unet_name="m.safetensors")
    lora = g.node("LoraLoaderModelOnly", model=unet[0], lora_name="l.safetensors", bypassed=True)
    shift = g.node("ModelSamplingAuraFlow", model=lora[0])
    img = g.node("LoadImage", image="example.png")
    cur = g.node("ReSpecEditRegionMask", previous=img[0], edited=img[0], phrase=g.node("PrimitiveString")[0],
                 bypassed=True)
    guard = g.node("ReSpecDriftGuard", previous=img[0], edited=img[0], mask=cur["mask"])
    api = g.to_api()
    assert api[str(shift.id)]["inputs"]["model"] == [str(unet.id), 0]          # MODEL passed through
    assert "mask" not in api[str(guard.id)]["inputs"]                          # no MASK input upstream
    assert str(lora.id) not in api and str(cur.id) not in api
    modes = {n["id"]: n["mode"] for n in g.to_ui()["nodes"]}
    assert modes[lora.id] == 4 and modes[shift.id] == 0


def test_the_checkers_conversion_resolves_bypassed_nodes_like_the_generator(wg, pack):
    checker = _script("check_in_comfyui", "comfyui")
    specs = wg.all_specs(pack)
    for name in ("conversational_qwen_image_edit_2511", "conversational_provenance_flux2"):
        api = {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in _api(name).items()}
        assert checker.ui_to_api(_ui(name), specs) == api


# ------------------------------------------------------------------------------ the checker's rules

def test_a_newer_comfyuis_optional_widget_at_its_default_is_no_difference():
    checker = _script("check_in_comfyui", "comfyui")
    info = {"CFGNorm": {"input": {"required": {"model": ["MODEL", {}], "strength": ["FLOAT", {"default": 1.0}]},
                                  "optional": {"pre_cfg": ["BOOLEAN", {"default": False}]}}}}
    shipped = {"1": {"class_type": "CFGNorm", "inputs": {"model": ["2", 0], "strength": 1.0}}}
    assert checker._compare_prompt({"1": {"class_type": "CFGNorm", "inputs": {"model": ["2", 0], "strength": 1.0,
                                                                             "pre_cfg": False}}}, shipped, info) == []
    # ... not at another value, and not for an input the table knows
    assert checker._compare_prompt({"1": {"class_type": "CFGNorm", "inputs": {"model": ["2", 0], "strength": 1.0,
                                                                             "pre_cfg": True}}}, shipped, info)
    assert not checker.newer_optional_default(info, "CFGNorm", "strength", 1.0)


def test_nodes_2_flags_an_undrawn_node_missing_widgets_and_a_picture_that_did_not_load():
    vue = _script("check_vue_nodes", "comfyui")
    ok = {"id": 1, "type": "KSampler", "element": True, "seen": ["seed", "steps"], "advanced": 1, "drawn": 2,
          "title": "KSampler", "images": [True]}
    assert vue.node_problems([ok, dict(ok, drawn=3)]) == []                    # an advanced widget may show
    assert "not drawn" in vue.node_problems([dict(ok, element=False)])[0]
    assert "widget elements" in vue.node_problems([dict(ok, drawn=1)])[0]
    assert "widget elements" in vue.node_problems([dict(ok, drawn=4)])[0]
    assert "did not load" in vue.node_problems([dict(ok, images=[True, False])])[0]
    assert vue.node_problems([dict(ok, drawn=0, collapsed=True)]) == []           # a collapsed node: its title bar
    assert "widget elements" in vue.node_problems([dict(ok, drawn=4, collapsed=True)])[0]


def test_nodes_2_measures_overlaps_and_growth_from_the_elements_boxes():
    vue = _script("check_vue_nodes", "comfyui")
    a = {"id": 1, "type": "VAELoader", "pos": [0, 30], "box": [300, 120], "layout": [300, 58]}
    b = {"id": 2, "type": "CLIPLoader", "pos": [0, 140], "box": [300, 100], "layout": [300, 70]}
    assert vue.vue_overlaps([a, b]) == ["1/2"]                      # a's element ends at y 120, b's starts at 110
    assert vue.vue_overlaps([a, dict(b, pos=[0, 160])]) == []
    assert vue.vue_overlaps([a, dict(b, collapsed=True)]) == []
    assert vue.taller_than_laid_out([a, b, dict(a, id=3, box=[300, 88])]) == {"VAELoader": 32}


class _FakeComfyUI(http.server.BaseHTTPRequestHandler):
    version, nodes = "0.24.0", {}

    def do_GET(self):
        if self.path == "/system_stats":
            body = {"system": {"comfyui_version": self.version}}
        else:
            name = self.path.rsplit("/", 1)[1]
            body = {name: self.nodes[name]} if name in self.nodes else {}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def _spec(*widgets):
    return {"input": {"required": {w: ["FLOAT", {"default": 1.0}] for w in widgets}}, "output": []}


def test_refreshing_the_core_table_from_a_newer_comfyui_keeps_the_base_entries(tmp_path, monkeypatch):
    build = _script("build_workflows")
    monkeypatch.setattr(build, "CORE_NODES", ["CFGNorm", "SAM3_Detect"])
    monkeypatch.setattr(build, "NEWER_CORE_NODES", {"SAM3_Detect": "0.24.0"})
    table = tmp_path / "core.json"
    table.write_text(json.dumps({"comfyui_version": "0.8.0", "nodes": {"CFGNorm": _spec("strength")},
                                 "newer_nodes": {"SAM3_Detect": "0.24.0"}}))
    monkeypatch.setattr(build.wg, "CORE_TABLE", table)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeComfyUI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _FakeComfyUI.version, _FakeComfyUI.nodes = "0.24.0", {"CFGNorm": _spec("strength", "pre_cfg"),
                                                              "SAM3_Detect": _spec("threshold")}
        build.refresh_core(url)
        out = json.loads(table.read_text())
        assert list(out["nodes"]["CFGNorm"]["input"]["required"]) == ["strength"]     # the base entry stays
        assert "threshold" in out["nodes"]["SAM3_Detect"]["input"]["required"]       # the newer node is read
        assert out["comfyui_version"] == "0.8.0" and out["newer_nodes"] == {"SAM3_Detect": "0.24.0"}
        _FakeComfyUI.version, _FakeComfyUI.nodes = "0.8.0", {"CFGNorm": _spec("strength", "other")}
        build.refresh_core(url)
        out = json.loads(table.read_text())
        assert "other" in out["nodes"]["CFGNorm"]["input"]["required"]             # the base server rewrites it
        assert "threshold" in out["nodes"]["SAM3_Detect"]["input"]["required"]     # ... and keeps what it lacks
    finally:
        server.shutdown()


# ------------------------------------------------------------------------------ the slots, the configs

def test_the_editor_images_go_in_as_image1_to_3_in_the_plans_order_and_a_fourth_is_refused(pack):
    import torch
    from respec.editors.image_slots import image_slots
    from respec.errors import InputError
    assert image_slots(["source", "anchor"]) == ["source", "anchor", None]
    with pytest.raises(InputError, match="3 at most"):
        image_slots([1, 2, 3, 4])
    with pytest.raises(InputError, match="no editor images"):
        image_slots([])
    node = pack.NODE_CLASS_MAPPINGS["ReSpecEditorImageSlots"]
    with pytest.raises(core(pack, "errors").InputError, match="connect the Reference Selector's editor_images"):
        node.execute(torch.zeros((0, 8, 8, 3)))
    batch = torch.stack([torch.full((8, 8, 3), v) for v in (0.1, 0.9)])
    one, two, three = node.execute(batch).result
    assert one.shape == (1, 8, 8, 3) and float(one.mean()) == pytest.approx(0.1)
    assert float(two.mean()) == pytest.approx(0.9) and three is None


def test_a_config_sets_reveal_and_the_guard_where_the_graph_has_them():
    from respec.bench import workflow
    from respec.errors import InputError
    qwen = workflow.load_api_workflow("benchmark_native_qwen_image_edit_2511")

    def switch(wf, title):
        return next(n for n in wf.values() if n.get("_meta", {}).get("title") == title)["inputs"]["value"]

    on = workflow.fill_workflow(qwen, dataset="occur_sample", index=0,
                                config=workflow.config_switches("respec+reveal+guard", "qwen-image-edit-2511-native"))
    assert switch(on, "Reveal Composite") is True and switch(on, "Drift Guard") is True
    off = workflow.fill_workflow(qwen, dataset="occur_sample", index=0,
                                 config=workflow.config_switches("respec", "qwen-image-edit-2511-native"))
    assert switch(off, "Reveal Composite") is False and switch(off, "Drift Guard") is False
    assert _of(off, "ReSpecResultsWriter")[0]["inputs"]["config"] == "respec"
    # A graph without a Drift Guard cannot run a guard config: the key names what is missing.
    flux = workflow.load_api_workflow("benchmark_native_flux2")
    with pytest.raises(InputError, match="ReSpecDriftGuard.enabled"):
        workflow.fill_workflow(flux, dataset="occur_sample", index=0,
                               config=workflow.config_switches("respec+guard", "flux2-native"))
    with pytest.raises(InputError, match="provenance"):
        workflow.config_switches("respec-prov", "flux2-native")


def test_an_offline_registry_lookup_is_no_load_error_but_a_missing_node_is():
    """Frontend 1.35.9 keeps looking "comfy-core" up in ComfyUI's online registry on every load after
    a graph with a missing node: blocked offline, that is no fault of the graph loaded then. A
    collapsed node overlaps nothing below its title bar."""
    checker = _script("check_in_comfyui", "comfyui")
    key = "benchmark_native_flux2"
    path, ui = WORKFLOWS / INDEX[key]["ui"], _ui(key)
    nodes = [{"id": n["id"], "type": n["type"], "registered": True, "has_errors": False, "pos": n["pos"],
              "size": n["size"], "needs": None, "collapsed": False} for n in ui["nodes"]]
    lookup = "log: Connecting to 'https://api.comfy.org/nodes?node_id=comfy-core' violates the CSP"
    res = {"nodes": nodes, "errors": [], "console": [lookup], "toasts": [], "prompt": _api(key)}
    assert checker._ui_file_problems(path, ui, res) == []
    assert checker._ui_file_problems(path, ui, dict(res, console=[lookup, "TypeError: x is undefined"]))
    missing = [dict(nodes[0], registered=False)] + nodes[1:]
    assert "missing or flagged" in checker._ui_file_problems(path, ui, dict(res, nodes=missing))[0]
    a, b = (dict(nodes[0], pos=[0, 100], size=[200, 80]), dict(nodes[1], pos=[0, 160], size=[200, 80]))
    assert checker._overlaps([a, b]) and not checker._overlaps([dict(a, collapsed=True), b])
