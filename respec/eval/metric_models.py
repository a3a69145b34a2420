"""The networks behind the OCCUR measures (appendix A.5): AlexNet-LPIPS and OpenAI CLIP ViT-B/32.
Where their weights come from (model folders, torch's hub cache, the Hugging Face cache, or a
consented download: respec.models.resolve), how each is built, and `load_scorer`, which hands both
to a metrics.Scorer. The measures themselves are respec/eval/metrics.py.
"""
from __future__ import annotations

import logging
from pathlib import Path

from .. import models
from ..errors import CorruptWeightsError, MissingWeightsError
from ..models import resolve_device
from .metrics import DEFAULT_PSNR_CAP, Scorer

log = logging.getLogger("respec")

DEFAULT_LPIPS_TRUNK = "alexnet-owt-7be5be79.pth"
ALEXNET_URL = "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth"
DEFAULT_CLIP = "timm/vit_base_patch32_clip_224.openai"
CLIP_ARCH = "ViT-B-32-quickgelu"  # OpenAI's B/32 uses QuickGELU; plain 'ViT-B-32' is wrong for its weights
_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")

HOW_TO_GET_LPIPS = (
    f"download {ALEXNET_URL} (torchvision's AlexNet) into ComfyUI/models/respec_metrics/ "
    "(or RESPEC_MODELS_DIR/respec_metrics/), or allow downloads")
HOW_TO_GET_CLIP = (
    "download open_clip_model.safetensors from the Hugging Face repo "
    "timm/vit_base_patch32_clip_224.openai (OpenAI CLIP ViT-B/32) into "
    "ComfyUI/models/respec_metrics/ (any file name; choose it in the loader), or put the whole repo folder "
    "there, or allow downloads")


def _alexnet_to_lpips(state: dict) -> dict:
    """torchvision AlexNet keys features.{i}.* -> lpips' net.slice{k}.{i}.* (k from lpips' layer split)."""
    slice_of = {0: 1, 1: 1, 2: 2, 3: 2, 4: 2, 5: 3, 6: 3, 7: 3, 8: 4, 9: 4, 10: 5, 11: 5}
    out = {}
    for key, value in state.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "features" and parts[1].isdigit() and int(parts[1]) in slice_of:
            i = int(parts[1])
            out[f"slice{slice_of[i]}.{i}.{parts[2]}"] = value
    return out


def build_lpips(trunk_state: dict | None, device=None):
    """lpips.LPIPS(net='alex', spatial=True) with the AlexNet trunk from `trunk_state` (random if None).

    The linear heads ship inside the lpips wheel; `pnet_rand=True` stops lpips from asking
    torchvision to download the trunk, which is loaded here instead.
    """
    import warnings

    import lpips
    with warnings.catch_warnings():  # lpips passes torchvision's deprecated `pretrained=` flag
        warnings.simplefilter("ignore", UserWarning)
        model = lpips.LPIPS(net="alex", pnet_rand=True, spatial=True, verbose=False)
    if trunk_state is not None:
        mapped = _alexnet_to_lpips(trunk_state)
        expected = set(model.net.state_dict())
        if set(mapped) != expected:
            raise CorruptWeightsError(
                "The LPIPS trunk file is not torchvision's AlexNet (expected keys features.0/3/6/8/10.weight/bias; "
                f"missing {sorted(expected - set(mapped))[:4]}). Use {ALEXNET_URL}.")
        model.net.load_state_dict(mapped, strict=True)
    model.eval().requires_grad_(False)
    return model.to(device or "cpu")


def _hub_checkpoints() -> Path | None:
    """torch's hub cache of downloaded checkpoints (where torchvision keeps its AlexNet)."""
    try:
        import torch
        return Path(torch.hub.get_dir()) / "checkpoints"
    except Exception:
        return None


def _hub_checkpoint(name: str) -> Path | None:
    folder = _hub_checkpoints()
    p = folder / name if folder is not None else None
    return p if p is not None and p.is_file() else None


def resolve_lpips_trunk(name: str = DEFAULT_LPIPS_TRUNK, allow_download: bool | None = None) -> Path:
    """The AlexNet trunk file: model folders (kind respec_metrics), torch's hub cache, or a download."""
    return models.resolve("respec_metrics", name, HOW_TO_GET_LPIPS, allow_download=allow_download,
                          elsewhere=(f"torch's hub cache ({_hub_checkpoints()})", _hub_checkpoint),
                          url=ALEXNET_URL if Path(name).name == DEFAULT_LPIPS_TRUNK else None)


def resolve_clip(name: str = DEFAULT_CLIP, allow_download: bool | None = None) -> Path:
    """An open_clip state file: a file or repo folder in the model folders, the HF cache, or a download."""
    p = models.resolve("respec_metrics", name, HOW_TO_GET_CLIP, want="any", hub_files=_CLIP_FILES,
                       allow_download=allow_download)
    if p.is_dir():
        for fname in _CLIP_FILES:
            if (p / fname).is_file():
                return p / fname
        raise MissingWeightsError(f"{' or '.join(_CLIP_FILES)} inside {p}", [str(p)], HOW_TO_GET_CLIP)
    return p


class _DropRecord(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def build_clip(arch: str | dict = CLIP_ARCH, checkpoint: str | Path | None = None, device=None):
    """An open_clip CLIP model (architecture name or config dict) with the weights of `checkpoint`
    (an open_clip state file, read with weights_only; random weights if None)."""
    import open_clip
    if isinstance(arch, dict):
        from open_clip.model import CLIP
        model = CLIP(**arch)
    else:
        # open_clip warns that the model is random; the weights are loaded right below.
        quiet = _DropRecord("No pretrained weights loaded")
        logging.getLogger().addFilter(quiet)
        try:
            model = open_clip.create_model(arch, pretrained=None)
        finally:
            logging.getLogger().removeFilter(quiet)
    if checkpoint is not None:
        try:
            open_clip.load_checkpoint(model, str(checkpoint), strict=True, weights_only=True)
        except Exception as e:
            raise CorruptWeightsError(
                f"Could not load {checkpoint} into {arch if isinstance(arch, str) else 'the configured CLIP'} "
                f"({type(e).__name__}: {str(e)[:300]}). Use OpenAI CLIP ViT-B/32 in open_clip format "
                f"({HOW_TO_GET_CLIP}).") from e
    model.eval().requires_grad_(False)
    return model.to(device or "cpu")


def load_clip_model(clip_weights: str = DEFAULT_CLIP, *, arch: str | dict = CLIP_ARCH,
                    allow_download: bool | None = None, device=None):
    """The shared CLIP model (used by the scorer's image embeddings and YOLO-World's text embeddings).
    clip_weights "tiny" / "tiny:<seed>": respec/tiny's CLIP of that seed, on the CPU (arch unused)."""
    seed = models.tiny_seed(clip_weights)
    if seed is not None:
        return models.cached(("open_clip", models.TINY, seed), lambda: models.build_tiny("open_clip", seed))
    path = resolve_clip(clip_weights, allow_download)
    dev = resolve_device(device)
    key_arch = arch if isinstance(arch, str) else repr(sorted(arch.items()))
    return models.cached(("open_clip", str(path), key_arch, str(dev)),
                         lambda: build_clip(arch, path, dev))


def load_scorer(lpips_trunk: str = DEFAULT_LPIPS_TRUNK, clip_weights: str = DEFAULT_CLIP, *,
                source: str | None = None, clip_arch: str | dict = CLIP_ARCH, allow_download: bool | None = None,
                device=None, psnr_cap: float = DEFAULT_PSNR_CAP) -> Scorer:
    """LPIPS (AlexNet) + CLIP ViT-B/32 from local files (or consented downloads); weights cached.

    source "tiny" / "tiny:<seed>": the same models at toy sizes with random weights (respec/tiny;
    the weight arguments are then unused): the PSNR part is exact, LPIPS and CLIP are noise."""
    seed = models.tiny_seed(source)
    if seed is not None:
        return models.cached(("scorer", models.TINY, seed, psnr_cap),
                             lambda: build_tiny_scorer(seed, load_clip_model(source), psnr_cap=psnr_cap))
    dev = resolve_device(device)
    trunk = resolve_lpips_trunk(lpips_trunk, allow_download)
    lp = models.cached(("lpips", str(trunk), str(dev)), lambda: build_lpips(models.load_state_file(trunk), dev))
    clip = load_clip_model(clip_weights, arch=clip_arch, allow_download=allow_download, device=dev)
    return Scorer(lp, clip, psnr_cap=psnr_cap, device=dev, name=f"lpips:{trunk.name}+clip:{Path(str(clip_weights)).name}")


def build_tiny_scorer(seed: int = 0, clip_model=None, **options) -> Scorer:
    """A Scorer of respec/tiny's random networks, built anew on the CPU: AlexNet-LPIPS with a random
    trunk (the lpips wheel's linear heads) and `clip_model` (default: a new tiny CLIP). options: the
    Scorer's (psnr_cap). Its PSNR part is exact; LPIPS and CLIP are noise."""
    return Scorer(build_lpips(models.build_tiny("lpips_trunk", seed)),
                  clip_model if clip_model is not None else models.build_tiny("open_clip", seed),
                  device="cpu", name="tiny", **options)
