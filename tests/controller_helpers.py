"""Shared pieces of the controller tests: tiny model folders, histories, a call counter.

Import the fixtures into a test module with
`from controller_helpers import tiny_qwen_dir, tiny_internvl_dir  # noqa: F401`.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory):
    """A tiny random Qwen3-VL saved as a model folder (built once per test session)."""
    from respec.tiny.vlm import build_tiny_qwen3vl
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("vlm") / "tiny-qwen3-vl")


@pytest.fixture(scope="session")
def tiny_internvl_dir(tmp_path_factory):
    """A tiny random InternVL3 (-hf layout) saved as a model folder."""
    from respec.tiny.vlm import build_tiny_internvl
    return build_tiny_internvl(tmp_path_factory.mktemp("vlm") / "tiny-internvl3")


def picture(seed: int, size=(48, 64)) -> np.ndarray:
    """A distinct small RGB image (uint8 H×W×3)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(size[0], size[1], 3), dtype=np.uint8)


INSTRUCTIONS = ["add a large cardboard box in front of the man's chest",
                "make the background blue",
                "add a shipping label to the box",
                "turn the scene into a watercolor painting",
                "remove the large cardboard box"]


def make_history(n_images: int, history_cls=None, size=(48, 64)):
    """A history with I_0 .. I_{n-1} (n-1 edits with the INSTRUCTIONS above)."""
    if history_cls is None:
        from respec.history import History as history_cls
    h = history_cls.start(picture(0, size))
    for k in range(1, n_images):
        h = h.append(picture(k, size), INSTRUCTIONS[(k - 1) % len(INSTRUCTIONS)])
    return h


class CountingVLM:
    """Wraps a real backend and counts (and keeps) every chat call; the model still answers."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.max_pixels = getattr(inner, "max_pixels", None)
        self.max_new_tokens = getattr(inner, "max_new_tokens", None)
        self.calls: list[dict] = []

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        self.calls.append({"parts": list(parts), "system": system, "max_new_tokens": max_new_tokens,
                           "json_schema": json_schema})
        return self.inner.chat(parts, system=system, max_new_tokens=max_new_tokens, json_schema=json_schema)


class ScriptedAnswer:
    """Stands in for the model's answer text (the unit under test is the parser and the plan
    built from it): chat returns the given text, whatever it is asked."""

    name = "scripted"

    def __init__(self, text: str):
        self.text = text
        self.calls = 0

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        self.calls += 1
        return self.text
