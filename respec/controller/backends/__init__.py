"""Controller backends behind one interface.

A backend has a `name` and `chat(parts, *, system=None, max_new_tokens=768, json_schema=None)
-> str`, where `parts` (text and PIL images, interleaved) form one user message. Kinds:
"qwen3-vl" and "internvl3" (local transformers models) and "openai" (any OpenAI-compatible
chat-completions endpoint). `load_backend` caches through respec.models.cached, so the same
settings give the same loaded object across prompts.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from ...errors import InputError
from ... import models

KINDS = ("qwen3-vl", "internvl3", "openai")
DEFAULT_MODELS = {
    "qwen3-vl": "Qwen/Qwen3-VL-8B-Instruct",
    "internvl3": "OpenGVLab/InternVL3-8B-hf",
    "openai": "Qwen/Qwen3-VL-8B-Instruct",
}


@runtime_checkable
class VLMBackend(Protocol):
    """What plan_turn (and the S_IF judge) need from a controller."""

    name: str

    def chat(self, parts: list, *, system: str | None = None, max_new_tokens: int = 768,
             json_schema: dict | None = None) -> str:
        """One request (text and images in `parts`) -> the answer text; `json_schema` constrains it where supported."""
        ...


def _key(kind: str, model: str, options: dict) -> tuple:
    return (kind, model) + tuple(sorted((k, repr(v)) for k, v in options.items()))


def load_backend(kind: str, model: str | None = None, **options) -> VLMBackend:
    """A loaded, cached controller backend.

    kind "qwen3-vl" / "internvl3": model is a Hugging Face id, a folder in ComfyUI's
    models/LLM, an absolute folder, or "tiny" / "tiny:<seed>" (a tiny random-weight model of
    that kind, built once; its text is noise: for checking an install); options: dtype, device, keep_loaded, allow_download,
    max_pixels, max_new_tokens, json_constrained ("auto" | True | False), json_max_string.
    kind "openai": model is the served model's name; options: base_url, api_key_env, timeout,
    retries, backoff, max_pixels, max_new_tokens, response_format, image_format, max_response_bytes."""
    kind = (kind or "").strip().lower()
    if kind not in KINDS:
        raise InputError(f"unknown controller backend {kind!r}; use one of {', '.join(KINDS)}")
    model = (model or "").strip() or DEFAULT_MODELS[kind]
    seed = models.tiny_seed(model, kind)   # "openai" has none: InputError
    if seed is not None:
        model = str(models.build_tiny(kind, seed))   # a saved tiny model folder, loaded like any folder
    if kind == "openai":
        from .openai_compat import OpenAICompatBackend, OpenAISettings
        key = _key(kind, model, options)
        return models.cached(key, lambda: _keyed(OpenAICompatBackend(model=model, settings=OpenAISettings(**options)),
                                                 key))
    from .transformers_vlm import LocalVLMSettings, TransformersVLM, resolve_model_dir
    folder = resolve_model_dir(kind, model, options.get("allow_download"))
    key = _key(kind, folder, {k: v for k, v in options.items() if k != "allow_download"})
    return models.cached(key, lambda: _keyed(TransformersVLM(kind, folder, LocalVLMSettings(**options), source=model),
                                             key))


def _keyed(backend, key: tuple):
    backend.cache_key = key  # so unload_backend can find its cache entry
    return backend


def unload_backend(backend: VLMBackend) -> bool:
    """Forget a loaded backend: drop it from the model cache and free its weights."""
    dropped = models.CACHE.drop(getattr(backend, "cache_key", None))
    if hasattr(backend, "release"):
        backend.release()
    return dropped


__all__ = ["KINDS", "DEFAULT_MODELS", "VLMBackend", "load_backend", "unload_backend"]
