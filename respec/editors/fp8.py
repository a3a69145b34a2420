"""ComfyUI's quantised single files, read for the pack's own (diffusers) editors.

ComfyUI ships FLUX.2 and text-encoder files in two fp8 layouts, both dequantised here on load
(weight = fp8 value x its scale, then the compute dtype), so the diffusers modules see ordinary
weights:
- "scaled fp8" (older): a `scaled_fp8` marker tensor, each quantised layer's `<layer>.weight` in
  float8 with a `<layer>.scale_weight` (and an optional `<layer>.scale_input`, unused here);
- "mixed precision" (ComfyUI 0.4+, e.g. the `*_fp8mixed` text encoders): `<layer>.weight` in
  float8 with `<layer>.weight_scale`, and the layer's format as JSON in `<layer>.comfy_quant`
  (or in the file's `_quantization_metadata` header); layers without it stay bf16.
Plain float8 weights without a scale are upcast as they are. NVFP4, GGUF and bitsandbytes NF4
files are refused with an error that names the file and points to ComfyUI's own loaders.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import models
from ..errors import CorruptWeightsError

FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
_SCALE_SUFFIXES = (".scale_weight", ".weight_scale")
_DROPPED_SUFFIXES = (".scale_input", ".input_scale", ".comfy_quant")
_NF4_MARKERS = ("absmax", "quant_map", "quant_state", "nested_absmax", "bitsandbytes__nf4", "bitsandbytes__fp4")

NATIVE_ROUTE = ("Use ComfyUI's own loaders for it (UNETLoader / CLIPLoader / VAELoader; GGUF through the "
                "ComfyUI-GGUF nodes) with the pack's 'Reference Latents (ReSpec)' node: the native workflows "
                "(the 'ReSpec chat' and 'ReSpec eval' files in workflows/) do this. Or choose the bf16 / fp16 / fp8 "
                "file here.")


class UnsupportedQuantisationError(CorruptWeightsError):
    """A single file quantised in a way the pack's diffusers editors cannot read."""


def _refuse(path, what: str) -> UnsupportedQuantisationError:
    return UnsupportedQuantisationError(f"{Path(path).name} is {what}, which the pack's diffusers editor cannot "
                                        f"load ({path}). {NATIVE_ROUTE}")


def read_single_file(path, component: str, dtype) -> tuple[dict, dict]:
    """A single file's tensors with any fp8 weights dequantised to `dtype`.

    Returns (state dict, info) where info says what was found: {"quantisation": "none" |
    "scaled fp8" | "mixed fp8", "layers": number of dequantised weights}.
    """
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        raise _refuse(path, "a GGUF file")
    try:
        sd = models.load_state_file(path)
    except CorruptWeightsError as e:
        raise CorruptWeightsError(f"FLUX.2 {component} file: {e}") from e
    return dequantise(sd, _header_metadata(path), dtype, path)


def _header_metadata(path: Path) -> dict:
    if path.suffix != ".safetensors":
        return {}
    try:
        from safetensors import safe_open
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception:
        return {}


def _layer_formats(sd: dict, metadata: dict) -> dict[str, str]:
    """layer prefix -> quantisation format, from comfy_quant tensors or the header."""
    formats: dict[str, str] = {}
    for k in [k for k in sd if k.endswith(".comfy_quant")]:
        try:
            conf = json.loads(bytes(sd[k].to("cpu").numpy().tolist()).decode("utf-8"))
        except Exception:
            conf = {}
        formats[k[: -len(".comfy_quant")]] = str(conf.get("format") or "unknown")
    if "_quantization_metadata" in metadata:
        try:
            layers = json.loads(metadata["_quantization_metadata"]).get("layers", {})
        except ValueError:
            layers = {}
        for layer, conf in layers.items():
            formats.setdefault(layer, str((conf or {}).get("format") or "unknown"))
    return formats


def dequantise(sd: dict, metadata: dict, dtype, path) -> tuple[dict, dict]:
    """Dequantise ComfyUI's fp8 layers of `sd` (see the module docstring); other tensors are kept."""
    import torch
    nf4 = next((k for k in sd if any(m in k for m in _NF4_MARKERS)), None)
    if nf4 is not None:
        raise _refuse(path, f"a bitsandbytes NF4/FP4 checkpoint (key {nf4})")
    formats = _layer_formats(sd, metadata)
    odd = {layer: f for layer, f in formats.items() if f not in FP8_FORMATS}
    if odd:
        layer, fmt = next(iter(odd.items()))
        raise _refuse(path, f"quantised as {fmt} (layer {layer})")
    legacy = any(k == "scaled_fp8" or k.endswith(".scaled_fp8") for k in sd)
    out, done = {}, 0
    for k, v in sd.items():
        if k == "scaled_fp8" or k.endswith((".scaled_fp8",) + _DROPPED_SUFFIXES + _SCALE_SUFFIXES):
            continue
        if k.endswith(".weight") and v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            layer = k[: -len(".weight")]
            scale = sd.get(layer + ".weight_scale", sd.get(layer + ".scale_weight"))
            w = v.to(torch.float32)
            out[k] = (w * scale.to(torch.float32) if scale is not None else w).to(dtype)
            done += 1
        elif v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            out[k] = v.to(dtype)
            done += 1
        else:
            out[k] = v
    kind = "none" if not done else ("mixed fp8" if formats else "scaled fp8" if legacy else "fp8")
    return out, {"quantisation": kind, "layers": done}
