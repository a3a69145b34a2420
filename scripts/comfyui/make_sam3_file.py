"""Write a random-weight SAM3 checkpoint ComfyUI 0.24's own loader accepts (a check instrument).

    <ComfyUI python> scripts/comfyui/make_sam3_file.py --comfyui /path/to/ComfyUI-0.24 --models <cache>/models

ComfyUI 0.24 recognises SAM3 by two keys (`detector.backbone.vision_backbone.trunk.blocks.0.attn.qkv.weight`,
`detector.transformer.decoder.query_embed.weight`) and builds it with fixed sizes (comfy/ldm/sam3:
a 1024-wide vision trunk, 256-wide detector, the tracker), and its text encoder (a 24-layer,
1024-wide CLIP text model) from the keys under `detector.backbone.language_backbone.`: no smaller
file is accepted. This one has those sizes (0.51 B + 0.35 B parameters, bf16, ~1.7 GB) with random
values, in the names ComfyUI's own modules give them (built on the meta device): SAM3, not SAM3.1's
multiplex variant (no `propagation_convs`). Writes checkpoints/sam3-check.safetensors under --models
(kept when it exists) and prints its size as JSON. The checker links it under the name the graphs select.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from make_omnigen2_files import _random_entries, _stream_save, comfyui_for_files  # noqa: E402

FILE = "sam3-check.safetensors"


def main(argv=None) -> int:
    args = comfyui_for_files(__doc__, argv)
    import torch
    import comfy.ops
    import comfy.text_encoders.sam3_clip as sam3_clip
    from comfy.ldm.sam3.detector import SAM3Model

    path = Path(args.models) / "checkpoints" / FILE
    report, t0 = {}, time.monotonic()
    if not path.is_file():
        ops = comfy.ops.disable_weight_init
        with torch.device("meta"):
            model = SAM3Model(device="meta", dtype=torch.bfloat16, operations=ops, image_model="SAM3")
            text = sam3_clip.SAM3ClipModelWrapper(device="meta", dtype=torch.bfloat16)
        # The text encoder's keys as ComfyUI's SAM3 config hands them to its CLIP: under the detector's
        # language backbone, already in the CLIP wrapper's names.
        entries = (_random_entries(model, 4, fp8=False)
                   + _random_entries(text, 5, fp8=False, prefix="detector.backbone.language_backbone."))
        report["sam3"] = _stream_save(entries, path)
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
