"""Where weights live and the one cache that keeps them loaded across prompts.

Nodes and the runner ask for models through `cached(...)`; the key holds everything that
changes the weights or where they sit (path, dtype, device, offload mode), so a second
request with the same settings returns the same object and a changed setting loads anew.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Hashable

from . import comfy
from .errors import CorruptWeightsError, DownloadNotAllowedError, InputError, MissingWeightsError

log = logging.getLogger("respec")


class ModelCache:
    """Thread-safe key -> loaded model map. Loading happens once per key."""

    def __init__(self):
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.RLock()
        self.loads = 0  # how many loader calls ran (tests and benchmarks read this)

    def get(self, key: Hashable, loader: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                return self._items[key]
            obj = loader()
            self.loads += 1
            self._items[key] = obj
            return obj

    def drop(self, key: Hashable) -> bool:
        with self._lock:
            return self._items.pop(key, None) is not None

    def drop_kind(self, kind: str) -> int:
        """Unload every entry whose key starts with `kind`."""
        with self._lock:
            keys = [k for k in self._items if isinstance(k, tuple) and k and k[0] == kind]
            for k in keys:
                del self._items[k]
            return len(keys)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __contains__(self, key) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


CACHE = ModelCache()
comfy.on_free(CACHE.clear)  # /free and the "Unload ReSpec models" node drop every cached model


def loaded_models() -> dict:
    """What the pack holds now: cache entries per kind, live managed models, and those ComfyUI has
    loaded on its device (the panel and `GET /respec/models` show this)."""
    import gc
    gc.collect()   # managed models sit in a weak set: collect cycles so only referenced ones remain
    with CACHE._lock:
        kinds = [k[0] for k in CACHE._items if isinstance(k, tuple) and k]
    per_kind: dict[str, int] = {}
    for k in kinds:
        per_kind[str(k)] = per_kind.get(str(k), 0) + 1
    return {"cached": per_kind, "managed": sorted(m.name for m in comfy.managed_models()),
            "comfyui_loaded": sorted(comfy.comfy_loaded_models())}


def unload_all(unload_from_comfyui: bool = False) -> dict:
    """Drop the pack's model cache (what /free does) and, from a running node, unload its models from
    ComfyUI's memory manager (comfy.release_models); returns the summary and what is left."""
    summary = comfy.release_models(unload_from_comfyui)
    return {**summary, **loaded_models()}


def cached(key: tuple, loader: Callable[[], Any]) -> Any:
    """Load once per key (key[0] is the kind, e.g. "flux2", "qwen3-vl", "sam")."""
    return CACHE.get(key, loader)


TINY = "tiny"


def tiny_seed(source: Any) -> int | None:
    """The seed of a "tiny" / "tiny:<seed>" model source: a tiny random-weight model built in code
    (respec/tiny), one source among files, folders and hub ids that every stage's loader takes.
    None for any other source."""
    if not isinstance(source, str):
        return None
    text = source.strip().lower()
    if text == TINY:
        return 0
    if not text.startswith(TINY + ":"):
        return None
    try:
        return int(text[len(TINY) + 1:])
    except ValueError:
        raise InputError(f"model source {source!r}: write {TINY} or {TINY}:<seed> (e.g. {TINY}:0)") from None


def downloads_allowed(explicit: bool | None = None) -> bool:
    """Network use needs consent: a node/CLI flag, or RESPEC_ALLOW_DOWNLOADS=1."""
    if explicit is not None:
        return bool(explicit)
    return os.environ.get("RESPEC_ALLOW_DOWNLOADS", "0").lower() in ("1", "true", "yes")


def resolve_path(kind: str, name: str, how_to_get: str, want: str = "any") -> Path:
    """Find `name` (an absolute path, or a file/folder name inside the model folders of `kind`).

    want: "file", "dir" or "any". Raises MissingWeightsError naming every folder searched.
    """
    if not name:
        raise MissingWeightsError(f"(no {kind} model chosen)", [str(d) for d in comfy.model_search_dirs(kind)], how_to_get)
    p = Path(name).expanduser()
    if p.is_absolute():
        if (want == "file" and p.is_file()) or (want == "dir" and p.is_dir()) or (want == "any" and p.exists()):
            return p.resolve()
    else:
        found = comfy.find_model(kind, name, want)
        if found is not None:
            return found.resolve()
    looked = [str(p.parent)] if p.is_absolute() else [str(d) for d in comfy.model_search_dirs(kind)]
    raise MissingWeightsError(f"{name} ({kind})", looked, how_to_get)


def resolve_hf(repo_or_path: str, kind: str, allow_download: bool | None, how_to_get: str) -> str:
    """A local folder (absolute, or in the model folders of `kind`) or a Hugging Face id.

    Hugging Face ids resolve from the local HF cache; downloading needs consent.
    Returns a local directory path as a string.
    """
    try:
        return str(resolve_path(kind, repo_or_path, how_to_get, want="dir"))
    except MissingWeightsError as missing:
        if "/" not in repo_or_path or Path(repo_or_path).is_absolute() or repo_or_path.count("/") != 1:
            raise
        try:
            from huggingface_hub import snapshot_download
        except ImportError:
            raise missing from None
        try:
            return snapshot_download(repo_or_path, local_files_only=True)
        except Exception:
            pass
        if not downloads_allowed(allow_download):
            raise DownloadNotAllowedError(
                f"{repo_or_path} is not in a local folder or the Hugging Face cache, and downloads are off.\n"
                f"Looked in: {', '.join(missing.looked_in)}\n"
                f"Either download it yourself ({how_to_get}) or allow downloads "
                f"(the node's allow_download switch or RESPEC_ALLOW_DOWNLOADS=1).") from None
        log.info("downloading %s from the Hugging Face hub", repo_or_path)
        return snapshot_download(repo_or_path)


def load_torch_file(path: str | Path) -> Any:
    """torch.load with weights_only=True; a truncated or foreign file raises CorruptWeightsError."""
    import torch
    path = Path(path)
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CorruptWeightsError(
            f"Could not read {path} as torch weights ({type(e).__name__}: {e}). The file may be truncated "
            f"(size {path.stat().st_size if path.exists() else 0} bytes) or not a checkpoint; download it again.") from e


def load_safetensors(path: str | Path) -> dict:
    """Read a .safetensors file to CPU tensors; a bad file raises CorruptWeightsError."""
    from safetensors.torch import load_file
    path = Path(path)
    try:
        return load_file(str(path), device="cpu")
    except Exception as e:
        raise CorruptWeightsError(
            f"Could not read {path} as safetensors ({type(e).__name__}: {e}). The file may be truncated "
            f"(size {path.stat().st_size if path.exists() else 0} bytes); download it again.") from e


def read_json_object(path: str | Path, how_to_get: str) -> dict:
    """A model folder's JSON file (config.json, model_index.json ...) as a dict; an unreadable,
    truncated or non-object file raises CorruptWeightsError naming it and how to get it again."""
    import json
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CorruptWeightsError(f"{path} is damaged ({type(e).__name__}: {e}); it may be truncated. "
                                  f"{how_to_get}") from e
    if not isinstance(value, dict):
        raise CorruptWeightsError(f"{path} is not a JSON object (it holds a {type(value).__name__}); {how_to_get}")
    return value


def load_state_file(path: str | Path) -> dict:
    """A state dict from .safetensors or a torch checkpoint (weights_only)."""
    p = str(path)
    return load_safetensors(p) if p.endswith(".safetensors") else load_torch_file(p)


def torch_dtype(name: str):
    """'bf16' | 'fp16' | 'fp32' | 'auto' -> torch dtype ('auto': bf16 on CUDA, fp32 on CPU)."""
    import torch
    name = (name or "auto").lower()
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
    if name == "auto":
        dev = comfy.torch_device()
        return torch.bfloat16 if getattr(dev, "type", str(dev)) == "cuda" else torch.float32
    if name not in table:
        raise ValueError(f"unknown dtype {name!r}; use one of auto, bf16, fp16, fp32")
    return table[name]


def download_weights(url: str, kind: str, name: str) -> Path:
    """Fetch `url` into the first writable model folder of `kind` (only called with consent)."""
    import torch
    target_dir = comfy.model_search_dirs(kind)[0]
    target_dir.mkdir(parents=True, exist_ok=True)
    dest = target_dir / name
    log.info("downloading %s -> %s", url, dest)
    tmp = dest.with_suffix(dest.suffix + ".part")
    torch.hub.download_url_to_file(url, str(tmp), progress=True)
    tmp.replace(dest)
    return dest


def resolve_device(device):
    """None / "auto" -> the pack's device (ComfyUI's choice inside ComfyUI); else torch.device(device)."""
    import torch
    if device in (None, "", "auto"):
        return comfy.torch_device()
    return torch.device(device)
