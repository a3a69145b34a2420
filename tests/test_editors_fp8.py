"""ComfyUI's fp8 single files through the pack's FLUX.2 loader (tiny random klein, CPU, offline).

fp8 tolerance: e4m3 keeps 3 mantissa bits, so a dequantised weight is within 1/16 of its value
(plus half the smallest subnormal step x scale); the edited image must stay far closer to the
full-precision file's image than another seed's image is.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import core

REFS = [np.random.RandomState(i).randint(0, 256, (64, 80, 3), dtype=np.uint8) for i in range(2)]


def _models_dir() -> Path:
    return Path(os.environ["RESPEC_MODELS_DIR"])


@pytest.fixture
def files(pack):
    tiny = core(pack, "tiny.klein")
    written = tiny.write_tiny_klein_single_files(_models_dir())
    d = _models_dir()
    written["transformer_fp8"] = tiny.write_fp8_file(
        d / "diffusion_models" / written["transformer"], d / "diffusion_models" / "tiny_klein_fp8_scaled.safetensors",
        layout="scaled").name
    written["text_encoder_fp8"] = tiny.write_fp8_file(
        d / "text_encoders" / written["text_encoder"], d / "text_encoders" / "tiny_qwen3_fp8mixed.safetensors",
        layout="mixed").name
    return written


def _editor(pack, files, transformer, text_encoder):
    loader = pack.NODE_CLASS_MAPPINGS["ReSpecFlux2Loader"]
    return loader.execute(model=files["config"], transformer_file=transformer, text_encoder_file=text_encoder,
                          vae_file=files["vae"], dtype="fp32", offload="none", allow_download=False).result[0]


def _run(editor, seed=5):
    return np.asarray(editor.edit(REFS, "remove the vase", output_size=(80, 64), seed=seed, steps=2), dtype=np.float32)


@pytest.mark.slow
def test_fp8_files_give_the_full_precision_image_within_fp8_tolerance(pack, files):
    full = _editor(pack, files, files["transformer"], files["text_encoder"])
    quant = _editor(pack, files, files["transformer_fp8"], files["text_encoder_fp8"])
    assert quant is not full
    a, b, other_seed = _run(full), _run(quant), _run(full, seed=6)
    fp8_gap, seed_gap = np.abs(a - b).mean(), np.abs(a - other_seed).mean()
    print(f"mean |fp8 - full| = {fp8_gap:.2f} / 255; mean |seed 6 - seed 5| = {seed_gap:.2f} / 255")
    assert fp8_gap < 0.25 * seed_gap and fp8_gap < 8.0


@pytest.mark.parametrize("layout", ["scaled", "mixed"])
def test_dequantised_weights_are_within_fp8_precision(pack, files, layout):
    fp8 = core(pack, "editors.fp8")
    d = _models_dir() / "diffusion_models"
    src = d / files["transformer"]
    dst = core(pack, "tiny.klein").write_fp8_file(src, d / f"t_{layout}.safetensors", layout=layout)
    from safetensors.torch import load_file
    original = load_file(str(src))
    got, info = fp8.read_single_file(dst, "transformer", torch.float32)
    assert set(got) == set(original), "scales, markers and comfy_quant entries are consumed"
    assert info == {"quantisation": {"scaled": "scaled fp8", "mixed": "mixed fp8"}[layout],
                    "layers": sum(1 for k, v in original.items() if k.endswith(".weight") and v.ndim == 2)}
    for k, w in original.items():
        if k.endswith(".weight") and w.ndim == 2:
            step = w.abs().max() / 448.0 * 2.0 ** -9   # e4m3's smallest subnormal, scaled
            assert torch.all((got[k] - w).abs() <= w.abs() / 16 + step), k
        else:
            assert torch.equal(got[k], w), k


def test_gguf_files_are_refused_naming_the_file_and_the_native_route(pack, files):
    path = _models_dir() / "diffusion_models" / "flux-2-klein-9b-Q4_K_M.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00")
    with pytest.raises(core(pack, "editors.fp8").UnsupportedQuantisationError) as e:
        _editor(pack, files, path.name, files["text_encoder"])
    assert "flux-2-klein-9b-Q4_K_M.gguf is a GGUF file" in str(e.value) and "UNETLoader" in str(e.value)


@pytest.mark.parametrize("extra, what", [
    ({"double_blocks.0.img_attn.qkv.weight.absmax": torch.ones(4)}, "NF4"),
    ({"double_blocks.0.img_attn.qkv.comfy_quant":
      torch.tensor(list(b'{"format": "nvfp4"}'), dtype=torch.uint8)}, "nvfp4"),
])
def test_nf4_and_nvfp4_files_are_refused(pack, files, extra, what):
    from safetensors.torch import load_file, save_file
    d = _models_dir() / "diffusion_models"
    sd = {**load_file(str(d / files["transformer"])), **{"model.diffusion_model." + k: v for k, v in extra.items()}}
    save_file(sd, str(d / "odd.safetensors"))
    with pytest.raises(core(pack, "editors.fp8").UnsupportedQuantisationError) as e:
        _editor(pack, files, "odd.safetensors", files["text_encoder"])
    assert "odd.safetensors" in str(e.value) and what in str(e.value) and "native" in str(e.value)
