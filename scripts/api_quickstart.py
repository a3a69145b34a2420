"""One conversational turn through ComfyUI's HTTP API, then undo it (standard library only).

    python scripts/api_quickstart.py --server http://127.0.0.1:8188 --image photo.png \
        --request "add a bouquet of sunflowers in front of the person" --session demo --out turn1.png
    python scripts/api_quickstart.py --server http://127.0.0.1:8188 --session demo --rewind 0

A turn: 1 upload the photo (POST /upload/image), 2 fill in the shipped API workflow
(workflows/api/ReSpec chat - FLUX.2 klein 9B.api.json: its Load Image, History Store and request nodes),
3 queue it (POST /prompt), 4 wait for it (poll GET /history/<prompt_id>; the /ws websocket
announces the same), 5 download the edited image (GET /view). Queue the same workflow again with
the next request and the same session for turn 2. `--rewind K` keeps turns 0..K of the session
through the pack's route (POST /respec/sessions/<id>/rewind). The same steps as curl commands are
in docs/api.md.
"""
from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

API_DIR = Path(__file__).resolve().parent.parent / "workflows" / "api"
# The shipped files are named by their titles; index.json maps each graph's key to its file.
WORKFLOW = API_DIR / json.loads((API_DIR / "index.json").read_text(encoding="utf-8"))["workflows"][
    "conversational_flux2"]["api"]


def call(server: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    req = urllib.request.Request(server + path, data=body, headers=headers or {}, method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def post_json(server: str, path: str, data: dict) -> dict:
    return json.loads(call(server, path, json.dumps(data).encode(), {"Content-Type": "application/json"}))


def upload(server: str, image: Path) -> str:
    """1. The photo into ComfyUI's input folder; returns the name Load Image takes."""
    boundary = uuid.uuid4().hex
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{image.name}"\r\n'
            f'Content-Type: image/png\r\n\r\n').encode() + image.read_bytes() + \
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="overwrite"\r\n\r\ntrue\r\n--{boundary}--\r\n'.encode()
    info = json.loads(call(server, "/upload/image", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}))
    return f"{info['subfolder']}/{info['name']}" if info.get("subfolder") else info["name"]


def fill(workflow: dict, image_name: str, request: str, session: str, seed: int) -> dict:
    """2. Set the photo, the session and the request in the API workflow (found by node type / title)."""
    for node in workflow.values():
        kind, title, inputs = node["class_type"], node.get("_meta", {}).get("title", ""), node["inputs"]
        if kind == "LoadImage":
            inputs["image"] = image_name
        elif kind == "ReSpecHistoryStore":
            inputs.update(mode="new", session_id=session)   # "new" continues a session with the same photo
        elif kind == "PrimitiveStringMultiline" and title == "Your request":
            inputs["value"] = request
        elif kind == "RandomNoise":
            inputs["noise_seed"] = seed
    return workflow


def run_turn(server: str, image: Path, request: str, session: str, out: Path, seed: int = 0,
             timeout: float = 3600) -> dict:
    """Steps 1-5 for one turn; returns the history entry of the finished prompt."""
    workflow = fill(json.loads(WORKFLOW.read_text()), upload(server, image), request, session, seed)
    prompt_id = post_json(server, "/prompt", {"prompt": workflow, "client_id": uuid.uuid4().hex})["prompt_id"]  # 3
    deadline = time.monotonic() + timeout
    while True:                                                                   # 4
        entry = json.loads(call(server, f"/history/{prompt_id}")).get(prompt_id)
        if entry and entry.get("status", {}).get("completed") is not None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"prompt {prompt_id} did not finish within {timeout} s")
        time.sleep(1.0)
    if not entry["status"]["completed"]:
        raise RuntimeError(f"the prompt failed: {json.dumps(entry['status'].get('messages'))[:2000]}")
    saved = [im for o in entry["outputs"].values() for im in o.get("images", []) if im.get("type") == "output"]
    query = urllib.parse.urlencode({k: saved[-1][k] for k in ("filename", "subfolder", "type")})
    out.write_bytes(call(server, f"/view?{query}"))                               # 5
    return entry


def rewind(server: str, session: str, turn: int) -> dict:
    """Undo: keep turns 0..turn of the session (the pack's route)."""
    return post_json(server, f"/respec/sessions/{urllib.parse.quote(session)}/rewind", {"turn": turn})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default="http://127.0.0.1:8188")
    p.add_argument("--session", default="demo", help="session id: letters, digits, _ and -")
    p.add_argument("--image", type=Path, help="the original photo (turn 0)")
    p.add_argument("--request", help="this turn's request")
    p.add_argument("--out", type=Path, default=Path("turn.png"), help="where to save the edited image")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rewind", type=int, default=None, metavar="K", help="keep turns 0..K instead of editing")
    a = p.parse_args(argv)
    if a.rewind is not None:
        print(json.dumps(rewind(a.server, a.session, a.rewind), indent=1))
        return 0
    if not (a.image and a.request):
        p.error("give --image and --request for a turn, or --rewind K")
    run_turn(a.server, a.image, a.request, a.session, a.out, a.seed)
    print(f"saved {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
