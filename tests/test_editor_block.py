"""The editor as one replaceable block (issue 44): scripts/workflows/editor_block.py on the shipped chat graphs."""
from __future__ import annotations

import json

import pytest

from test_workflows import _script, _ui

editor_block = _script("editor_block")
KLEIN, QWEN = "conversational_flux2_klein4b", "conversational_qwen_image_edit_2511"


def _canonical(api: dict) -> list[str]:
    """The prompt up to node ids and titles: each node as its class, widget values and (recursively) its
    sources. History Append's meta (the editor's name for the record) is left out."""
    memo: dict[str, tuple] = {}

    def sig(n):
        if n not in memo:
            items = []
            for k, v in sorted(api[n]["inputs"].items()):
                if k == "meta":
                    continue
                linked = isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
                items.append((k, sig(v[0]), v[1]) if linked else (k, json.dumps(v)))
            memo[n] = (api[n]["class_type"], tuple(items))
        return memo[n]

    return sorted(repr(sig(n)) for n in api)


def test_both_any_editor_chat_graphs_keep_their_editor_in_one_block_with_one_image_out():
    for key in (KLEIN, QWEN):
        api, block = editor_block.shipped(key)
        inputs, (node, slot), fed = editor_block.sockets(api, block)
        assert {cls for cls, _ in inputs} <= {"ReSpecProvenanceSelector", "ReSpecEditorImageSlots"}
        assert api[node]["class_type"] == "ImageScale" and slot == 0
        assert [api[t]["class_type"] for t, _ in fed] == ["ReSpecRevealComposite"]
        group = next(g for g in _ui(key)["groups"] if g["title"].startswith("Editor:"))
        x, y, w, h = group["bounding"]
        for n in _ui(key)["nodes"]:
            inside = x <= n["pos"][0] < x + w and y <= n["pos"][1] < y + h
            assert inside == (str(n["id"]) in block or n["mode"] == 4 and n["type"] == "LoraLoaderModelOnly"), n["type"]


@pytest.mark.parametrize("key,donor", [(KLEIN, QWEN), (QWEN, KLEIN)])
def test_swapping_the_block_gives_the_other_editors_graph(key, donor):
    api, block = editor_block.shipped(key)
    other, other_block = editor_block.shipped(donor)
    before = json.dumps(api, sort_keys=True)
    swapped = editor_block.swap_editor(api, block, other, other_block)
    assert json.dumps(api, sort_keys=True) == before                    # the input is not changed
    assert _canonical(swapped) == _canonical(other)
    assert not block & set(swapped)                                      # the old block is gone


def test_every_link_of_a_swapped_graph_joins_an_output_to_an_input_of_its_type():
    wg = _script("workflow_graph")
    specs = wg.all_specs()
    api, block = editor_block.shipped(KLEIN)
    swapped = editor_block.swap_editor(api, block, *editor_block.shipped(QWEN))
    for target, name, source, slot in editor_block._links(swapped):
        out_type = specs[swapped[source]["class_type"]]["output"][slot]
        in_type = wg.input_type(wg.input_entry(specs[swapped[target]["class_type"]], name)[1])
        assert wg.types_match(out_type, in_type), (swapped[target]["class_type"], name, out_type, in_type)


def test_a_block_that_cannot_be_swapped_says_why():
    api, block = editor_block.shipped(KLEIN)
    qwen, qwen_block = editor_block.shipped(QWEN)
    with pytest.raises(editor_block.BlockError, match="outputs leave"):
        leaky = json.loads(json.dumps(api))
        save = next(n for n, v in leaky.items() if v["class_type"] == "SaveImage")
        sampler = next(n for n in block if leaky[n]["class_type"] == "VAEDecode")
        leaky[save]["inputs"]["images"] = [sampler, 0]
        editor_block.sockets(leaky, block)
    with pytest.raises(editor_block.BlockError, match="ReSpecEditorImageSlots"):
        no_slots = {n: v for n, v in api.items() if v["class_type"] != "ReSpecEditorImageSlots"}
        editor_block.swap_editor(no_slots, block, qwen, qwen_block)
    with pytest.raises(editor_block.BlockError, match="no editor block"):
        editor_block.block_ids(_ui("conversational_flux2"))
