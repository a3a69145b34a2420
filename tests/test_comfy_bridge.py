"""respec/comfy.py against ComfyUI's folder and memory-manager API (stand-ins from comfy_stand_in.py;
scripts/comfyui/check_in_comfyui.py runs the same paths in a real ComfyUI)."""
from __future__ import annotations

import gc
import json
import weakref

import pytest
import torch

import comfy_stand_in
from conftest import weights
from respec import comfy, models


def _touch(path, data=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture()
def comfyui(tmp_path, monkeypatch):
    fp, mm = comfy_stand_in.install(monkeypatch, tmp_path / "comfy" / "models")
    yield fp, mm
    models.CACHE.clear()
    gc.collect()


# ------------------------------------------------------------------------ model folders, standalone

def test_standalone_listing_is_recursive_and_skips_comfyui_marker_files():
    d = comfy.model_search_dirs("sams")[0]
    _touch(d / "sam_vit_b.pth")
    _touch(d / "mine" / "sam_tuned.pth")
    _touch(d / "put_sams_here")
    assert comfy.list_models("sams") == ["mine/sam_tuned.pth", "sam_vit_b.pth"]


def test_folder_kinds_list_model_roots_not_their_inner_folders():
    d = comfy.model_search_dirs("LLM")[0]
    _touch(d / "Qwen3-VL-8B" / "config.json", b"{}")
    _touch(d / "Qwen3-VL-8B" / "sub" / "config.json", b"{}")   # inside a model: not a model of its own
    _touch(d / "vendor" / "InternVL3-8B-hf" / "config.json", b"{}")
    _touch(d / "notes" / "readme.txt")
    assert comfy.list_models("LLM") == ["Qwen3-VL-8B", "vendor/InternVL3-8B-hf"]


def test_a_name_cannot_climb_out_of_its_model_folder(tmp_path):
    _touch(comfy.model_search_dirs("sams")[0] / "ok.pth")
    secret = _touch(tmp_path / "respec_home" / "secret.pth")
    assert comfy.find_model("sams", "ok.pth", "file") is not None
    assert comfy.find_model("sams", "../../secret.pth", "file") is None and secret.exists()


# ------------------------------------------------------------------------ model folders, inside ComfyUI

def test_folders_are_registered_through_add_model_folder_path_keeping_the_users_paths_first(comfyui, tmp_path):
    fp, _ = comfyui
    extra = str(tmp_path / "nas" / "LLM")
    fp.add_model_folder_path("LLM", extra)          # what extra_model_paths.yaml does at start-up
    comfy.register_model_folders()
    comfy.register_model_folders()
    assert comfy.model_search_dirs("LLM")[0] == tmp_path / "nas" / "LLM"
    assert [str(p) for p in comfy.model_search_dirs("LLM")].count(str(tmp_path / "comfy" / "models" / "LLM")) == 1
    assert ("add_model_folder_path", "sams", str(tmp_path / "comfy" / "models" / "sams")) in fp.calls


def test_files_are_listed_by_comfyui_recursively_with_its_extension_filter(comfyui, tmp_path):
    fp, _ = comfyui
    vae = tmp_path / "comfy" / "models" / "vae"
    _touch(vae / "flux2-vae.safetensors")
    _touch(vae / "flux" / "ae.safetensors")
    _touch(vae / "notes.txt")                        # not a model extension for ComfyUI's vae folder
    assert comfy.list_models("vae") == ["flux/ae.safetensors", "flux2-vae.safetensors"]
    assert ("get_filename_list", "vae") in fp.calls


def test_model_folders_from_extra_model_paths_are_listed_and_found(comfyui, tmp_path):
    fp, _ = comfyui
    fp.add_model_folder_path("LLM", str(tmp_path / "nas" / "LLM"))
    _touch(tmp_path / "nas" / "LLM" / "Qwen3-VL-4B" / "config.json", b"{}")
    assert "Qwen3-VL-4B" in comfy.list_models("LLM")
    assert models.resolve_path("LLM", "Qwen3-VL-4B", "", want="dir") == (tmp_path / "nas" / "LLM" / "Qwen3-VL-4B").resolve()


def test_files_are_resolved_with_get_full_path_or_raise(comfyui, tmp_path):
    fp, _ = comfyui
    f = _touch(tmp_path / "comfy" / "models" / "diffusion_models" / "klein" / "flux-2-klein-base-9b.safetensors")
    assert models.resolve_path("diffusion_models", "klein/flux-2-klein-base-9b.safetensors", "", want="file") == f.resolve()
    assert ("get_full_path_or_raise", "diffusion_models", "klein/flux-2-klein-base-9b.safetensors") in fp.calls
    with pytest.raises(Exception) as e:
        models.resolve_path("diffusion_models", "../../../etc/passwd", "put it in models/diffusion_models", want="file")
    assert "put it in models/diffusion_models" in str(e.value)


# ------------------------------------------------------------------------ the memory manager

class _TransformersLike(torch.nn.Module):
    """Like transformers / diffusers models: `device` is a read-only property."""

    def __init__(self):
        super().__init__()
        self.lin = weights(4, 4)

    @property
    def device(self):
        return self.lin.weight.device


def test_a_model_with_a_read_only_device_property_joins_comfyuis_manager(comfyui):
    _, mm = comfyui
    m = comfy.manage(_TransformersLike(), torch.device("cpu"), name="vlm")
    assert m.patcher is not None and m.use() == torch.device("cpu")
    assert mm.load_calls[-1] == ([id(m.patcher)], True), "loaded in full (not built from ComfyUI's ops)"
    assert comfy.comfy_loaded_models() == ["vlm"]


def test_one_module_shared_by_two_loaders_has_one_patcher(comfyui):
    clip = weights(2, 2)
    assert comfy.manage(clip, name="clip") is comfy.manage(clip, name="clip")


def test_a_node_unloads_only_the_packs_models_from_comfyui_and_drops_the_cache(comfyui):
    _, mm = comfyui
    other = comfy_stand_in.sys.modules["comfy.model_patcher"].ModelPatcher(weights(2, 2), "cpu", "cpu")
    mm.load_models_gpu([other])                       # a model of another node
    vlm = models.cached(("qwen3-vl", "tiny"), lambda: comfy.manage(_TransformersLike(), name="vlm"))
    vlm.use()
    assert models.loaded_models()["comfyui_loaded"] == ["vlm"] and models.loaded_models()["cached"] == {"qwen3-vl": 1}
    summary = models.unload_all(unload_from_comfyui=True)   # vlm still held here, as a node output would
    assert summary["unloaded"] == 1 and summary["still_referenced"] == ["vlm"] and summary["cached"] == {}
    assert [lm.model for lm in mm.current_loaded_models] == [other], "other nodes' models stay loaded"
    alive = weakref.ref(vlm)
    del vlm
    gc.collect()
    assert alive() is None, "nothing of the pack holds the model once its user lets go"
    assert mm.empty_cache_calls >= 1


def test_dropping_the_cache_from_a_request_frees_what_nothing_else_holds_without_touching_comfyuis_list(comfyui):
    _, mm = comfyui
    models.cached(("sam", "tiny"), lambda: comfy.manage(_TransformersLike(), name="sam")).use()
    assert len(mm.current_loaded_models) == 1
    summary = models.unload_all()                     # what /free and the panel's button do
    assert summary["unloaded"] == 0 and "sam" not in summary["still_referenced"] + summary["managed"]
    assert summary["comfyui_loaded"] == [] and len(mm.current_loaded_models) == 1, \
        "ComfyUI's list is left to ComfyUI: its entry now points at a freed model"
    assert mm.current_loaded_models[0].model is None


def test_outside_comfyui_a_model_not_kept_loaded_is_parked_after_use():
    m = comfy.manage(weights(2, 2), torch.device("cpu"), keep_loaded=False)
    assert m.patcher is None and m.use() == torch.device("cpu")
    m.done()
    assert next(m.module.parameters()).device == m.offload


def test_the_unload_node_and_the_route_report_nothing_left(pack, comfyui):
    pack_models = __import__(f"{pack.__name__}.respec.models", fromlist=["_"])
    pack_comfy = __import__(f"{pack.__name__}.respec.comfy", fromlist=["_"])
    pack_models.cached(("sam", "tiny"), lambda: pack_comfy.manage(weights(2, 2), name="sam")).use()
    node = pack.NODE_CLASS_MAPPINGS["ReSpecUnloadModels"]
    out = getattr(node, node.FUNCTION)()   # as ComfyUI calls a V3 node
    summary = json.loads(out.result[0])
    assert json.loads(out.ui["text"][0]) == summary
    assert summary["unloaded"] == 1 and summary["managed"] == [] and summary["cached"] == {}
    pack_web = __import__(f"{pack.__name__}.respec.web", fromlist=["_"])
    assert pack_web.models_status().json() == {"cached": {}, "managed": [], "comfyui_loaded": []}
