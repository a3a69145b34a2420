"""The models of a benchmark run in the simulated world (`python -m respec bench --editor sim`).

The editor is the SimEditor (a simulation, docs/sim.md). Masks are the recorded layers
(`--masks oracle`, the default) or the real YOLO-World + SAM (`--masks detect`; the tiny random
ones with --smoke). The controller is the one asked for with --controller-model, else the tiny
random Qwen3-VL (its answers are noise, so the C.2/C.3 fallback rules choose the references; the
report says which controller chose them). The scorer is LPIPS + CLIP from the model folders when
their files are there, else the tiny random-weight one, and every row says which.
"""
from __future__ import annotations

import logging

from ..errors import DownloadNotAllowedError, MissingWeightsError
from .configs import CONFIGS
from .settings import BenchModels, BenchSettings

log = logging.getLogger("respec.sim")

TINY_SCORER = "lpips+clip (tiny random weights: their files were not found; only the PSNR part is calibrated)"


def load_sim_models(settings: BenchSettings) -> BenchModels:
    """BenchModels for the sim world (see the module docstring)."""
    from ..controller import load_backend
    from ..eval.masks import DetectSettings, load_masker
    from ..eval.metric_models import load_scorer
    from ..models import TINY

    tiny = f"{TINY}:{settings.seed}"
    mode = settings.masks_mode()
    from ..sim.drift import sim_editor
    defects = getattr(settings, "sim_defects", "default") or "default"
    editor = sim_editor(defects)
    describe = {"editor_model": "sim (simulated editor, docs/sim.md)" if defects == "default"
                else f"sim (simulated editor, docs/sim.md; --sim-defects {defects})"}
    scorer = masker = None
    try:
        scorer = load_scorer(**settings.scorer_options)
        describe["scorer"] = getattr(scorer, "name", "lpips+clip")
    except (MissingWeightsError, DownloadNotAllowedError) as e:
        log.info("sim run: tiny scorer (%s)", str(e).splitlines()[0])
        scorer = load_scorer(source=tiny)
        describe["scorer"] = TINY_SCORER
    if mode == "detect":
        if settings.smoke:
            masker = load_masker(source=tiny, detect=DetectSettings(imgsz=max(64, -(-int(settings.size or 256) // 32) * 32)))
            describe["masks"] = "detect: yolo-world+sam (tiny random weights)"
        else:
            options = dict(settings.masker_options)
            masker = load_masker(detect=DetectSettings.take(options), **options)
            describe["masks"] = f"detect: {getattr(masker, 'name', 'yolo-world+sam')}"
    else:
        describe["masks"] = "oracle: the sim editor's recorded layers"
    backend = None
    if any(CONFIGS[c].needs_vlm for c in settings.configs) or settings.judge:
        if settings.controller_model:
            backend = load_backend(settings.controller, settings.controller_model, **settings.controller_options)
            describe["controller"] = f"{settings.controller}:{settings.controller_model}"
        else:
            # Its text is noise whatever its length or the images' size (every answer ends in the C.2/C.3
            # fallbacks); 4 tokens and 128 x 128 px images keep the 252-row sim run within minutes.
            backend = load_backend("qwen3-vl", tiny, **{"max_new_tokens": 4, "max_pixels": 128 * 128,
                                                       **settings.controller_options})
            describe["controller"] = "qwen3-vl (tiny, random weights)"
    return BenchModels(editor=editor, backend=backend, masker=masker, scorer=scorer, judge_backend=backend,
                       describe=describe, masks=mode)
