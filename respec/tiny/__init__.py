"""Tiny random-weight models built in code: the real classes and call signatures at toy sizes.

Used by the tests and by `python -m respec bench --smoke` to check an install without weights.
Nothing here downloads anything.

TINY_BUILDERS is the one registry the loaders reach them through (`respec.models.build_tiny`, for
the model source "tiny" / "tiny:<seed>"): a model kind -> a builder that takes the seed and returns
what that kind's loader takes in place of real weights, so the rest of the loader runs as it does
for real weights. The modules here import no loader of the pack (they sit below respec.models).
Kinds without a tiny model are in NO_TINY, with the reason the loader gives.
"""
from __future__ import annotations

from typing import Any, Callable


def _flux2(seed: int) -> Any:
    from .klein import build_tiny_klein_pipeline
    return build_tiny_klein_pipeline(seed=seed)


def _vlm_folder(kind: str) -> Callable[[int], Any]:
    def build(seed: int) -> Any:
        from .vlm import tiny_vlm_folder
        return tiny_vlm_folder(kind, seed)
    return build


def _yolo_world(seed: int) -> Any:
    from .eval_models import build_tiny_yolo_world
    return build_tiny_yolo_world(seed=seed)


def _sam(seed: int) -> Any:
    from .eval_models import build_tiny_sam
    return build_tiny_sam(seed)


def _open_clip(seed: int) -> Any:
    from .eval_models import build_tiny_clip
    return build_tiny_clip(seed)


def _lpips_trunk(seed: int) -> Any:
    from .eval_models import tiny_alexnet_state
    return tiny_alexnet_state(seed)


TINY_BUILDERS: dict[str, Callable[[int], Any]] = {
    "flux2": _flux2,                            # a Flux2KleinPipeline (the loader wraps it in its Flux2Editor)
    "qwen3-vl": _vlm_folder("qwen3-vl"),        # a saved model folder, loaded like any folder
    "internvl3": _vlm_folder("internvl3"),
    "yolo_world": _yolo_world,                  # an ultralytics YOLOWorld (YOLO-World v2 n, class biases zeroed)
    "sam": _sam,                                # a segment-anything Sam (one-block ViT, 256 px)
    "open_clip": _open_clip,                    # an open_clip CLIP with 512-d embeddings
    "lpips_trunk": _lpips_trunk,                # a torchvision AlexNet `features.*` state dict
}

NO_TINY: dict[str, str] = {
    "omnigen2": ("there is no tiny OmniGen2 (its pipeline code is not bundled); check an install with "
                 "the tiny FLUX.2 [klein] (editor flux2), or run OmniGen2 with its real weights"),
    "openai": ("there is no tiny 'openai' controller: the model of an OpenAI-compatible server "
               "is whatever it serves; use qwen3-vl or internvl3 with the tiny source"),
}
