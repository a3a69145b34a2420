"""The one bridge between the core and ComfyUI.

Nothing else in the pack imports ComfyUI. Every function here works in two worlds:
inside a ComfyUI server (folder_paths, comfy.utils.ProgressBar, model management and the
PromptServer exist) and standalone (CLI, tests), where it falls back to tqdm, a configurable
models directory and in-process listeners.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

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


def _model_management():
    """ComfyUI's comfy.model_management inside a ComfyUI process, else None: the one place the
    pack reaches it (every memory, device and interrupt call below goes through here)."""
    return _try_import("comfy.model_management") if _folder_paths() is not None else None


def in_comfyui() -> bool:
    """True when running inside a ComfyUI process (folder_paths and comfy.model_management import)."""
    return _model_management() is not None


# --------------------------------------------------------------------------- node schema

def _node_api():
    """ComfyUI's V3 node schema (`comfy_api.latest`: io, ComfyExtension) inside a server, else the
    pack's stand-in with the same surface (respec/comfy_io.py)."""
    latest = _try_import("comfy_api.latest") if _folder_paths() is not None else None
    if latest is not None and hasattr(latest, "io"):
        return latest.io, latest.ComfyExtension
    from . import comfy_io
    return comfy_io, comfy_io.ComfyExtension


io, ComfyExtension = _node_api()


def node_schema(**fields):
    """io.Schema(**fields), less the fields this ComfyUI's Schema lacks and that only add to the
    listing (0.8.0 has no search_aliases: its search finds the display name and the id)."""
    known = {f.name for f in dataclasses.fields(io.Schema)}
    optional = {"search_aliases"}
    unknown = set(fields) - known - optional
    if unknown:
        raise TypeError(f"io.Schema has no field {sorted(unknown)}")
    return io.Schema(**{k: v for k, v in fields.items() if k in known})


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


# Kinds whose models are folders (a diffusers pipeline, a transformers checkpoint), found by the
# file that marks a model's root. ComfyUI lists files only, so the folders are found from those.
FOLDER_MARKERS = {"diffusers": "model_index.json", "LLM": "config.json"}


def register_model_folders() -> None:
    """Tell ComfyUI about the model folders this pack reads (idempotent; no-op standalone).

    Goes through `folder_paths.add_model_folder_path`, so folders the user added for the same
    names in extra_model_paths.yaml stay (and stay first).
    """
    fp = _folder_paths()
    if fp is None:
        return
    base = Path(fp.models_dir)
    for kind, folder in MODEL_FOLDERS.items():
        fp.add_model_folder_path(kind, str(base / folder))


def model_search_dirs(kind: str) -> list[Path]:
    """Every directory searched for models of `kind`, in priority order.

    Inside ComfyUI: the folders registered for `kind` (models/<kind> and extra_model_paths.yaml).
    Standalone: <models dir>/<kind>.
    """
    if kind not in MODEL_FOLDERS:
        raise KeyError(f"unknown model folder kind {kind!r}; known: {sorted(MODEL_FOLDERS)}")
    fp = _folder_paths()
    if fp is None:
        return [standalone_models_dir() / MODEL_FOLDERS[kind]]
    register_model_folders()
    unique: list[Path] = []
    for d in fp.get_folder_paths(kind):
        if Path(d) not in unique:
            unique.append(Path(d))
    return unique


def _is_marker_file(name: str) -> bool:
    """ComfyUI ships empty "put_..._here" files in its model folders; hidden files are not models."""
    base = name.rsplit("/", 1)[-1]
    return base.startswith(".") or (base.startswith("put_") and base.endswith("_here"))


def _walk_files(root: Path) -> list[str]:
    """Files under `root`, recursively, as relative POSIX paths (symlinks followed, .git skipped)."""
    found = []
    for dirpath, subdirs, files in os.walk(root, followlinks=True):
        subdirs[:] = [d for d in subdirs if d != ".git"]
        rel = Path(dirpath).relative_to(root)
        found += [(rel / f).as_posix() for f in files]
    return found


def _model_files(kind: str) -> list[str]:
    """Every file in the folders of `kind`, relative to its folder (ComfyUI's get_filename_list inside
    ComfyUI, which also filters by the folder's extensions)."""
    fp = _folder_paths()
    if fp is not None and kind not in FOLDER_MARKERS:
        register_model_folders()
        return [n.replace(os.sep, "/") for n in fp.get_filename_list(kind)]
    names: list[str] = []
    for d in model_search_dirs(kind):
        if d.is_dir():
            names += _walk_files(d)
    return names


def list_models(kind: str) -> list[str]:
    """Names available for `kind`, relative to their folder (sub-folders included, e.g. "flux/ae.safetensors").

    For folder kinds (FOLDER_MARKERS) the names are model folders: those holding the marker file
    and not inside another model folder.
    """
    files = [n for n in _model_files(kind) if not _is_marker_file(n)]
    marker = FOLDER_MARKERS.get(kind)
    if marker is None:
        return sorted(set(files))
    roots = sorted({n[: -len(marker)].rstrip("/") for n in files if n == marker or n.endswith("/" + marker)})
    roots = [r for r in roots if r]
    return [r for r in roots if not any(r.startswith(other + "/") for other in roots if other != r)]


def _inside(folder: Path, name: str) -> Path:
    """`name` joined under `folder` the way ComfyUI does it: a leading "/" or ".." cannot leave it."""
    rel = os.path.relpath(os.path.join("/", name), "/")
    return folder / rel


def find_model(kind: str, name: str, want: str = "any") -> Path | None:
    """The file or folder `name` (relative to a folder of `kind`) or None when no folder has it.

    want: "file", "dir" or "any". Files go through ComfyUI's get_full_path_or_raise inside
    ComfyUI; names cannot climb out of the registered folders.
    """
    fp = _folder_paths()
    if fp is not None and want != "dir":
        register_model_folders()
        try:
            return Path(fp.get_full_path_or_raise(kind, name))
        except FileNotFoundError:
            if want == "file":
                return None
    for d in model_search_dirs(kind):
        c = _inside(d, name)
        if (want == "file" and c.is_file()) or (want == "dir" and c.is_dir()) or (want == "any" and c.exists()):
            return c
    return None


# --------------------------------------------------------------------------- progress

_interrupt = threading.Event()


def request_interrupt() -> None:
    """Standalone: ask the running job to stop at its next check (Ctrl-C handlers, tests)."""
    _interrupt.set()


def clear_interrupt() -> None:
    """Forget a cancel request (a new run starts uncancelled)."""
    _interrupt.clear()


def interrupt_requested() -> bool:
    """Whether the user cancelled, without raising or clearing it (for a watcher that must stop
    work in flight first; check_interrupted then raises)."""
    mm = _model_management()
    if mm is not None and getattr(mm, "processing_interrupted", None) is not None and mm.processing_interrupted():
        return True
    return _interrupt.is_set()


def check_interrupted() -> None:
    """Raise if the user cancelled: ComfyUI's own exception inside ComfyUI, Interrupted outside."""
    mm = _model_management()
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
        """Advance by n steps, in ComfyUI's progress bar and in the terminal's."""
        self.n += n
        if self._comfy is not None:
            self._comfy.update(n)
        if self._tqdm is not None:
            self._tqdm.update(n)
        check_interrupted()

    def close(self) -> None:
        """Close the terminal bar (ComfyUI's needs no closing)."""
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
    mm = _model_management()
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
    mm = _model_management()
    if mm is not None:
        return mm.unet_offload_device()
    return torch.device("cpu")


_MANAGED: "weakref.WeakSet[ManagedModel]" = weakref.WeakSet()
_free_listeners: list[Callable[[], None]] = []


def _holder(module):
    """`module` inside a plain torch Module: ComfyUI's ModelPatcher writes a `device` attribute onto the
    model it manages, which transformers and diffusers models expose as a read-only property."""
    import torch

    class ReSpecManagedModule(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.device = offload_device()

    return ReSpecManagedModule(module)


class ManagedModel:
    """A torch module under ComfyUI's memory manager inside ComfyUI, placed by hand outside it.

    Call `use()` before running the module (inside ComfyUI: `load_models_gpu`, which may evict other
    models to make room; outside: moved to the run device) and `done()` after (outside ComfyUI, with
    keep_loaded off, the weights go back to the offload device; inside, ComfyUI decides).
    `/free`, ComfyUI's "Unload models" and the "Unload ReSpec models" node unload it.
    """

    def __init__(self, module, device=None, *, keep_loaded: bool = True, name: str = "", movable: bool = True):
        self.module, self.name, self.keep_loaded = module, name or type(module).__name__, bool(keep_loaded)
        self.device = device if device is not None else torch_device()
        self.offload = offload_device()
        self.movable = bool(movable)   # False: weights fixed where they were loaded (e.g. bitsandbytes)
        self.patcher = None
        if self.movable and in_comfyui():
            patcher_mod = _try_import("comfy.model_patcher")
            self.patcher = patcher_mod.ModelPatcher(_holder(module), load_device=self.device,
                                                    offload_device=self.offload)
        elif self.movable:
            module.to(self.device if self.keep_loaded else self.offload)
        _MANAGED.add(self)

    def use(self):
        """Put the weights on the run device (before a call); returns that device."""
        if self.patcher is not None:
            use_models([self])
        elif self.movable and _module_device(self.module) != self.device:
            self.module.to(self.device)
        return self.device

    def done(self) -> None:
        """After a call: outside ComfyUI, park the weights when they are not kept loaded."""
        if self.patcher is None and self.movable and not self.keep_loaded and _module_device(self.module) != self.offload:
            self.module.to(self.offload)
            empty_device_cache()

    def __repr__(self) -> str:
        return f"<ManagedModel {self.name} on {self.device}{' (ComfyUI)' if self.patcher is not None else ''}>"


def _module_device(module):
    p = next(module.parameters(), None)
    return p.device if p is not None else None


def manage(module, device=None, *, keep_loaded: bool = True, name: str = "", movable: bool = True) -> ManagedModel | None:
    """The ManagedModel of `module` (made on first call; one per module, so a model shared by two
    loaders, like the CLIP of the masker and the scorer, has one patcher). None for None."""
    if module is None:
        return None
    existing = module.__dict__.get("_respec_managed")
    if existing is not None:
        return existing
    managed = ManagedModel(module, device, keep_loaded=keep_loaded, name=name, movable=movable)
    module.__dict__["_respec_managed"] = managed
    return managed


def use_models(managed) -> None:
    """`use()` several managed models at once (one load_models_gpu call inside ComfyUI)."""
    managed = [m for m in managed if m is not None]
    patchers = [m.patcher for m in managed if m.patcher is not None]
    if patchers:
        # Full loads: these modules are not built from ComfyUI's ops, so a partial (low-VRAM) load
        # would leave some layers on the CPU; ComfyUI evicts other models to make room instead.
        _model_management().load_models_gpu(patchers, force_full_load=True)
    for m in managed:
        if m.patcher is None:
            m.use()


def managed_models() -> list[ManagedModel]:
    """The pack's managed models still alive (anything still referencing them keeps them here)."""
    return list(_MANAGED)


def comfy_loaded_models() -> list[str]:
    """Names of the pack's models that ComfyUI's memory manager holds loaded right now ([] outside)."""
    mm = _model_management()
    if mm is None:
        return []
    ours = {id(m.patcher): m.name for m in list(_MANAGED) if m.patcher is not None}
    return [ours[id(lm.model)] for lm in list(mm.current_loaded_models) if lm.model is not None and id(lm.model) in ours]


def on_free(fn: Callable[[], None]) -> Callable[[], None]:
    """Call `fn` when the pack's models are released (/free, the Unload node). Returns a remover."""
    _free_listeners.append(fn)
    return lambda: _free_listeners.remove(fn) if fn in _free_listeners else None


def release_models(unload_from_comfyui: bool = False) -> dict:
    """Drop the pack's caches so nothing of the pack references its models any more (what /free,
    the panel's button and the "Unload ReSpec models" node do); other nodes' models stay loaded.

    unload_from_comfyui: also take the pack's models out of ComfyUI's loaded-model list. Only
    ComfyUI's prompt worker (a node running) may change that list; from any other thread (an
    HTTP handler) leave it to ComfyUI, whose list holds models weakly: a model nothing references
    any more is freed and its entry cleaned up by ComfyUI itself. Returns a summary.
    """
    for fn in list(_free_listeners):
        try:
            fn()
        except Exception:
            log.exception("a model-release listener failed")
    unloaded = 0
    mm = _model_management() if unload_from_comfyui else None
    if mm is not None:
        ours = {id(m.patcher) for m in list(_MANAGED) if m.patcher is not None}
        loaded = mm.current_loaded_models
        for i in range(len(loaded) - 1, -1, -1):
            if loaded[i].model is not None and id(loaded[i].model) in ours:
                loaded.pop(i).model_unload()
                unloaded += 1
    import gc
    gc.collect()
    empty_device_cache()
    return {"unloaded": unloaded, "still_referenced": [m.name for m in managed_models()]}


def empty_device_cache() -> None:
    """Give freed GPU memory back (ComfyUI's soft_empty_cache inside ComfyUI)."""
    mm = _model_management()
    if mm is not None:
        mm.soft_empty_cache()
        return
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def server_app():
    """The PromptServer's aiohttp application, or None outside ComfyUI."""
    server = _prompt_server()
    return getattr(server, "app", None) if server is not None else None


def free_device_memory(device) -> int | None:
    """Free bytes on `device` (ComfyUI's view inside ComfyUI); None for the CPU or when unknown."""
    mm = _model_management()
    if getattr(device, "type", str(device)) == "cpu":
        return None
    try:
        if mm is not None:
            return int(mm.get_free_memory(device))
        import torch
        return int(torch.cuda.mem_get_info(device)[0]) if torch.cuda.is_available() else None
    except Exception:
        return None
