"""A byte-level Qwen2 tokenizer built without downloads (serves Qwen3 / Qwen3-VL tiny models)."""
from __future__ import annotations

import inspect
import json
import tempfile
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>", "<|box_start|>", "<|box_end|>", "<think>", "</think>",
]

# Qwen-style chat template: images become <|vision_start|><|image_pad|><|vision_end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _bytes_to_unicode() -> list[str]:
    """The GPT-2 byte->printable-char table (256 symbols), so every byte is one token."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def byte_level_tokenizer(specials: list[str], **options):
    """A Qwen2Tokenizer over the 256 byte symbols plus `specials` (no merges), on transformers 4.5x
    (vocabulary read from files) and 5.x (vocabulary given directly)."""
    from transformers import Qwen2Tokenizer

    vocab = {sym: i for i, sym in enumerate(_bytes_to_unicode())}
    for tok in specials:
        vocab[tok] = len(vocab)
    options = dict(unk_token=None, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", **options)
    if "vocab" in inspect.signature(Qwen2Tokenizer.__init__).parameters:   # transformers 5
        return Qwen2Tokenizer(vocab=vocab, merges=[], **options)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        (Path(d) / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
        return Qwen2Tokenizer(vocab_file=str(Path(d) / "vocab.json"), merges_file=str(Path(d) / "merges.txt"),
                              **options)


def build_tokenizer():
    """A Qwen2Tokenizer whose vocabulary is the 256 byte symbols plus Qwen's special tokens."""
    from tokenizers import AddedToken

    tok = byte_level_tokenizer(SPECIAL_TOKENS)
    tok.add_special_tokens({"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]})
    tok.chat_template = CHAT_TEMPLATE
    return tok
