"""Replay issue 12's upload-then-queue attack against a real ComfyUI with the pack installed.

    python scripts/comfyui/check_upload_attack.py --comfyui /path/to/ComfyUI --python /path/to/its/python

1. starts ComfyUI (CPU, API nodes off, 127.0.0.1, a temporary --base-directory with this pack);
2. uploads, through /upload/image as any client of a --listen server could, a file named
   __init__.py into input/x/omnigen2/ whose code would create a marker file, plus a small PNG;
3. queues LoadImage -> OmniGen2 Loader + OmniGen2 In-Context Edit -> PreviewImage with an extra
   "omnigen2_path" input naming the uploaded folder (the widget the pack used to have), once as a
   relative and once as an absolute path;
4. queues the VLM loader (hf_model) and the Flux.2 loader (custom_model), each feeding PreviewAny,
   naming the uploaded folder (absolute, and as a `..` escape from the model folder) and /etc, then
   a Hugging Face id that is not on the machine;
5. passes when ComfyUI wrote the uploaded file (the attack's first half works), each OmniGen2
   prompt ends in an execution error whose message is the pack's "OmniGen2 is not installed"
   instructions, each loader path ends in the pack's "outside the model folders" refusal, the id
   in "downloads are off" (looked up, nothing fetched), and the marker file was never created.
   Exit status 0 = passed.
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from comfyui_harness import free_port, http_json, log, start_comfyui, stop

ROOT = Path(__file__).resolve().parents[2]


def upload(url: str, folder: str, name: str, data: bytes) -> dict:
    boundary = uuid.uuid4().hex
    fields = [("image", name, data), ("subfolder", None, folder.encode()), ("type", None, b"input"),
              ("overwrite", None, b"true")]
    body = b""
    for field, filename, value in fields:
        disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    req = urllib.request.Request(f"{url}/upload/image", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def defaults(info: dict) -> dict:
    """Each widget's default from /object_info (combo: its first choice)."""
    out = {}
    for name, spec in info["input"]["required"].items():
        kind, opts = spec[0], (spec[1] if len(spec) > 1 else {})
        if kind == "COMBO":   # a V3 node's drop-down lists its choices in its options
            kind = opts.get("options") or []
        if isinstance(kind, list):
            out[name] = opts.get("default", kind[0])
        elif "default" in opts:
            out[name] = opts["default"]
    return out


def attack(url: str, path_value: str) -> dict:
    _, info = http_json("GET", f"{url}/object_info/ReSpecOmniGen2Loader")
    _, edit_info = http_json("GET", f"{url}/object_info/ReSpecOmniGen2Edit")
    loader = dict(defaults(info["ReSpecOmniGen2Loader"]), omnigen2_path=path_value)
    edit = dict(defaults(edit_info["ReSpecOmniGen2Edit"]), editor=["2", 0], editor_images=["1", 0],
                current_image=["1", 0], instruction="remove the hat")
    prompt = {"1": {"class_type": "LoadImage", "inputs": {"image": "photo.png"}},
              "2": {"class_type": "ReSpecOmniGen2Loader", "inputs": loader},
              "3": {"class_type": "ReSpecOmniGen2Edit", "inputs": edit},
              "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}}
    return queue(url, prompt)


def loader_source(url: str, node: str, key: str, value: str) -> dict:
    """Queue `node` with its free-text model source `key` set to `value`, feeding PreviewAny."""
    _, info = http_json("GET", f"{url}/object_info/{node}")
    prompt = {"1": {"class_type": node, "inputs": dict(defaults(info[node]), **{key: value})},
              "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}
    return queue(url, prompt)


def queue(url: str, prompt: dict) -> dict:
    """Queue `prompt` and wait for its end: how it ended and the execution error, if any."""
    status, body = http_json("POST", f"{url}/prompt", {"prompt": prompt, "client_id": "attack"})
    if status != 200:
        return {"queued": False, "status": status, "body": body}
    pid = body["prompt_id"]
    for _ in range(240):
        _, hist = http_json("GET", f"{url}/history/{pid}")
        if pid in hist:
            msgs = hist[pid]["status"]["messages"]
            err = next((d for kind, d in msgs if kind == "execution_error"), None)
            return {"queued": True, "status_str": hist[pid]["status"]["status_str"],
                    "node_type": err and err["node_type"], "exception_type": err and err["exception_type"],
                    "message": err and err["exception_message"]}
        time.sleep(0.5)
    return {"queued": True, "status_str": "timeout"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--comfyui", required=True)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="respec-attack-"))
    (base / "custom_nodes").mkdir()
    (base / "custom_nodes" / "ReSpec-ComfyUI").symlink_to(ROOT)
    marker = base / "PAYLOAD-RAN"
    port, proc, ok = free_port(), None, False
    try:
        proc = start_comfyui(Path(a.comfyui), a.python, base, port, env={"RESPEC_HOME": str(base / "home")})
        url = f"http://127.0.0.1:{port}"
        from PIL import Image
        png = io.BytesIO()
        Image.new("RGB", (64, 64), (90, 120, 200)).save(png, format="PNG")
        upload(url, "", "photo.png", png.getvalue())
        payload = f"open({str(marker)!r}, 'w').write('ran')\n".encode()
        stored = upload(url, "x/omnigen2", "__init__.py", payload)
        written = (base / "input" / "x" / "omnigen2" / "__init__.py").read_bytes() == payload
        log(f"upload: {stored}; file written under input/: {written}")
        results = {value: attack(url, value) for value in ("input/x", str(base / "input" / "x"))}
        for value, r in results.items():
            log(f"omnigen2_path={value!r}: {json.dumps(r)[:600]}")
        refused = all(r.get("status_str") == "error" and r.get("node_type") == "ReSpecOmniGen2Loader"
                      and "not installed" in (r.get("message") or "") for r in results.values())
        sources = {}
        for node, key in (("ReSpecVLMLoader", "hf_model"), ("ReSpecFlux2Loader", "custom_model")):
            for value in (str(base / "input" / "x"), "../../input/x", "/etc", "nobody/not-a-model"):
                sources[(node, value)] = r = loader_source(url, node, key, value)
                log(f"{node}.{key}={value!r}: {json.dumps(r)[:400]}")
        confined = all(r.get("status_str") == "error" and r.get("node_type") == node and
                       ("downloads are off" if value == "nobody/not-a-model" else "outside the model folders")
                       in (r.get("message") or "") for (node, value), r in sources.items())
        log(f"every loader path refused, the id looked up offline: {confined}")
        ok = written and refused and confined and not marker.exists()
        log(f"payload ran: {marker.exists()}; every prompt failed with the install message: {refused}")
        log("PASS: the upload-then-queue attack runs nothing" if ok else "FAIL")
    finally:
        stop(proc)
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
