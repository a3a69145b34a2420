"""The one bridge between the core and ComfyUI.

Nothing else in the pack imports ComfyUI. Every function here works in two worlds:
inside a ComfyUI server (folder_paths, comfy.utils.ProgressBar, model management and the
PromptServer exist) and standalone (CLI, tests), where it falls back to tqdm, a configurable
models directory and in-process listeners.
"""
from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import Interrupted

log = logging.getLogger("respec")

# Model folder kinds this pack uses -> folder name under ComfyUI's models/ (and under the
# standalone models dir). Standard ComfyUI names where one exists.
MODEL_FOLDERS = {
    "diffusion_models": "diffusion_models",
    "text_encoders": "text_encoders",
    "vae": "vae",
    "diffusers": "diffusers",      # whole diffusers pipeline folders
    "LLM": "LLM",                  # VLM controllers (transformers folders)
    "sams": "sams",                # segment-anything checkpoints
    "ultralytics": "ultralytics",  # YOLO-World weights
    "respec_metrics": "respec_metrics",  # LPIPS trunk, CLIP weights for scoring
}


def _try_import(name: str):
    try:
        return __import__(name, fromlist=["_"])
    except Exception:  # ComfyUI absent, or a partial install: behave as standalone
        return None


def _folder_paths():
    return _try_import("folder_paths")


def in_comfyui() -> bool:
    """True when running inside a ComfyUI process (its folder_paths module is importable)."""
    return _folder_paths() is not None and _try_import("comfy.model_management") is not None


# --------------------------------------------------------------------------- directories

def standalone_home() -> Path:
    """Where the pack keeps its files outside ComfyUI (RESPEC_HOME, else ~/.cache/respec)."""
    return Path(os.environ.get("RESPEC_HOME") or Path.home() / ".cache" / "respec")


def standalone_models_dir() -> Path:
    """Models directory outside ComfyUI (RESPEC_MODELS_DIR, else <home>/models)."""
    return Path(os.environ.get("RESPEC_MODELS_DIR") or standalone_home() / "models")


def user_dir() -> Path:
    """Directory for the pack's persistent data: ComfyUI's user dir, else the standalone home."""
    fp = _folder_paths()
    if fp is not None and hasattr(fp, "get_user_directory"):
        return Path(fp.get_user_directory()) / "respec"
    return standalone_home()


def output_dir() -> Path:
    """Where results and reports go: ComfyUI's output dir, else <home>/output."""
    fp = _folder_paths()
    if fp is not None and hasattr(fp, "get_output_directory"):
        return Path(fp.get_output_directory()) / "respec"
    return standalone_home() / "output"


def input_dir() -> Path:
    """ComfyUI's input folder (where uploads land), else <home>/input."""
    fp = _folder_paths()
    if fp is not None and hasattr(fp, "get_input_directory"):
        return Path(fp.get_input_directory())
    return standalone_home() / "input"


def register_model_folders() -> None:
    """Tell ComfyUI about the model folders this pack reads (idempotent; no-op standalone)."""
    fp = _folder_paths()
    if fp is None:
        return
    base = Path(fp.models_dir)
    for kind, folder in MODEL_FOLDERS.items():
        if kind in getattr(fp, "folder_names_and_paths", {}):
            continue
        # An empty extension set matches every file: these folders hold folders and .pt/.pth.
        fp.folder_names_and_paths[kind] = ([str(base / folder)], set())


def model_search_dirs(kind: str) -> list[Path]:
    """Every directory searched for models of `kind`, in priority order."""
    if kind not in MODEL_FOLDERS:
        raise KeyError(f"unknown model folder kind {kind!r}; known: {sorted(MODEL_FOLDERS)}")
    fp = _folder_paths()
    dirs: list[Path] = []
    if fp is not None:
        register_model_folders()
        try:
            dirs += [Path(p) for p in fp.get_folder_paths(kind)]
        except Exception:
            pass
    dirs.append(standalone_models_dir() / MODEL_FOLDERS[kind])
    seen, unique = set(), []
    for d in dirs:
        if str(d) not in seen:
            seen.add(str(d))
            unique.append(d)
    return unique


def list_models(kind: str) -> list[str]:
    """Names (files and folders, relative to their search dir) available for `kind`."""
    names: list[str] = []
    for d in model_search_dirs(kind):
        if d.is_dir():
            for p in sorted(d.iterdir()):
                # ComfyUI ships empty "put_..._here" marker files in its model folders.
                if not p.name.startswith(".") and not (p.name.startswith("put_") and p.name.endswith("_here")):
                    names.append(p.name)
    return sorted(set(names))


# --------------------------------------------------------------------------- progress

_interrupt = threading.Event()


def request_interrupt() -> None:
    """Standalone: ask the running job to stop at its next check (Ctrl-C handlers, tests)."""
    _interrupt.set()


def clear_interrupt() -> None:
    _interrupt.clear()


def check_interrupted() -> None:
    """Raise if the user cancelled: ComfyUI's own exception inside ComfyUI, Interrupted outside."""
    mm = _try_import("comfy.model_management") if in_comfyui() else None
    if mm is not None:
        mm.throw_exception_if_processing_interrupted()
    if _interrupt.is_set():
        _interrupt.clear()
        raise Interrupted("Interrupted by the user.")


class Progress:
    """A progress bar: ComfyUI's (each update is also an interrupt check) or tqdm."""

    def __init__(self, total: int, desc: str = ""):
        self.total, self.n = int(total), 0
        self._comfy = None
        self._tqdm = None
        if in_comfyui():
            utils = _try_import("comfy.utils")
            if utils is not None:
                self._comfy = utils.ProgressBar(self.total)
        if self._comfy is None:
            try:
                from tqdm.auto import tqdm
                self._tqdm = tqdm(total=self.total, desc=desc, leave=False,
                                  disable=os.environ.get("RESPEC_PROGRESS", "1") == "0")
            except ImportError:
                self._tqdm = None

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._comfy is not None:
            self._comfy.update(n)
        if self._tqdm is not None:
            self._tqdm.update(n)
        check_interrupted()

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def progress(total: int, desc: str = "") -> Iterator[Progress]:
    """`with progress(n, "editing") as bar: ... bar.update()`."""
    bar = Progress(total, desc)
    try:
        yield bar
    finally:
        bar.close()


# --------------------------------------------------------------------------- events & routes

_listeners: list[Callable[[str, dict], None]] = []


def add_listener(fn: Callable[[str, dict], None]) -> Callable[[], None]:
    """Receive every event sent with send_event (standalone UIs, tests). Returns a remover."""
    _listeners.append(fn)
    return lambda: _listeners.remove(fn) if fn in _listeners else None


def send_event(event: str, data: dict) -> None:
    """Push `respec.<event>` to the browser (websocket) and to local listeners. Never raises."""
    name = event if event.startswith("respec.") else f"respec.{event}"
    for fn in list(_listeners):
        try:
            fn(name, data)
        except Exception:
            log.exception("event listener failed for %s", name)
    server = _prompt_server()
    if server is not None:
        try:
            server.send_sync(name, data)
        except Exception:
            log.exception("could not send %s to the browser", name)


def _prompt_server():
    mod = _try_import("server")
    inst = getattr(getattr(mod, "PromptServer", None), "instance", None) if mod else None
    return inst


def routes():
    """The PromptServer's aiohttp route table, or None outside ComfyUI."""
    server = _prompt_server()
    return getattr(server, "routes", None) if server is not None else None


# --------------------------------------------------------------------------- devices & memory

def torch_device():
    """The device models should run on: ComfyUI's choice inside ComfyUI, else cuda/mps/cpu."""
    import torch
    if in_comfyui():
        mm = _try_import("comfy.model_management")
        if mm is not None:
            return mm.get_torch_device()
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def offload_device():
    """Where idle weights are parked (ComfyUI's offload device, else the CPU)."""
    import torch
    if in_comfyui():
        mm = _try_import("comfy.model_management")
        if mm is not None:
            return mm.unet_offload_device()
    return torch.device("cpu")


def register_with_model_manager(module: Any, load_device=None, offload=None) -> Any:
    """Let ComfyUI's memory manager load/evict a torch module ("Free memory" unloads it too).

    Returns ComfyUI's ModelPatcher inside ComfyUI (hand it to `load_models`) and None outside.
    """
    if not in_comfyui():
        return None
    patcher_mod = _try_import("comfy.model_patcher")
    if patcher_mod is None:
        return None
    load_device = load_device or torch_device()
    offload = offload or offload_device()
    try:
        return patcher_mod.ModelPatcher(module, load_device=load_device, offload_device=offload)
    except Exception:
        log.exception("ComfyUI's ModelPatcher refused the module; memory management disabled for it")
        return None


def load_models(patchers: list[Any]) -> None:
    """Ask ComfyUI to put these registered models on the GPU (freeing others if needed)."""
    patchers = [p for p in patchers if p is not None]
    if not patchers or not in_comfyui():
        return
    mm = _try_import("comfy.model_management")
    if mm is not None:
        mm.load_models_gpu(patchers)
