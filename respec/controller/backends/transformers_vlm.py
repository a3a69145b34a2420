"""Local VLM controllers through transformers: Qwen3-VL and InternVL3 (-hf checkpoints).

Greedy decoding with a cap on new tokens, a progress bar that is also the interrupt check
(a StoppingCriteria called once per generated token), optional JSON-constrained decoding with
xgrammar, and a keep-loaded switch that parks the weights on the offload device between calls.
No remote code is ever run.
"""
from __future__ import annotations

import gc
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from ... import comfy, models
from ...errors import CorruptWeightsError, InputError
from ...images import as_rgb, downscale_to_budget
from ..prompts import DEFAULT_MAX_PIXELS
from ..schemas import bound_strings


# model_type values in config.json that each kind accepts.
MODEL_TYPES = {"qwen3-vl": ("qwen3_vl", "qwen3_vl_moe"), "internvl3": ("internvl",)}
HOW_TO_GET = {
    "qwen3-vl": ("download a Qwen3-VL checkpoint, e.g. `hf download Qwen/Qwen3-VL-8B-Instruct --local-dir "
                 "<ComfyUI>/models/LLM/Qwen3-VL-8B-Instruct`, then pick that folder name, or turn on allow_download"),
    "internvl3": ("download an InternVL3 '-hf' checkpoint, e.g. `hf download OpenGVLab/InternVL3-8B-hf --local-dir "
                  "<ComfyUI>/models/LLM/InternVL3-8B-hf`, then pick that folder name, or turn on allow_download"),
}


QUANTIZATIONS = ("none", "8-bit", "4-bit")


def quantization_config(quantization: str | None, device, dtype):
    """transformers' BitsAndBytesConfig for "8-bit" / "4-bit" (None for "none"); a clear error when
    bitsandbytes is missing or the device is not a CUDA GPU."""
    q = (quantization or "none").strip().lower()
    if q == "none":
        return None
    if q not in QUANTIZATIONS:
        raise InputError(f"unknown quantization {quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise InputError(f"quantization {q} needs the bitsandbytes package (CUDA GPUs): `pip install bitsandbytes`, "
                         "then restart; or set quantization to none") from None
    if getattr(device, "type", str(device)) != "cuda":
        raise InputError(f"quantization {q} runs on CUDA GPUs only (device is {device}); set quantization to none")
    from transformers import BitsAndBytesConfig
    if q == "8-bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)


def xgrammar_available() -> bool:
    """True when xgrammar (JSON-constrained decoding) can be imported."""
    try:
        import xgrammar  # noqa: F401
        import xgrammar.contrib.hf  # noqa: F401
        return True
    except Exception:
        return False


def resolve_model_dir(kind: str, model: str, allow_download: bool | None = None) -> str:
    """A local folder for `model`: an absolute folder, a folder in models/LLM, or a Hugging
    Face id from the local cache (downloaded only when allowed)."""
    return models.resolve_hf(model, "LLM", allow_download, HOW_TO_GET[kind])


def _check_config(kind: str, folder: str) -> None:
    cfg_path = Path(folder) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptWeightsError(f"{folder} has no config.json, so it is not a transformers model folder; "
                                  f"{HOW_TO_GET[kind]}") from None
    except ValueError as e:
        raise CorruptWeightsError(f"{cfg_path} is not valid JSON ({e}); download the model again") from None
    mtype = cfg.get("model_type", "")
    if mtype in MODEL_TYPES[kind]:
        return
    if "auto_map" in cfg or mtype == "internvl_chat":
        raise InputError(f"{folder} is a checkpoint that needs the model author's remote code (model_type "
                         f"{mtype!r}); this pack never runs remote code. Use the transformers-native '-hf' "
                         f"checkpoint instead: {HOW_TO_GET[kind]}")
    raise InputError(f"{folder} holds a {mtype!r} model, not a {kind} model (expected model_type "
                     f"{' or '.join(MODEL_TYPES[kind])}); choose the matching backend or folder")


def _device(name: str | None):
    import torch
    if not name or name == "auto":
        return comfy.torch_device()
    try:
        return torch.device(name)
    except Exception:
        raise InputError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None


def _check_chat_template(processor, folder: Path, kind: str) -> None:
    """The chat template must be there and compile now: a damaged one would otherwise fail only
    at the first chat, naming no file. CorruptWeightsError names the file and what to do."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    where = next((folder / n for n in ("chat_template.jinja", "chat_template.json") if (folder / n).exists()),
                 folder)
    template = getattr(processor, "chat_template", None) or \
        getattr(getattr(processor, "tokenizer", None), "chat_template", None)
    if isinstance(template, dict):   # named templates: the default one is what chats use
        template = template.get("default")
    fix = f"restore the file from the model's release. {HOW_TO_GET[kind]}"
    if not isinstance(template, str) or not template.strip():
        raise CorruptWeightsError(f"the {kind} controller has no chat template: {where} is empty or missing; {fix}")
    try:
        ImmutableSandboxedEnvironment().from_string(template)
    except TemplateError as e:
        raise CorruptWeightsError(f"the chat template in {where} is damaged ({type(e).__name__}: {e}); {fix}") from e


class _ProgressAndInterrupt:
    """A StoppingCriteria that advances the progress bar once per generated token; the bar's
    update is also the interrupt check, so a cancel stops generation within one token."""

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        self.bar.update(1)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@dataclass(frozen=True)
class LocalVLMSettings:
    """How a local transformers controller loads and answers (load_backend's options for qwen3-vl and
    internvl3; an unknown option is a TypeError)."""
    dtype: str = "auto"                    # auto: bf16 on CUDA, else fp32 | bf16 | fp16 | fp32
    device: str = "auto"
    keep_loaded: bool = True               # inside ComfyUI: keep the weights between prompts
    allow_download: bool | None = None     # used when load_backend resolves the folder (not here)
    max_pixels: int = DEFAULT_MAX_PIXELS   # each image is scaled down to at most this many pixels
    max_new_tokens: int = 768
    json_constrained: bool | str = "auto"  # xgrammar-constrained JSON: auto (when installed) | True | False | "off"
    json_max_string: int = 0               # longest string the JSON grammar lets through (0: no bound)
    attn_implementation: str = "sdpa"
    quantization: str = "none"             # none | bitsandbytes modes (quantization_config)


class TransformersVLM:
    """Qwen3-VL or InternVL3 loaded from a local folder. Use load_backend() to get one."""

    def __init__(self, kind: str, folder: str, settings: LocalVLMSettings = LocalVLMSettings(), *,
                 source: str | None = None):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        if kind not in MODEL_TYPES:
            raise InputError(f"unknown transformers controller {kind!r}; use qwen3-vl or internvl3")
        self.kind, self.folder = kind, str(folder)
        self.name = f"{kind}:{source or folder}"
        self.max_pixels = int(settings.max_pixels) if settings.max_pixels else DEFAULT_MAX_PIXELS
        self.max_new_tokens = int(settings.max_new_tokens) if settings.max_new_tokens else 768
        self.keep_loaded = bool(settings.keep_loaded)
        self.json_max_string = int(settings.json_max_string or 0)
        if settings.json_constrained in ("auto", None):
            self.json_constrained = xgrammar_available()
        else:
            self.json_constrained = bool(settings.json_constrained) and settings.json_constrained != "off"
            if self.json_constrained and not xgrammar_available():
                raise InputError("JSON-constrained decoding needs the xgrammar package: `pip install xgrammar`, "
                                 "or set json_constrained to auto/off")
        self.device = _device(settings.device)
        if settings.dtype in (None, "", "auto"):
            self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        else:
            self.dtype = models.torch_dtype(settings.dtype)

        quant = quantization_config(settings.quantization, self.device, self.dtype)
        self.quantization = (settings.quantization or "none").lower()
        _check_config(kind, self.folder)
        # bitsandbytes weights are placed once, on the GPU, and cannot be moved afterwards.
        placement = {"quantization_config": quant, "device_map": {"": str(self.device)}} if quant is not None else {}
        try:
            self.processor = AutoProcessor.from_pretrained(self.folder, local_files_only=True,
                                                           trust_remote_code=False)
            self.model = AutoModelForImageTextToText.from_pretrained(
                self.folder, dtype=self.dtype, local_files_only=True, trust_remote_code=False,
                attn_implementation=settings.attn_implementation, **placement).eval()
        except Exception as e:  # any failure here means the folder is not a usable checkpoint
            raise CorruptWeightsError(f"could not load the {kind} controller from {self.folder} "
                                      f"({type(e).__name__}: {e}). The folder may be incomplete; "
                                      f"{HOW_TO_GET[kind]}") from e
        _check_chat_template(self.processor, Path(self.folder), kind)
        # Inside ComfyUI its memory manager places (and on /free unloads) the weights.
        self.managed = comfy.manage(self.model, self.device, keep_loaded=self.keep_loaded, name=self.name,
                                    movable=quant is None)
        self._lock = threading.Lock()
        self._compiler = None
        self._grammars: dict[str, object] = {}

    def release(self) -> None:
        """Free the weights (after unload_backend)."""
        self.model = None
        self.managed = None
        self.processor = None
        self._grammars.clear()
        gc.collect()
        comfy.empty_device_cache()

    # -- constrained decoding ----------------------------------------------------------
    def _grammar_processor(self, schema: dict):
        import xgrammar as xgr
        import xgrammar.contrib.hf  # noqa: F401
        schema = bound_strings(schema, self.json_max_string)
        key = json.dumps(schema)
        if key not in self._grammars:
            if self._compiler is None:
                vocab = self.model.get_output_embeddings().weight.shape[0]
                info = xgr.TokenizerInfo.from_huggingface(self.processor.tokenizer, vocab_size=vocab)
                self._compiler = xgr.GrammarCompiler(info)
            # any_whitespace=False: no free whitespace, so a weak model cannot stall in blanks.
            self._grammars[key] = self._compiler.compile_json_schema(key, any_whitespace=False)
        # A processor holds per-generation state: a new one for every generate call.
        return xgr.contrib.hf.LogitsProcessor(self._grammars[key])

    # -- the call ----------------------------------------------------------------------
    def _messages(self, parts: list, system: str | None) -> list[dict]:
        content = []
        for p in parts:
            if isinstance(p, Image.Image):
                content.append({"type": "image", "image": downscale_to_budget(as_rgb(p), self.max_pixels)})
            elif isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                raise InputError(f"a controller message part must be text or a PIL image, got {type(p).__name__}")
        messages = []
        if system:
            messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
        messages.append({"role": "user", "content": content})
        return messages

    def chat(self, parts: list, *, system: str | None = None, max_new_tokens: int = 768,
             json_schema: dict | None = None) -> str:
        """One greedy generation over an interleaved text/image user message; returns the text."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        if self.model is None:
            raise InputError(f"the controller {self.name} was unloaded; load it again")
        max_new_tokens = int(max_new_tokens or self.max_new_tokens)
        with self._lock:
            comfy.check_interrupted()
            inputs = self.processor.apply_chat_template(
                self._messages(parts, system), tokenize=True, return_dict=True,
                add_generation_prompt=True, return_tensors="pt")
            n_in = inputs["input_ids"].shape[1]
            device = self.managed.use()
            try:
                inputs = {k: (v.to(device, dtype=self.dtype) if v.is_floating_point() else v.to(device))
                          if hasattr(v, "to") else v for k, v in inputs.items()}
                processors = []
                if json_schema is not None and self.json_constrained:
                    processors.append(self._grammar_processor(json_schema))
                with comfy.progress(max_new_tokens, f"controller {self.kind}") as bar:
                    with torch.inference_mode():
                        out = self.model.generate(
                            **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                            stopping_criteria=StoppingCriteriaList([_ProgressAndInterrupt(bar)]),
                            logits_processor=LogitsProcessorList(processors))
            finally:
                self.managed.done()
        return self.processor.decode(out[0, n_in:], skip_special_tokens=True).strip()

