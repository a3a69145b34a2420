"""The pack's nodes as a ComfyUI server lists them in /object_info, kept and compared (part of
`scripts/comfyui/check_in_comfyui.py`; not part of the pack).

Moving the nodes to ComfyUI's V3 schema (issue 46) must not change what a saved workflow or an API
graph depends on: every node's id, its inputs (names, types, defaults, ranges, options), their
order, and its outputs. `--object-info-out FILE` writes the listing of a run; `--object-info-baseline
FILE` compares the run's listing with one written before and fails on any difference.

A V3 node is listed with a few differences that change nothing a graph holds; `normalise` writes
both forms alike so that the comparison sees only real changes:
- a drop-down is `["COMBO", {"options": [...], ...}]` instead of `[[...], {...}]`;
- a hidden input is `["UNIQUE_ID"]` instead of `"UNIQUE_ID"`, and an output node gains the hidden
  `prompt` and `extra_pnginfo`;
- new flags at the top (`deprecated`, `experimental`, `api_node`, `dev_only`, `output_matchtypes`,
  `price_badge`, `essentials_category`: all false or null), and `search_aliases` null for `[]`;
- a drop-down's `multiselect: false`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

# Top-level keys a V3 listing adds with an empty value (nothing a graph depends on).
V3_FLAGS = ("deprecated", "experimental", "api_node", "dev_only", "output_matchtypes", "price_badge",
            "essentials_category")
V3_HIDDEN = ("prompt", "extra_pnginfo")


def _input(spec):
    """One input's [type, options] in one form for V1 and V3 listings."""
    if not isinstance(spec, (list, tuple)) or not spec:
        return spec
    kind, opts = spec[0], dict(spec[1]) if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if kind == "COMBO" and "options" in opts:
        kind = list(opts.pop("options"))
    if isinstance(kind, list) and opts.get("multiselect") is False:
        opts.pop("multiselect")
    return [kind, opts] if opts else [kind]


def normalise(entry: dict) -> dict:
    """A node's /object_info entry with the V3-only differences written the V1 way."""
    out = {k: v for k, v in entry.items() if not (k in V3_FLAGS and v in (None, False))}
    if out.get("search_aliases") is None and "search_aliases" in out:
        out["search_aliases"] = []
    inputs = {}
    for section, specs in (entry.get("input") or {}).items():
        items = {}
        for name, spec in (specs or {}).items():
            if section == "hidden":
                if name in V3_HIDDEN and entry.get("output_node"):
                    continue
                spec = spec[0] if isinstance(spec, (list, tuple)) and len(spec) == 1 else spec
                items[name] = spec
            else:
                items[name] = _input(spec)
        if items:
            inputs[section] = items
    out["input"] = inputs
    order = {s: [n for n in names if not (s == "hidden" and n in V3_HIDDEN and entry.get("output_node"))]
             for s, names in (entry.get("input_order") or {}).items()}
    out["input_order"] = {s: names for s, names in order.items() if names}
    return out


MODEL_FILE = re.compile(r"\.(safetensors|sft|pt|pth|bin|ckpt|gguf)$")
INSTALLED_LINE = re.compile(r"\s*(Installed here: |Nothing installed here yet\.).*$", re.S)


def machine_neutral(entry: dict) -> dict:
    """A normalised entry less what depends on the machine that lists it: the model files its model
    folders hold, and on a loader's model drop-down the installed / not installed split (its order,
    its tooltip's last line and `respec_installed`; respec.models.installed_first). The known ids,
    the options' names and the defaults are still compared."""
    entry = json.loads(json.dumps(entry))
    for section in ("required", "optional"):
        for spec in (entry.get("input", {}).get(section) or {}).values():
            opts = spec[-1] if len(spec) > 1 and isinstance(spec[-1], dict) else {}
            if isinstance(spec[0], list):
                spec[0] = [c for c in spec[0] if not MODEL_FILE.search(str(c))]
            if "respec_installed" in opts:
                # The model folders found here (no "/": a Hugging Face id has one) come and go with
                # the machine; the known ids stay, in any order.
                local = {c for c in opts["respec_installed"] or [] if "/" not in str(c)}
                opts["respec_installed"] = "(this machine's)"
                opts["tooltip"] = INSTALLED_LINE.sub("", opts.get("tooltip", ""))
                if isinstance(spec[0], list):
                    spec[0] = sorted(c for c in spec[0] if c not in local)
    return entry


def listing(info: dict, nodes: list[str]) -> dict:
    """The pack's nodes (`nodes`: their ids) from /object_info, normalised, by id."""
    return {n: normalise(info[n]) for n in sorted(nodes) if n in info}


def differences(before: dict, after: dict) -> list[str]:
    """Every difference between two listings, one line each ([] = the same), what depends on the
    machine left out (machine_neutral)."""
    before = {n: machine_neutral(e) for n, e in before.items()}
    after = {n: machine_neutral(e) for n, e in after.items()}
    out = [f"{n}: gone" for n in sorted(set(before) - set(after))]
    out += [f"{n}: new" for n in sorted(set(after) - set(before))]
    for n in sorted(set(before) & set(after)):
        a, b = before[n], after[n]
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"{n}.{key}: {json.dumps(a.get(key))[:300]} -> {json.dumps(b.get(key))[:300]}")
    return out


def write(path: Path, info: dict, nodes: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(listing(info, nodes), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def compare(path: Path, info: dict, nodes: list[str]) -> list[str]:
    """The differences between the listing kept in `path` and this server's."""
    return differences(json.loads(path.read_text(encoding="utf-8")), listing(info, nodes))


# The stand-in's parameters that must exist in ComfyUI's io, with the same default.
STANDIN_PARAMS = """
import dataclasses, importlib.util, inspect, json, sys
sys.path.insert(0, '.')
from comfy_api.latest import io as real
spec = importlib.util.spec_from_file_location('standin', sys.argv[1]); mine = importlib.util.module_from_spec(spec)
sys.modules['standin'] = mine; spec.loader.exec_module(mine)
out = []
for name in ('Image', 'Mask', 'Latent', 'Conditioning', 'Vae', 'AnyType', 'Int', 'Float', 'String', 'Boolean', 'Combo'):
    for part in ('Input', 'Output'):
        a, b = getattr(getattr(mine, name), part), getattr(getattr(real, name), part)
        pa, pb = inspect.signature(a.__init__).parameters, inspect.signature(b.__init__).parameters
        for p, v in pa.items():
            if p not in pb:
                out.append(f'io.{name}.{part}: ComfyUI has no parameter {p}')
            elif v.default is not inspect.Parameter.empty and pb[p].default != v.default:
                out.append(f'io.{name}.{part}({p}=): default {v.default!r} here, {pb[p].default!r} in ComfyUI')
fields = {f.name for f in dataclasses.fields(real.Schema)}
out += [f'io.Schema: ComfyUI has no field {f.name}' for f in dataclasses.fields(mine.Schema)
        if f.name not in fields and f.name != 'search_aliases']
out += [f'io.Hidden.{h.name}: not in ComfyUI' for h in mine.Hidden if getattr(real.Hidden, h.name, None) != h.value]
print(json.dumps(out))
"""


def check_standin(info: dict, standin: dict, python: str, comfy: Path) -> list[str]:
    """The failures: a V3 node the pack's stand-in (respec/comfy_io.py) lists otherwise than this
    server, or a stand-in parameter ComfyUI's io lacks (search_aliases: 0.24+, dropped before)."""
    import subprocess
    from comfyui_harness import log
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([python, "-c", STANDIN_PARAMS, str(root / "respec" / "comfy_io.py")], cwd=str(comfy),
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return [f"stand-in: could not compare with ComfyUI's io: {out.stderr[-1500:]}"]
    problems = json.loads(out.stdout.strip().splitlines()[-1])
    for name, mine in sorted(standin.items()):
        theirs = {k: v for k, v in info.get(name, {}).items() if k in mine and k != "python_module"}
        problems += [f"stand-in lists {d}" for d in differences(
            {name: normalise(theirs)}, {name: normalise({k: v for k, v in mine.items() if k in theirs})})]
    log(f"{'FAIL' if problems else 'PASS'}  stand-in: the pack's V3 schema stand-in against this ComfyUI's io: "
        f"{len(standin)} V3 node(s) listed alike, parameters {'differ' if problems else 'all in ComfyUI'}: {problems[:10]}")
    return [f"stand-in: {p}" for p in problems]
