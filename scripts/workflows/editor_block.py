"""The editor of a chat graph as one replaceable block (issue 44), and the swap that proves it.

A conversation built by build_workflows.py's `_conversation_any_editor` keeps its editor in one group;
the UI file lists the group's node ids in `extra.respec.editor_block`. Its sockets are those of
ComfyUI's "Image Edit (...)" blueprints: what enters the block comes from nodes outside it (the
instruction, the current image, the references), and one IMAGE leaves it. Two such graphs agree on
everything outside their blocks, so an input of a block is named by the node outside that feeds it
(its class and output slot), and `swap_editor` puts one graph's block into the other: what a user
does by deleting the group and wiring another editor to the same sockets.

    python scripts/workflows/editor_block.py conversational_flux2_klein4b conversational_qwen_image_edit_2511 OUT.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class BlockError(ValueError):
    """A block that cannot be swapped: the message says which socket and why."""


BYPASSED = 4   # a bypassed node's UI mode: the API prompt leaves it out


def block_ids(ui: dict) -> set[str]:
    """The editor block's node ids (as the API prompt's keys: its bypassed nodes, such as Qwen's Lightning
    LoRA, are not in the prompt) of a UI file; BlockError when it has none."""
    ids = ((ui.get("extra") or {}).get("respec") or {}).get("editor_block")
    if not ids:
        raise BlockError("this graph has no editor block (extra.respec.editor_block): only the chat graphs built "
                         "by build_workflows.py's _conversation_any_editor have one")
    bypassed = {n["id"] for n in ui.get("nodes") or [] if n.get("mode") == BYPASSED}
    return {str(i) for i in ids if i not in bypassed}


def _links(api: dict):
    """(target node, input name, source node, source slot) for every link of an API prompt."""
    for nid, node in api.items():
        for name, value in node["inputs"].items():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                yield nid, name, value[0], value[1]


def sockets(api: dict, block: set[str]) -> tuple[dict, tuple[str, int], list[tuple[str, str]]]:
    """The block's sockets: ({(class outside, slot): [(block node, input)]}, its output (node, slot),
    [(node outside, input) it feeds]). BlockError when a node it names is missing, or when more than
    one output leaves it (a block gives the conversation one IMAGE)."""
    missing = sorted(block - set(api))
    if missing:
        raise BlockError(f"the editor block names nodes {missing} that the graph does not have")
    inputs: dict[tuple[str, int], list] = {}
    leaving: dict[tuple[str, int], list] = {}
    for target, name, source, slot in _links(api):
        if target in block and source not in block:
            inputs.setdefault((api[source]["class_type"], slot), []).append((target, name))
        elif source in block and target not in block:
            leaving.setdefault((source, slot), []).append((target, name))
    if len(leaving) != 1:
        names = [f"{api[n]['class_type']}#{s}" for n, s in leaving]
        raise BlockError(f"an editor block gives one IMAGE; {len(leaving)} outputs leave this one: {names}")
    (output, fed), = leaving.items()
    return inputs, output, fed


def _outside(api: dict, block: set[str], class_type: str) -> str:
    """The one node of `class_type` outside `block` (where a socket of the other block plugs in)."""
    found = [n for n, node in api.items() if n not in block and node["class_type"] == class_type]
    if len(found) != 1:
        raise BlockError(f"the new editor block reads an output of {class_type}, which this graph has "
                         f"{len(found)} times outside its block (it must have it once)")
    return found[0]


def swap_editor(api: dict, block: set[str], donor: dict, donor_block: set[str]) -> dict:
    """`api` with its editor block replaced by `donor`'s: the donor's block nodes get fresh ids, their
    inputs from outside their block plug into the same class's outputs here, and what this block's
    output fed reads the donor block's output. Neither prompt is changed."""
    _, _, fed = sockets(api, block)
    _, (out_node, out_slot), _ = sockets(donor, donor_block)
    out = {n: json.loads(json.dumps(node)) for n, node in api.items() if n not in block}
    start = max(int(n) for n in api) + 1
    new_id = {n: str(start + i) for i, n in enumerate(sorted(donor_block, key=int))}
    for n in sorted(donor_block, key=int):
        node = json.loads(json.dumps(donor[n]))
        for name, value in node["inputs"].items():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                source = value[0]
                node["inputs"][name] = [new_id[source] if source in donor_block
                                        else _outside(out, set(), donor[source]["class_type"]), value[1]]
        out[new_id[n]] = node
    for target, name in fed:
        out[target]["inputs"][name] = [new_id[out_node], out_slot]
    return out


def shipped(key: str) -> tuple[dict, set[str]]:
    """(API prompt, editor block ids) of a shipped graph, by its key."""
    index = json.loads((ROOT / "workflows" / "api" / "index.json").read_text(encoding="utf-8"))["workflows"]
    if key not in index:
        raise BlockError(f"not a shipped graph: {key!r}")
    api = json.loads((ROOT / "workflows" / "api" / index[key]["api"]).read_text(encoding="utf-8"))
    ui = json.loads((ROOT / "workflows" / index[key]["ui"]).read_text(encoding="utf-8"))
    return api, block_ids(ui)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write graph KEY's API prompt with the editor block of graph DONOR.")
    ap.add_argument("key")
    ap.add_argument("donor")
    ap.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    try:
        api, block = shipped(a.key)
        donor, donor_block = shipped(a.donor)
        swapped = swap_editor(api, block, donor, donor_block)
    except BlockError as e:
        print(f"cannot swap: {e}", file=sys.stderr)
        return 2
    a.out.write_text(json.dumps(swapped, indent=1) + "\n", encoding="utf-8")
    print(f"{a.out}: {a.key} with the editor block of {a.donor} ({len(donor_block)} nodes for {len(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
