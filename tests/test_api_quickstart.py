"""scripts/api_quickstart.py against the local fake ComfyUI (tests/fake_comfyui.py) with the pack's
real /respec/ routes over a real session store: upload, fill the shipped API workflow, POST /prompt,
poll /history, GET /view, and undo through the rewind route."""
from __future__ import annotations

import importlib
import io
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, core
from fake_comfyui import FakeComfyUI

sys.path.insert(0, str(ROOT / "scripts"))
import api_quickstart  # noqa: E402


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture()
def served(pack, tmp_path):
    """A fake ComfyUI whose 'execution' of the conversational workflow does what the graph does to the
    session (turn 0 from the uploaded photo, then one edited turn) and saves a PNG for /view."""
    store = core(pack, "store").SessionStore(tmp_path / "sessions")
    routes = importlib.import_module(f"{pack.__name__}.nodes.routes")
    workflow = json.loads(api_quickstart.WORKFLOW.read_text())
    node_info = {n["class_type"]: {"input": {"required": {}}} for n in workflow.values()}
    srv = None

    def execute(prompt):
        by_type = {n["class_type"]: (i, n["inputs"]) for i, n in prompt.items()}
        photo = np.asarray(Image.open(io.BytesIO(srv.files[("input", "", by_type["LoadImage"][1]["image"])])))
        session = by_type["ReSpecHistoryStore"][1]["session_id"]
        request = next(n["inputs"]["value"] for n in prompt.values() if n.get("_meta", {}).get("title") == "Your request")
        hist = store.create(session, photo, exist_ok=True)
        edited = np.full_like(photo, 40 * hist.next_turn)
        store.append(session, edited, request)
        name = f"turn_{hist.next_turn:05d}_.png"
        buf = io.BytesIO()
        Image.fromarray(edited).save(buf, format="PNG")
        srv.files[("output", "respec", name)] = buf.getvalue()
        save_id = by_type["SaveImage"][0]
        return {save_id: {"images": [{"filename": name, "subfolder": "respec", "type": "output"}]}}

    srv = FakeComfyUI(node_info, execute, routes=lambda table: routes.add_routes(table, lambda root: store))
    with srv:
        yield srv, store


def test_one_turn_then_the_next_then_undo_through_the_api(served, tmp_path):
    srv, store = served
    photo = tmp_path / "photo.png"
    photo.write_bytes(_png((200, 30, 30)))
    out1 = tmp_path / "turn1.png"
    api_quickstart.run_turn(srv.url, photo, "add a hat", "demo", out1, seed=7, timeout=30)

    sent = srv.prompts[srv.accepted[-1]]
    by_type = {n["class_type"]: n["inputs"] for n in sent.values()}
    assert by_type["LoadImage"]["image"] == "photo.png" and srv.files[("input", "", "photo.png")] == photo.read_bytes()
    assert by_type["ReSpecHistoryStore"]["session_id"] == "demo" and by_type["RandomNoise"]["noise_seed"] == 7
    assert np.asarray(Image.open(out1)).max() == 40            # the image /view served is the saved turn 1
    assert len(store.load("demo")) == 2

    out2 = tmp_path / "turn2.png"
    api_quickstart.run_turn(srv.url, photo, "make the hat red", "demo", out2, timeout=30)
    assert [t.instruction for t in store.load("demo").turns[1:]] == ["add a hat", "make the hat red"]
    assert np.asarray(Image.open(out2)).max() == 80

    summary = api_quickstart.rewind(srv.url, "demo", 1)        # undo turn 2 through the pack's route
    assert [t["index"] for t in summary["turns"]] == [0, 1] and len(store.load("demo")) == 2
    assert api_quickstart.main(["--server", srv.url, "--session", "demo", "--rewind", "0"]) == 0
    assert len(store.load("demo")) == 1


def test_a_failed_prompt_is_reported_with_comfyuis_message(pack, tmp_path):
    workflow = json.loads(api_quickstart.WORKFLOW.read_text())
    node_info = {n["class_type"]: {"input": {"required": {}}} for n in workflow.values()}
    with FakeComfyUI(node_info, lambda p: {}, execution_error_for=lambda p: "UNETLoader:model file missing") as srv:
        photo = tmp_path / "photo.png"
        photo.write_bytes(_png((0, 0, 0)))
        with pytest.raises(RuntimeError, match="model file missing"):
            api_quickstart.run_turn(srv.url, photo, "add a hat", "demo", tmp_path / "o.png", timeout=30)


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="needs curl and jq")
def test_the_curl_commands_of_docs_api_md_do_the_same(served, tmp_path):
    """Both bash blocks of docs/api.md, run as written (only the server address changed)."""
    srv, store = served
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "docs/api.md").read_text(), re.S)
    script = "set -euo pipefail\n" + "\n".join(blocks).replace("S=http://127.0.0.1:8188", f"S={srv.url}")
    (tmp_path / "photo.png").write_bytes(_png((10, 120, 10)))
    (tmp_path / "workflows").symlink_to(ROOT / "workflows")
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert np.asarray(Image.open(tmp_path / "turn1.png")).max() == 40
    assert out.stdout.split()[-2:] == ["[0]", "1"] and len(store.load("demo")) == 1
