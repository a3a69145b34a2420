"""Where weights live and the one cache that keeps them loaded across prompts.

Nodes and the runner ask for models through `cached(...)`; the key holds everything that
changes the weights or where they sit (path, dtype, device, offload mode), so a second
request with the same settings returns the same object and a changed setting loads anew.

Every stage's loader takes a model source and finds it here: `resolve` for files, folders and
Hugging Face ids (the rule "download only when allowed" is written there, once), `tiny_seed` and
`build_tiny` for "tiny" / "tiny:<seed>" (respec/tiny's one registry of tiny builders).
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

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
        """The cached object for `key`, calling `loader` once to make it when absent."""
        with self._lock:
            if key in self._items:
                return self._items[key]
            obj = loader()
            self.loads += 1
            self._items[key] = obj
            return obj

    def drop(self, key: Hashable) -> bool:
        """Forget `key`'s object; whether there was one."""
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
        """Forget every cached object."""
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


# --------------------------------------------------------------------------- model sources
# A model source: a file or folder (an absolute path, or a name in the model folders of the
# loader's kind), a Hugging Face id ("org/name"), or "tiny" / "tiny:<seed>".

TINY = "tiny"


def tiny_seed(source: Any, kind: str | None = None) -> int | None:
    """The seed of a "tiny" / "tiny:<seed>" model source: a tiny random-weight model built in code
    (respec/tiny), one source among files, folders and hub ids that every stage's loader takes.
    None for any other source. With `kind`, a tiny source for a kind that has no tiny model raises
    InputError saying why."""
    if not isinstance(source, str):
        return None
    text = source.strip().lower()
    if text == TINY:
        seed = 0
    elif not text.startswith(TINY + ":"):
        return None
    else:
        try:
            seed = int(text[len(TINY) + 1:])
        except ValueError:
            raise InputError(f"model source {source!r}: write {TINY} or {TINY}:<seed> (e.g. {TINY}:0)") from None
    if kind is not None:
        _tiny_builder(kind)
    return seed


def _tiny_builder(kind: str) -> Callable[[int], Any]:
    from .tiny import NO_TINY, TINY_BUILDERS
    if kind in NO_TINY:
        raise InputError(NO_TINY[kind])
    if kind not in TINY_BUILDERS:
        raise InputError(f"there is no tiny model of kind {kind!r}; tiny models: {', '.join(sorted(TINY_BUILDERS))}")
    return TINY_BUILDERS[kind]


def build_tiny(kind: str, seed: int) -> Any:
    """The tiny random-weight stand-in of a `kind` model for `seed`, built anew (the caller caches
    it): what that kind's loader takes in place of real weights (respec/tiny's TINY_BUILDERS)."""
    return _tiny_builder(kind)(int(seed))


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


def is_hub_id(name: str) -> bool:
    """A Hugging Face id ("org/name"), as opposed to a file or folder name."""
    return name.count("/") == 1 and not Path(name).is_absolute()


def resolve(kind: str, name: str, how_to_get: str, *, want: str = "file", url: str | None = None,
            hub: bool = False, hub_files: Sequence[str] = (), hub_patterns: Sequence[str] | None = None,
            elsewhere: tuple[str, Callable[[str], Path | None]] | None = None,
            allow_download: bool | None = None) -> Path:
    """Where the model `name` of `kind` is on this machine, fetched there first only with consent.

    1. an absolute path, or a name in the model folders of `kind` (want: "file", "dir" or "any");
    2. a copy already on the machine: `elsewhere` = (where, find(file name) -> Path | None), e.g.
       torch's hub cache; for a Hugging Face id with `hub` or `hub_files`, the local HF cache;
    3. with consent (`allow_download`, else RESPEC_ALLOW_DOWNLOADS), a download: `url` into the first
       model folder of `kind` (not for an absolute path), or the hub id: its first `hub_files`
       entry, else a snapshot (only `hub_patterns` when given).
    A source with nowhere to download from raises MissingWeightsError (the file, every folder
    searched, how to get it); one that could be downloaded raises DownloadNotAllowedError with
    that message, where else it looked, and how to allow downloads.
    """
    try:
        return resolve_path(kind, name, how_to_get, want=want)
    except MissingWeightsError as missing:
        also: list[str] = []
        if elsewhere is not None:
            where, find = elsewhere
            copy = find(Path(name).name)
            if copy is not None:
                return copy
            also.append(where)
        if hub or hub_files:
            if not is_hub_id(name):
                raise
            try:
                import huggingface_hub
            except ImportError:
                raise missing from None
            for fname in hub_files:
                try:
                    return Path(huggingface_hub.hf_hub_download(name, fname, local_files_only=True))
                except Exception:
                    pass
            if not hub_files:
                try:
                    return Path(huggingface_hub.snapshot_download(name, local_files_only=True))
                except Exception:
                    pass
            also.append("the Hugging Face cache")

            def fetch() -> Path:
                log.info("downloading %s from the Hugging Face hub%s", name,
                         f" (only {', '.join(hub_patterns)})" if hub_patterns else "")
                if hub_files:
                    return Path(huggingface_hub.hf_hub_download(name, hub_files[0]))
                return Path(huggingface_hub.snapshot_download(name, allow_patterns=hub_patterns))
        elif url is not None and not Path(name).is_absolute():
            def fetch() -> Path:
                return download_weights(url, kind, Path(name).name)
        else:
            raise
        # The download rule, written once: no network without consent.
        if not downloads_allowed(allow_download):
            searched = f"It is not in {' or '.join(also)} either, and downloads" if also else "Downloads"
            raise DownloadNotAllowedError(
                f"{missing}\n{searched} are off: download it yourself or allow downloads "
                "(the loader's allow_download switch or RESPEC_ALLOW_DOWNLOADS=1).") from None
        return fetch()


def on_this_machine(kind: str, name: str) -> bool:
    """Whether the model `name` is here, without loading or fetching anything: a folder or file in the
    model folders of `kind`, or a Hugging Face id in the local cache."""
    if tiny_seed(name) is not None or comfy.find_model(kind, name, "any") is not None:
        return True
    if not is_hub_id(name):
        return False
    try:
        import huggingface_hub
        huggingface_hub.snapshot_download(name, local_files_only=True)
        return True
    except Exception:
        return False


INSTALLED_OPTION = "respec_installed"   # a drop-down's options key: the values on this machine (the panel marks them)


def listed(kind: str, known: Sequence[str]) -> list[str]:
    """Every value a loader's drop-down for `kind` offers: the `known` Hugging Face ids and the model
    folders of `kind` (installed_first orders them; a validation needs only this, no cache lookup)."""
    return list(known) + [n for n in comfy.list_models(kind) if n not in known]


def installed_first(kind: str, known: Sequence[str]) -> tuple[list[str], dict]:
    """A loader's drop-down for `kind`: what is on this machine first (the `known` Hugging Face ids in
    the local cache, then the model folders of `kind`), then the known ids that are not; with the
    options that say so: a tooltip line naming what is installed and INSTALLED_OPTION, the values
    installed, which the frontend extension shows beside each entry (the values stay the ids saved
    graphs use)."""
    every = listed(kind, known)
    here = [k for k in known if on_this_machine(kind, k)] + every[len(known):]
    absent = [k for k in known if k not in here]
    line = (f"Installed here: {', '.join(here)}." if here else "Nothing installed here yet.") + (
        f" Not installed: {', '.join(absent)} (a run fails at once unless allow_download is on)." if absent else "")
    return here + absent, {"tooltip": line, INSTALLED_OPTION: here}


def missing_words(check: Callable[[], Any]) -> str | None:
    """What a loader's run would fail with when its weights are not here and may not be downloaded:
    the words of the MissingWeightsError / DownloadNotAllowedError that `check` (a resolution that
    loads and fetches nothing) raises; None when it finds them."""
    try:
        check()
    except (MissingWeightsError, DownloadNotAllowedError) as e:
        return str(e)
    return None


def resolve_hf(repo_or_path: str, kind: str, allow_download: bool | None, how_to_get: str,
               patterns: Sequence[str] | None = None) -> str:
    """A local folder (absolute, or in the model folders of `kind`) or a Hugging Face id: from the
    local HF cache, else downloaded with consent (only `patterns` when given). Returns the folder."""
    return str(resolve(kind, repo_or_path, how_to_get, want="dir", hub=True, hub_patterns=patterns,
                       allow_download=allow_download))


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
