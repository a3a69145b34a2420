"""scripts/bench/bench_gpu.py (real-size GPU timings) and scripts/bench/real_size.py: the code paths
on toy sizes on the CPU (the timings themselves come from a GPU run and are never asserted here),
the real-size configs against the published parameter counts, and the docs writer."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scripts" / "bench"


def _load(name: str):
    return load_script(f"scripts/bench/{name}.py")


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(BENCH / "bench_gpu.py"), "--tiny", "--out", str(out), *args],
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_real_size_configs_build_the_published_parameter_counts():
    torch = pytest.importorskip("torch")
    rs = _load("real_size")
    from transformers import AutoModelForImageTextToText

    from respec.tiny.tokenizer import build_tokenizer

    meta = torch.device("meta")   # shapes only: no memory, no init cost
    klein9, klein4 = rs.build_klein("9B", meta, torch.bfloat16), rs.build_klein("4B", meta, torch.bfloat16)
    with rs.building_on(meta, torch.bfloat16):
        vlm = AutoModelForImageTextToText.from_config(rs.qwen3vl_config("8B", build_tokenizer()), dtype=torch.bfloat16)
    qwen_edit = rs.build_qwen_image_edit("2511", meta, torch.bfloat16)
    sam = rs.build_sam("vit_h", meta)
    built = {"klein 9B transformer": klein9.transformer, "Qwen3-8B text encoder": klein9.text_encoder,
             "FLUX.2 VAE": klein9.vae, "Qwen3-4B text encoder": klein4.text_encoder, "Qwen3-VL-8B": vlm,
             "Qwen-Image-Edit-2511 transformer": qwen_edit.transformer,
             "Qwen2.5-VL-7B text encoder": qwen_edit.text_encoder, "SAM vit_h image encoder": sam.image_encoder}
    published = {k: v for k, (v, _) in rs.PUBLISHED.items() if v is not None}
    assert set(published) == set(built)
    for label, module in built.items():
        billions = rs.count_params(module) / 1e9
        # the published figures are rounded to 3 significant digits
        assert billions == pytest.approx(published[label], rel=0.006), label
    # klein 4B has no published count beyond its name; its block counts give 3.88 B
    assert rs.count_params(klein4.transformer) / 1e9 == pytest.approx(3.8755, abs=1e-3)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpu")
    proc = _run(out)
    return out, proc


@pytest.mark.slow
def test_tiny_run_goes_through_every_stage(tiny_run):
    out, proc = tiny_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "bench_gpu.json").read_text())
    stages = results["stages"]
    assert list(stages) == ["controller", "klein9b", "klein4b", "sam", "qwen_edit"]
    assert {s["status"] for s in stages.values()} == {"ok"}
    # every stage's models are gone before the next stage (on a GPU they would stack up otherwise)
    assert [s["models_alive_after_free"] for s in stages.values()] == [0] * 5
    # the weights are random, not zeros (timings on zeros can flatter)
    assert all(p["zero_fraction"] < 0.5 for s in stages.values() for p in s["parts"].values())

    c = stages["controller"]
    assert c["new_tokens"] == 8                              # --controller-tokens 8 in --tiny
    assert c["images"] == 5 and c["image_tokens"] > 0 and c["prompt_tokens"] > c["image_tokens"]
    assert c["prefill_s"] > 0 and c["decode_token_s"] > 0 and c["call_s"] >= c["prefill_s"]
    assert c["extrapolated"]["768 tokens"] > c["extrapolated"]["256 tokens"]

    for name, refs, paper in (("klein9b", 2, 30), ("klein4b", 2, 30), ("qwen_edit", 3, 40)):
        s = stages[name]
        assert s["steps"] == 2 and s["references"] == refs
        assert s["reference_encode_calls"] == refs            # each reference VAE-encoded once per edit
        assert s["turn"] == {"steps": paper, "extrapolated": True, "seconds": s["turn"]["seconds"]}
        assert s["turn"]["seconds"] > paper * s["per_step_s"]
        assert s["per_step_s"] > 0 and s["decode_s"] > 0 and s["text_encode_s"] > 0
    # klein caches the empty negative after the warm-up: one text-encoder call in the timed edit
    assert stages["klein9b"]["text_encode_calls"] == 1
    assert stages["qwen_edit"]["text_encode_calls"] == 2
    assert stages["sam"]["encode_s"] > 0 and stages["sam"]["box_prompt_s"] > 0

    markdown = (out / "bench_gpu.md").read_text()
    assert "FLUX.2 [klein] base 9B (toy size, CPU)" in markdown and "Qwen3-VL-8B (toy size, CPU)" in markdown
    assert "at 30 steps (extrapolated)" in markdown and "Not measured" not in markdown


@pytest.mark.slow
def test_write_docs_fills_the_marked_sections_of_the_real_pages(tiny_run, tmp_path):
    out, _ = tiny_run
    bench = _load("bench_gpu")
    for rel in bench.DOCS.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    before = {rel: (tmp_path / rel).read_text() for rel in bench.DOCS.values()}
    sections = bench.render(json.loads((out / "bench_gpu.json").read_text()))
    assert sorted(bench.write_docs(sections, root=tmp_path)) == sorted(bench.DOCS.values())
    for name, rel in bench.DOCS.items():
        text = (tmp_path / rel).read_text()
        start, end = f"<!-- bench_gpu:{name} -->", f"<!-- /bench_gpu:{name} -->"
        assert sections[name].strip() in text and "Not measured yet" not in text
        # only the marked section changed
        assert text.split(start)[0] == before[rel].split(start)[0]
        assert text.split(end)[1] == before[rel].split(end)[1]
    assert bench.write_docs(sections, root=tmp_path) == []      # filling again changes nothing

    (tmp_path / "docs" / "memory.md").write_text("# no markers\n")
    with pytest.raises(SystemExit, match="docs/memory.md has no <!-- bench_gpu:memory -->"):
        bench.write_docs(sections, root=tmp_path)


@pytest.mark.slow
def test_a_stage_past_its_cap_is_recorded_and_the_next_stage_still_runs(tmp_path):
    proc = _run(tmp_path, "--stages", "klein4b,sam", "--cap", "klein4b=0.05")
    assert proc.returncode == 1                              # not every stage finished
    stages = json.loads((tmp_path / "bench_gpu.json").read_text())["stages"]
    assert stages["klein4b"]["status"] == "timeout"
    assert "stage time cap of 0.05 s reached" in stages["klein4b"]["error"]
    assert stages["sam"]["status"] == "ok"
    assert "klein4b: timeout" in (tmp_path / "bench_gpu.md").read_text()


def test_unknown_stage_and_bad_cap_are_refused_with_the_choices(tmp_path):
    for args, message in ((["--stages", "klein9b,sdxl"], "unknown stage(s) ['sdxl']"),
                          (["--cap", "klein9b"], "--cap takes STAGE=SECONDS")):
        proc = _run(tmp_path, *args)
        assert proc.returncode == 2 and message in proc.stderr
        assert "controller, klein9b, klein4b, sam, qwen_edit" in proc.stderr
