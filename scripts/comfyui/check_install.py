"""Check what installing the pack does to a Python environment, in fresh virtual environments.

    python scripts/comfyui/check_install.py comfyui [--comfyui /path/to/ComfyUI]
        A venv with ComfyUI's requirements (torch pinned to TORCH below), then
        `pip install -r requirements.txt`: prints the `pip freeze` diff and fails if any package
        that was already there changed version (added packages are listed, not failures).

    python scripts/comfyui/check_install.py extras
        A venv with torch and requirements.txt only: the pack loads (editing and controller nodes
        registered, evaluation nodes absent with one log line naming the extra); then the eval
        extra (requirements-eval.txt): every node registers. Prints the size (MB) and package
        count of each install.

Both need the package index (torch==2.14.1 may come from a local mirror). Nothing is left behind
unless --keep DIR is given. Exit status 0 = every check passed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH = ["torch==2.14.1", "torchvision==0.29.1"]
EVAL_NODES = {"ReSpecMaskerLoader", "ReSpecOccluderMask", "ReSpecTrajectoryMasks", "ReSpecScorerLoader",
              "ReSpecOccurScore", "ReSpecScenarioMasks"}
# Loads the pack the way ComfyUI does (its folder as a package) and reports nodes and log lines.
LOAD_PACK = """
import importlib.util, json, logging, sys
lines = []
class Catch(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("respec").addHandler(Catch())
spec = importlib.util.spec_from_file_location("ReSpec-ComfyUI", sys.argv[1] + "/__init__.py",
                                              submodule_search_locations=[sys.argv[1]])
m = importlib.util.module_from_spec(spec); sys.modules["ReSpec-ComfyUI"] = m; spec.loader.exec_module(m)
print(json.dumps({"nodes": sorted(m.NODE_CLASS_MAPPINGS), "log": lines}))
"""


def run(cmd: list[str], **kw) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def make_venv(where: Path) -> Path:
    run([sys.executable, "-m", "venv", str(where)])
    py = where / "bin" / "python"
    run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    return py


def pip(py: Path, *args: str) -> None:
    run([str(py), "-m", "pip", "install", "-q", *args])


def freeze(py: Path) -> dict[str, str]:
    out = run([str(py), "-m", "pip", "list", "--format=json", "--exclude", "pip"])
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out)}


def site_mb(py: Path) -> float:
    site = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def load_pack(py: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir(), "HF_HUB_OFFLINE": "1"}
    out = run([str(py), "-c", LOAD_PACK, str(ROOT)], env=env, cwd=tempfile.gettempdir())
    return json.loads(out.strip().splitlines()[-1])


def check_comfyui(work: Path, comfyui: Path) -> bool:
    py = make_venv(work / "venv")
    reqs = comfyui / "requirements.txt"
    constraints = work / "torch-pins.txt"
    constraints.write_text("\n".join(TORCH) + "\n")
    print(f"venv with {reqs} (+ {' '.join(TORCH)}) ...", flush=True)
    pip(py, *TORCH)
    pip(py, "-r", str(reqs), "-c", str(constraints))
    before = freeze(py)
    print(f"  {len(before)} packages; now pip install -r requirements.txt ...", flush=True)
    pip(py, "-r", str(ROOT / "requirements.txt"))   # exactly what a user runs
    after = freeze(py)
    changed = {n: (v, after[n]) for n, v in before.items() if n in after and after[n] != v}
    removed = sorted(n for n in before if n not in after)
    added = {n: v for n, v in after.items() if n not in before}
    print(f"pip freeze diff: {len(changed)} changed, {len(removed)} removed, {len(added)} added")
    for n, (a, b) in sorted(changed.items()):
        print(f"  CHANGED {n}: {a} -> {b}")
    for n in removed:
        print(f"  REMOVED {n}")
    for n, v in sorted(added.items()):
        print(f"  added   {n}=={v}")
    ok = not changed and not removed
    print("OK: no package of ComfyUI's environment changed version" if ok else "FAIL: the install changed ComfyUI's packages")
    return ok


def check_extras(work: Path) -> bool:
    py = make_venv(work / "venv")
    print(f"venv with {' '.join(TORCH)} ...", flush=True)
    pip(py, *TORCH)
    base, base_mb = freeze(py), site_mb(py)
    print(f"  torch alone: {len(base)} packages, {base_mb:.0f} MB")
    pip(py, "-r", str(ROOT / "requirements.txt"))
    core, core_mb = freeze(py), site_mb(py)
    print(f"core (requirements.txt): +{len(core) - len(base)} packages, +{core_mb - base_mb:.0f} MB "
          f"({len(core)} packages, {core_mb:.0f} MB with torch)")
    print(f"  added: {', '.join(sorted(set(core) - set(base)))}")
    got = load_pack(py)
    eval_absent = not (EVAL_NODES & set(got["nodes"]))
    one_line = len(got["log"]) == 1 and "requirements-eval.txt" in got["log"][0]
    print(f"  pack loads: {len(got['nodes'])} nodes registered; evaluation nodes absent: {eval_absent}; "
          f"log: {got['log']}")
    pip(py, "-r", str(ROOT / "requirements-eval.txt"))
    full, full_mb = freeze(py), site_mb(py)
    print(f"eval extra (requirements-eval.txt): +{len(full) - len(core)} packages, +{full_mb - core_mb:.0f} MB "
          f"({len(full)} packages, {full_mb:.0f} MB with torch)")
    print(f"  added: {', '.join(sorted(set(full) - set(core)))}")
    changed = sorted(n for n in core if full.get(n) != core[n])
    if changed:
        print(f"  the extra changed: {', '.join(f'{n} {core[n]} -> {full.get(n)}' for n in changed)}")
    got_full = load_pack(py)
    all_nodes = EVAL_NODES <= set(got_full["nodes"]) and not got_full["log"]
    print(f"  pack loads: {len(got_full['nodes'])} nodes registered; evaluation nodes present: {all_nodes}")
    ok = eval_absent and one_line and all_nodes and "ReSpecPreservationTarget" in got["nodes"]
    print("OK" if ok else "FAIL")
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("check", choices=["comfyui", "extras"])
    p.add_argument("--comfyui", default="/work/comfyui", help="a ComfyUI checkout (for its requirements.txt)")
    p.add_argument("--keep", default=None, help="build the venv here and keep it")
    a = p.parse_args(argv)
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="respec-install-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        ok = check_comfyui(work, Path(a.comfyui)) if a.check == "comfyui" else check_extras(work)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
