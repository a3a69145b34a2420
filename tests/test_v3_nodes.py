"""Nodes declared with ComfyUI's V3 schema (issue 46), read through the pack's stand-in
(respec/comfy_io.py) as the tests run without ComfyUI.

A V3 node must be listed exactly as its V1 form was: the listings a real ComfyUI gave of the V1
pack are kept in scripts/comfyui/object_info/ (0.24 and 0.28 list alike; 0.8.0 has fewer keys), and
`scripts/comfyui/check_in_comfyui.py --object-info-baseline` compares a real server's listing with
them. Here the stand-in's listing is compared with the same files, so a conversion that changes an
id, an input, a default or an output fails in CI too."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import load_pack, load_script

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "comfyui" / "object_info" / "pack_v1_0.24.json"


def _v3_nodes():
    pack = load_pack()
    return sorted((n, c) for n, c in pack.NODE_CLASS_MAPPINGS.items() if hasattr(c, "define_schema"))


def test_some_nodes_are_v3():
    assert [n for n, _ in _v3_nodes()], "no node is declared with the V3 schema"


@pytest.mark.parametrize("name", [n for n, _ in _v3_nodes()])
def test_a_v3_node_is_listed_as_its_v1_form_was(name):
    listing = load_script("scripts/comfyui/object_info_listing.py")
    cls = dict(_v3_nodes())[name]
    before = json.loads(BASELINE.read_text(encoding="utf-8"))[name]
    mine = listing.normalise(cls.GET_NODE_INFO_V1())
    # Keys only a server adds (the module it loaded the node from; 0.24's has_intermediate_output).
    for key in ("python_module", "has_intermediate_output"):
        before.pop(key, None)
        mine.pop(key, None)
    assert listing.differences({name: before}, {name: mine}) == []


def test_the_listing_comparison_sees_a_changed_default_and_ignores_v3s_own_keys():
    listing = load_script("scripts/comfyui/object_info_listing.py")
    v1 = {"input": {"required": {"mode": [["a", "b"], {"default": "a"}]}, "hidden": {"unique_id": "UNIQUE_ID"}},
          "input_order": {"required": ["mode"], "hidden": ["unique_id"]}, "output_node": True, "search_aliases": []}
    v3 = {"input": {"required": {"mode": ["COMBO", {"options": ["a", "b"], "default": "a", "multiselect": False}]},
                    "hidden": {"unique_id": ["UNIQUE_ID"], "prompt": ["PROMPT"], "extra_pnginfo": ["EXTRA_PNGINFO"]}},
          "input_order": {"required": ["mode"], "hidden": ["unique_id", "prompt", "extra_pnginfo"]},
          "output_node": True, "search_aliases": None, "deprecated": False, "output_matchtypes": None}
    assert listing.differences({"n": listing.normalise(v1)}, {"n": listing.normalise(v3)}) == []
    v3["input"]["required"]["mode"][1]["default"] = "b"
    assert listing.differences({"n": listing.normalise(v1)}, {"n": listing.normalise(v3)}) == [
        'n.input: {"required": {"mode": [["a", "b"], {"default": "a"}]}, "hidden": {"unique_id": "UNIQUE_ID"}} -> '
        '{"required": {"mode": [["a", "b"], {"default": "b"}]}, "hidden": {"unique_id": "UNIQUE_ID"}}']


def test_node_schema_refuses_an_unknown_field_and_keeps_known_ones():
    comfy = __import__(f"{load_pack().__name__}.respec.comfy", fromlist=["_"])
    with pytest.raises(TypeError, match="no field"):
        comfy.node_schema(node_id="X", colour="red")
    s = comfy.node_schema(node_id="X", search_aliases=["y"], category="ReSpec")
    assert (s.node_id, s.category, s.search_aliases) == ("X", "ReSpec", ["y"])


def test_the_unload_node_runs_every_time_it_is_queued_and_shows_its_summary():
    node = dict(_v3_nodes())["ReSpecUnloadModels"]
    assert math.isnan(node.fingerprint_inputs(after=None))
    out = getattr(node, node.FUNCTION)(after=None)
    assert out.ui["text"][0] == json.dumps(json.loads(out.result[0]))


def test_a_call_reads_its_hidden_values_from_its_own_class_clone():
    comfy = __import__(f"{load_pack().__name__}.respec.comfy", fromlist=["_"])
    node = dict(_v3_nodes())["ReSpecUnloadModels"]
    call = node.PREPARE_CLASS_CLONE({"hidden_inputs": {comfy.io.Hidden.unique_id: "7"}})
    assert call.hidden.unique_id == "7" and call.hidden.prompt is None
    assert node.hidden.unique_id is None      # the node class itself is left as it was


def test_the_listing_comparison_leaves_out_what_this_machine_has_installed_and_nothing_else():
    listing = load_script("scripts/comfyui/object_info_listing.py")

    def loader(choices, installed, default="a"):
        tip = "A model. " + (f"Installed here: {', '.join(installed)}." if installed else "Nothing installed here yet.")
        return {"input": {"required": {"model": [choices, {"tooltip": tip, "default": default,
                                                           "respec_installed": installed}],
                                       "vae_file": [["(none)", "vae.safetensors"], {}]}}}
    here = loader(["tiny-folder", "b/id", "a/id"], ["tiny-folder", "b/id"], default="a/id")
    there = loader(["a/id", "b/id"], [], default="a/id")
    there["input"]["required"]["vae_file"][0] = ["(none)"]
    assert listing.differences({"n": here}, {"n": there}) == []
    assert listing.differences({"n": here}, {"n": loader(["a/id", "b/id"], [], default="b/id")})   # a default
    assert listing.differences({"n": here}, {"n": loader(["a/id", "c/id"], [], default="a/id")})   # a known id


def test_the_stand_in_refuses_a_schema_with_two_inputs_of_one_id_as_comfyui_does():
    comfy = __import__(f"{load_pack().__name__}.respec.comfy", fromlist=["_"])
    io = comfy.io
    schema = comfy.node_schema(node_id="X", inputs=[io.Int.Input(id="a", default=1), io.String.Input(id="a")])
    with pytest.raises(ValueError, match="unique"):
        schema.finalize()
