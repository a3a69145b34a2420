"""Stand-ins for the three ComfyUI modules the bridge (respec/comfy.py) talks to, written from
ComfyUI 0.8's documented behaviour: `folder_paths` (registered folders per kind, extension
filters, recursive listing, get_full_path_or_raise that cannot leave a folder) and
`comfy.model_management` / `comfy.model_patcher` (a list of loaded models; a patcher writes a
`device` attribute onto the model it manages; unloading moves the weights to the offload device).

`install(monkeypatch, models_dir)` puts them into sys.modules for one test. The real ComfyUI is
exercised by scripts/comfyui/check_in_comfyui.py.
"""
from __future__ import annotations

import os
import sys
import types
import weakref
from pathlib import Path


def _folder_paths(models_dir: Path):
    fp = types.ModuleType("folder_paths")
    fp.models_dir = str(models_dir)
    exts = {".safetensors", ".pt", ".pth", ".ckpt", ".bin"}
    fp.folder_names_and_paths = {
        "vae": ([str(models_dir / "vae")], exts),
        "diffusion_models": ([str(models_dir / "unet"), str(models_dir / "diffusion_models")], exts),
        "text_encoders": ([str(models_dir / "text_encoders")], exts),
        "diffusers": ([str(models_dir / "diffusers")], ["folder"]),
    }
    fp.calls = []

    def add_model_folder_path(name, path, is_default=False):
        fp.calls.append(("add_model_folder_path", name, path))
        if name in fp.folder_names_and_paths:
            paths = fp.folder_names_and_paths[name][0]
            if path not in paths:
                paths.insert(0, path) if is_default else paths.append(path)
        else:
            fp.folder_names_and_paths[name] = ([path], set())

    def get_folder_paths(name):
        return list(fp.folder_names_and_paths[name][0])

    def get_filename_list(name):
        fp.calls.append(("get_filename_list", name))
        paths, ext = fp.folder_names_and_paths[name]
        out = set()
        for root in paths:
            for dirpath, _, files in os.walk(root, followlinks=True):
                for f in files:
                    rel = os.path.relpath(os.path.join(dirpath, f), root)
                    if not ext or os.path.splitext(f)[1].lower() in ext:
                        out.add(rel)
        return sorted(out)

    def get_full_path_or_raise(name, filename):
        fp.calls.append(("get_full_path_or_raise", name, filename))
        filename = os.path.relpath(os.path.join("/", filename), "/")
        for root in fp.folder_names_and_paths.get(name, ([], None))[0]:
            full = os.path.join(root, filename)
            if os.path.isfile(full):
                return full
        raise FileNotFoundError(f"Model in folder '{name}' with filename '{filename}' not found.")

    fp.add_model_folder_path = add_model_folder_path
    fp.get_folder_paths = get_folder_paths
    fp.get_filename_list = get_filename_list
    fp.get_full_path_or_raise = get_full_path_or_raise
    return fp


class _LoadedModel:
    """Like ComfyUI's: the patcher is held weakly (a model nothing else references is freed)."""

    def __init__(self, patcher):
        self._model = weakref.ref(patcher)

    @property
    def model(self):
        return self._model()

    def model_unload(self, memory_to_free=None, unpatch_weights=True):
        self.model.model.to(self.model.offload_device)
        self.model.model.device = self.model.offload_device
        return True


def _comfy_modules():
    import torch
    mm = types.ModuleType("comfy.model_management")
    mm.current_loaded_models = []
    mm.load_calls = []
    mm.empty_cache_calls = 0
    mm.get_torch_device = lambda: torch.device("cpu")
    mm.unet_offload_device = lambda: torch.device("cpu")
    mm.get_free_memory = lambda device=None, torch_free_too=False: 8 << 30
    mm.throw_exception_if_processing_interrupted = lambda: None

    def load_models_gpu(models, memory_required=0, force_patch_weights=False, minimum_memory_required=None,
                        force_full_load=False):
        mm.load_calls.append(([id(m) for m in models], force_full_load))
        for m in models:
            if not any(lm.model is m for lm in mm.current_loaded_models):
                m.model.to(m.load_device)
                m.model.device = m.load_device   # what ComfyUI's ModelPatcher.load does
                mm.current_loaded_models.insert(0, _LoadedModel(m))

    def soft_empty_cache(force=False):
        mm.empty_cache_calls += 1

    mm.load_models_gpu = load_models_gpu
    mm.soft_empty_cache = soft_empty_cache

    mp = types.ModuleType("comfy.model_patcher")

    class ModelPatcher:
        def __init__(self, model, load_device, offload_device, size=0, weight_inplace_update=False):
            self.model, self.load_device, self.offload_device = model, load_device, offload_device
            if getattr(self.model, "device", None) is None:
                self.model.device = offload_device

    mp.ModelPatcher = ModelPatcher
    pkg = types.ModuleType("comfy")
    pkg.__path__ = []
    pkg.model_management, pkg.model_patcher = mm, mp
    return pkg, mm, mp


def install(monkeypatch, models_dir: Path):
    """Make the bridge see a ComfyUI with its models folder at `models_dir`; returns (folder_paths, mm)."""
    fp = _folder_paths(models_dir)
    pkg, mm, mp = _comfy_modules()
    monkeypatch.setitem(sys.modules, "folder_paths", fp)
    monkeypatch.setitem(sys.modules, "comfy", pkg)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    monkeypatch.setitem(sys.modules, "comfy.model_patcher", mp)
    return fp, mm
