"""Tiny random-weight VLM controllers (Qwen3-VL and InternVL3), saved as loadable folders.

They use the real transformers classes, processors and chat templates at toy sizes so the
controller's whole path (processor -> generate -> decode -> parse) runs on a CPU in well
under a second. Their text is noise; tests check the path, not the words.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .tokenizer import SPECIAL_TOKENS, build_tokenizer, byte_level_tokenizer

# InternVL's image markers (named the way InternVLProcessor looks them up on the tokenizer).
INTERNVL_EXTRA_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}

# InternVL-style chat template: each image item becomes one <IMG_CONTEXT> placeholder that
# the processor expands to <img><IMG_CONTEXT>*n</img>.
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<IMG_CONTEXT>\n"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_internvl_tokenizer():
    """The byte-level Qwen2 tokenizer plus InternVL's <img>, </img>, <IMG_CONTEXT>, <video>."""
    from tokenizers import AddedToken

    specials = SPECIAL_TOKENS + list(INTERNVL_EXTRA_TOKENS.values())
    tok = byte_level_tokenizer(specials, extra_special_tokens=dict(INTERNVL_EXTRA_TOKENS))
    tok.add_special_tokens({"additional_special_tokens":
                            [AddedToken(t, special=True, normalized=False) for t in specials]})
    tok.chat_template = INTERNVL_CHAT_TEMPLATE
    return tok


def rope_settings(params: dict) -> dict:
    """RoPE settings under the name this transformers reads: `rope_parameters` (5.x) or
    `rope_scaling` + `rope_theta` (4.5x)."""
    import transformers
    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": params}
    return {"rope_scaling": {k: v for k, v in params.items() if k != "rope_theta"}, "rope_theta": params["rope_theta"]}


def tiny_vlm_folder(kind: str, seed: int = 0) -> Path:
    """The saved tiny random-weight model of controller `kind` ("qwen3-vl" or "internvl3") for
    `seed`, built on first use under <RESPEC_HOME>/tiny (what load_backend(kind, "tiny") loads)."""
    from .. import comfy
    build, name = {"qwen3-vl": (build_tiny_qwen3vl, "qwen3vl"), "internvl3": (build_tiny_internvl, "internvl3")}[kind]
    # Seed 0 keeps the folder name earlier smoke runs used, so their saved model is reused.
    folder = comfy.standalone_home() / "tiny" / (name if int(seed) == 0 else f"{name}-seed{int(seed)}")
    if not (folder / "config.json").exists():
        # Build beside it and rename, so a run killed while building leaves no half-written model.
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        build(tmp, seed=seed)
        try:
            os.replace(tmp, folder)
        except OSError:   # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def build_tiny_qwen3vl(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random Qwen3-VL (model + processor + chat template) to `path`; return it."""
    import torch
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    path = Path(path)
    tok = build_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>",
                                                   "<|vision_start|>", "<|vision_end|>")}
    config = Qwen3VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=4096,
                         **rope_settings({"rope_type": "default", "rope_theta": 5e6,
                                          "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                           num_position_embeddings=64, deepstack_visual_indexes=[0, 1]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    # Small pixel limits keep the tiny model's image sequences short.
    image_processor = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                            size={"shortest_edge": 1024, "longest_edge": 4096})
    video_processor = Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                            size={"shortest_edge": 1024, "longest_edge": 4096})
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok,
                                 video_processor=video_processor, chat_template=tok.chat_template)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_tiny_internvl(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random InternVL3-style model (-hf layout: tiny vision tower + tiny Qwen2
    text model) with its processor to `path`; return it."""
    import torch
    from transformers import (GotOcr2ImageProcessor, InternVLConfig, InternVLForConditionalGeneration,
                              InternVLProcessor, InternVLVideoProcessor)

    path = Path(path)
    tok = build_internvl_tokenizer()
    image_size, patch_size, downsample = 32, 8, 0.5
    # tokens per tile = (image_size / patch_size)^2 * downsample^2
    seq_len = int((image_size // patch_size) ** 2 * downsample ** 2)
    config = InternVLConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=image_size, patch_size=patch_size),
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=4096,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        image_token_id=tok.context_image_token_id, image_seq_length=seq_len, downsample_ratio=downsample,
    )
    torch.manual_seed(seed)
    model = InternVLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    image_processor = GotOcr2ImageProcessor(size={"height": image_size, "width": image_size},
                                            crop_to_patches=True, min_patches=1, max_patches=2,
                                            image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    video_processor = InternVLVideoProcessor(size={"height": image_size, "width": image_size})
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                                  image_seq_length=seq_len, chat_template=tok.chat_template)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
