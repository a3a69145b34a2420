"""The ComfyUI-native route: reference latents appended to a real CONDITIONING list, in the
Reference Selector's order, without touching the input (what ComfyUI's ReferenceLatent does)."""
from __future__ import annotations

import pytest
import torch

from conftest import core


class ConvVAE(torch.nn.Module):
    """A small stand-in for ComfyUI's VAE object: same encode(pixels [B,H,W,C]) -> [B,C,h,w] contract."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4, 3, 8, 8) / 8)   # an 8x-down encoder, as a VAE is
        self.seen = []

    def conv(self, x):
        return torch.nn.functional.conv2d(x, self.weight, stride=8)

    @torch.no_grad()
    def encode(self, pixels):
        self.seen.append(tuple(pixels.shape))
        return self.conv(pixels.movedim(-1, 1))


def _conditioning():
    torch.manual_seed(1)
    earlier = torch.randn(1, 4, 8, 8)
    return [[torch.randn(1, 7, 16), {"pooled_output": None, "reference_latents": [earlier]}],
            [torch.randn(1, 5, 16), {"guidance": 4.0}]]


@pytest.fixture
def node(pack):
    return pack.NODE_CLASS_MAPPINGS["ReSpecReferenceConditioning"]


def _images():
    torch.manual_seed(2)
    return torch.rand(2, 64, 96, 3)  # [restoration source, identity anchor]


def test_reference_latents_are_appended_in_selector_order(node):
    vae, cond, images = ConvVAE(), _conditioning(), _images()
    (out,) = node.execute(cond, vae, images, megapixels=0.0).result
    first = out[0][1]["reference_latents"]
    assert len(first) == 3 and first[0] is cond[0][1]["reference_latents"][0]  # earlier references stay first
    assert torch.equal(first[1], vae.conv(images[0:1].movedim(-1, 1)).detach())
    assert torch.equal(first[2], vae.conv(images[1:2].movedim(-1, 1)).detach())
    second = out[1][1]["reference_latents"]
    assert len(second) == 2 and torch.equal(second[0], first[1]) and torch.equal(second[1], first[2])
    assert out[1][1]["guidance"] == 4.0 and out[0][0] is cond[0][0]


def test_input_conditioning_is_not_mutated(node):
    vae, cond, images = ConvVAE(), _conditioning(), _images()
    before = [(entry[0].clone(), dict(entry[1]), list(entry[1].get("reference_latents", []))) for entry in cond]
    (out,) = node.execute(cond, vae, images, megapixels=0.0).result
    for (tensor, values, refs), entry in zip(before, cond):
        assert torch.equal(tensor, entry[0])
        assert entry[1].keys() == values.keys()
        assert list(entry[1].get("reference_latents", [])) == refs
    assert out[0][1] is not cond[0][1] and out is not cond


def test_references_are_scaled_to_the_megapixel_budget(node):
    vae = ConvVAE()
    node.execute(_conditioning(), vae, torch.rand(1, 512, 768, 3), megapixels=0.0625)  # 65536 pixels
    (shape,) = vae.seen
    _, h, w, c = shape
    assert c == 3 and h % 16 == 0 and w % 16 == 0
    assert abs(h * w - 65536) <= 65536 * 0.1 and abs(w / h - 1.5) < 0.1


def test_alpha_channel_is_dropped_before_encoding(node):
    vae = ConvVAE()
    node.execute(_conditioning(), vae, torch.rand(1, 64, 64, 4), megapixels=0.0)
    assert vae.seen == [(1, 64, 64, 3)]


def test_not_a_conditioning_is_refused_clearly(pack, node):
    errors = core(pack, "errors")
    with pytest.raises(errors.InputError, match="CONDITIONING"):
        node.execute(torch.zeros(1, 3), ConvVAE(), _images(), megapixels=0.0)
