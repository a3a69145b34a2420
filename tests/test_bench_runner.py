"""The benchmark loop in-process with the tiny random-weight models: what each config gives the
editor, VLM call counts, I_ref taken from the generated history, rows + report, resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from respec import comfy
from respec.bench import runner
from respec.bench.results import ResultsFile
from respec.bench.configs import CONFIG_GROUPS, CONFIGS
from respec.bench.runner import run_benchmark
from respec.occur.scenario import load_dataset
from respec.bench.settings import BenchModels, BenchSettings
from respec.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(smoke=True, size=64, steps=1, seed=0)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """The smoke run's models, built once for this module (the tiny Qwen3-VL saved under a temp home)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESPEC_HOME", str(tmp_path_factory.mktemp("home")))
        return runner.load_models(BenchSettings(**SMALL))


class Recorder:
    """Wraps a real model and records what it was called with (the model still does the work)."""

    def __init__(self, inner, method):
        self.inner, self.calls, self._method = inner, [], method
        setattr(self, method, self._call)

    def _call(self, *a, **kw):
        self.calls.append((a, kw))
        return getattr(self.inner, self._method)(*a, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _with(models, **kw):
    return BenchModels(**{**models.__dict__, **kw})


class _PlanServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers like a good controller: the restoration source is
    the scenario's ground-truth reference, the anchor the newest image."""
    reference = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["messages"][-1]["content"]
        n_images = sum(1 for c in user if c.get("type") == "image_url")
        restoration = "restoration turn" in json.dumps(body).lower() and "not a restoration" not in json.dumps(body).lower()
        if restoration:
            ans = {"reasoning": {"occluder": "it", "uncovered_region": "left", "target_evidence": "seen",
                                 "add_into_region_turn": 1, "per_turn_classification": {}, "notes": ""},
                   "identity_anchor_id": n_images - 1, "restoration_source_id": self.reference,
                   "restoration_region": "left", "image_ids": [self.reference, n_images - 1],
                   "synthesis_instruction": "SYNTH-R: do it, revealing what was there as in the first image."}
        else:
            ans = {"reasoning": {"action_type": "Add", "notes": "n"}, "synthesis_instruction": f"SYNTH-{n_images}"}
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": json.dumps(ans)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


@pytest.fixture()
def plan_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _PlanServer)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _openai_backend(srv):
    from respec.controller import load_backend
    return load_backend("openai", "planner", base_url=f"http://127.0.0.1:{srv.server_port}/v1", retries=0)


def _scenario(sid):
    return load_dataset("occur_sample").by_id(sid)


def _run(models, sid, config, judge=False):
    sc = _scenario(sid)
    return sc, runner.run_one(sc, CONFIGS[config], models, BenchSettings(**SMALL, judge=judge))


@pytest.mark.slow
def test_baseline_sends_the_user_instruction_and_the_current_image_only(tiny_models):
    editor = Recorder(tiny_models.editor, "edit")
    sc, row = _run(_with(tiny_models, editor=editor, backend=None), "coffee_3t_move", "baseline")
    assert [a[1] for a, _ in editor.calls] == [t.instruction for t in sc.turns]
    assert all(len(a[0]) == 1 for a, _ in editor.calls)
    assert row["vlm_calls"] == 0 and row["reference_correct"] is None and row["controller"] == ""
    assert [t["editor_image_ids"] for t in row["turns"]] == [[0], [1], [2]]


@pytest.mark.slow
def test_full_respec_gives_the_editor_the_reference_and_anchor_with_the_rewritten_instruction(tiny_models, plan_server):
    sc = _scenario("rocket_4t_v2_remove")
    _PlanServer.reference = sc.reference_turn
    editor = Recorder(tiny_models.editor, "edit")
    models = _with(tiny_models, editor=editor, backend=_openai_backend(plan_server), describe={"controller": "srv"})
    row = runner.run_one(sc, CONFIGS["respec"], models, BenchSettings(**SMALL))
    last_images, last_text = editor.calls[-1][0][0], editor.calls[-1][0][1]
    assert row["editor_reference_ids"] == [sc.reference_turn, sc.num_turns - 1]
    assert len(last_images) == 2 and last_text.startswith("SYNTH-R")
    assert row["vlm_calls"] == sc.num_turns - 1                 # C.4: a T-turn scenario makes T-1 calls
    assert row["reference_chosen"] == sc.reference_turn and row["reference_correct"] is True
    assert [t["sent_instruction"] for t in row["turns"][1:3]] == ["SYNTH-2", "SYNTH-3"]
    assert row["turns"][0]["sent_instruction"] == sc.turns[0].instruction   # turn 1: no call


@pytest.mark.slow
def test_pti_alone_rewrites_but_gives_the_editor_only_the_current_image(tiny_models, plan_server):
    sc = _scenario("coffee_3t_move")
    _PlanServer.reference = sc.reference_turn
    editor = Recorder(tiny_models.editor, "edit")
    row = runner.run_one(sc, CONFIGS["pti"], _with(tiny_models, editor=editor, backend=_openai_backend(plan_server)),
                         BenchSettings(**SMALL))
    assert len(editor.calls[-1][0][0]) == 1 and editor.calls[-1][0][1].startswith("SYNTH-R")
    assert row["editor_reference_ids"] == [sc.num_turns - 1] and row["vlm_calls"] == sc.num_turns - 1


@pytest.mark.slow
def test_hrs_alone_gives_the_reference_with_the_users_instruction_and_calls_only_on_the_revelation(
        tiny_models, plan_server):
    sc = _scenario("coffee_3t_move")
    _PlanServer.reference = sc.reference_turn
    editor = Recorder(tiny_models.editor, "edit")
    row = runner.run_one(sc, CONFIGS["hrs"], _with(tiny_models, editor=editor, backend=_openai_backend(plan_server)),
                         BenchSettings(**SMALL))
    assert [a[1] for a, _ in editor.calls] == [t.instruction for t in sc.turns]
    assert len(editor.calls[-1][0][0]) == 2 and row["editor_reference_ids"] == [0, 2]
    assert row["vlm_calls"] == 1


@pytest.mark.slow
def test_the_restoration_flag_given_to_the_controller_is_the_ground_truth(tiny_models):
    sc, row = _run(tiny_models, "coffee_3t_move", "respec")
    plans = [t["plan"] for t in row["turns"]]
    assert [p["is_restoration"] for p in plans] == [sc.is_restoration(t) for t in range(1, 4)] == [False, False, True]


def _custom_dataset(tmp_path, scenarios) -> Path:
    from PIL import Image
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    ds = tmp_path / "set.json"
    ds.write_text(json.dumps({"format": "occur-scenarios", "scenarios": scenarios}))
    return ds


@pytest.mark.slow
def test_i_ref_is_the_generated_image_at_the_reference_turn(tiny_models, tmp_path):
    turns = [{"instruction": "Make it a watercolor.", "stage": "S"}, {"instruction": "Add a box.", "stage": "O"},
             {"instruction": "Remove the box.", "stage": "R"}]
    ds = _custom_dataset(tmp_path, [{"id": "s", "image": "a.png", "revelation_type": "remove", "occluders": ["box"],
                                     "reference_turn": 1, "turns": turns}])
    sc = load_dataset(ds)[0]
    scorer = Recorder(tiny_models.scorer, "occur_score")
    models = _with(tiny_models, scorer=scorer)
    history = runner.run_turns(sc, CONFIGS["baseline"], models, BenchSettings(**SMALL))
    runner.score_scenario(sc, history, models)
    (final, ref, masks), _ = scorer.calls[0]
    assert np.array_equal(np.asarray(ref), history.image(1).array)
    assert np.array_equal(np.asarray(final), history.image(3).array)
    assert len(masks.occ) == 3 and not np.array_equal(np.asarray(ref), history.image(0).array)


@pytest.mark.slow
def test_a_multi_occluder_scenario_unites_each_occluders_masks(tiny_models):
    sc = _scenario("chelsea_2t_multi")
    masker = Recorder(tiny_models.masker, "trajectory_masks")
    history = runner.run_turns(sc, CONFIGS["baseline"], tiny_models, BenchSettings(**SMALL))
    images = [im.rgb() for im in history.images[1:]]
    tm = runner.trajectory_masks(masker, sc, images)
    assert [c[0][1] for c in masker.calls] == ["rubber duck", "mug"]
    singles = [tiny_models.masker.trajectory_masks(images, label, [[], []]) for label in sc.occluders]
    for t in range(2):
        assert np.array_equal(tm.occ[t], singles[0].occ[t] | singles[1].occ[t])


@pytest.mark.slow
def test_the_smoke_loop_writes_a_row_per_scenario_and_config_and_a_report_with_every_table(tiny_models, tmp_path):
    from respec.bench.report import write_report
    ids = ["chelsea_2t_multi", "coffee_3t_move"]
    settings = BenchSettings(**SMALL, dataset="occur_sample", out=str(tmp_path / "run"), configs=["all"],
                             scenario_ids=ids, judge=True)
    summary = run_benchmark(settings, models=tiny_models)
    assert len(summary.done) == 8 and not summary.failed and not summary.interrupted
    rows = ResultsFile(summary.results).rows()
    assert sorted((r["scenario_id"], r["config"]) for r in rows) == sorted(
        (s, c) for s in ids for c in CONFIG_GROUPS["all"])
    by = {(r["scenario_id"], r["config"]): r for r in rows}
    assert by[("coffee_3t_move", "respec")]["vlm_calls"] == 2
    assert by[("coffee_3t_move", "pti")]["vlm_calls"] == 2
    assert by[("coffee_3t_move", "hrs")]["vlm_calls"] == 1
    assert by[("coffee_3t_move", "baseline")]["vlm_calls"] == 0
    assert by[("coffee_3t_move", "baseline")]["judge_calls"] == 3
    r = by[("chelsea_2t_multi", "respec")]
    assert set(r["seconds"]) >= {"controller", "editor", "masks", "score", "judge", "total"}
    assert r["reference_distance"] == 2 and r["revelation_type"] == "multi"
    assert (Path(summary.out) / r["images"][-1]).is_file()
    paths = write_report(summary.results, tmp_path / "rep")
    md = Path(paths["report"]).read_text()
    for title in ("Table 1", "Table 2", "Table 4", "Table 5", "Table 6", "Table 7", "Figure 7"):
        assert title in md
    assert "Smoke run" in md and Path(paths["figure7"]).stat().st_size > 1000


@pytest.mark.slow
def test_a_second_run_skips_what_is_done_and_writes_nothing(tiny_models, tmp_path):
    settings = BenchSettings(**SMALL, out=str(tmp_path), configs=["baseline"], limit=1)
    first = run_benchmark(settings, models=tiny_models)
    before = (tmp_path / "results.jsonl").read_bytes()
    again = run_benchmark(BenchSettings(**SMALL, out=str(tmp_path), configs=["baseline"], limit=1),
                          models=tiny_models)
    assert len(first.done) == 1 and again.done == [] and again.skipped == first.done
    assert (tmp_path / "results.jsonl").read_bytes() == before


@pytest.mark.slow
def test_resuming_with_other_settings_is_refused(tiny_models, tmp_path):
    run_benchmark(BenchSettings(**SMALL, out=str(tmp_path), configs=["baseline"], limit=1), models=tiny_models)
    with pytest.raises(InputError, match="seed"):
        run_benchmark(BenchSettings(**{**SMALL, "seed": 7}, out=str(tmp_path), configs=["baseline"], limit=1),
                      models=tiny_models)


@pytest.mark.slow
def test_an_interruption_keeps_the_finished_rows_and_a_rerun_completes(tiny_models, tmp_path):
    settings = dict(**SMALL, out=str(tmp_path), configs=["baseline"], limit=3)
    summary = run_benchmark(BenchSettings(**settings), models=tiny_models,
                            on_row=lambda row: comfy.request_interrupt())
    assert summary.interrupted and len(summary.done) == 1
    rest = run_benchmark(BenchSettings(**settings), models=tiny_models)
    keys = [r["key"] for r in ResultsFile(tmp_path / "results.jsonl").rows()]
    assert len(rest.done) == 2 and len(keys) == 3 == len(set(keys))


@pytest.mark.slow
def test_a_failing_scenario_is_recorded_and_the_run_goes_on(tiny_models, tmp_path):
    turns = [{"instruction": "Add a box.", "stage": "O"}, {"instruction": "Remove the box.", "stage": "R"}]
    ds = _custom_dataset(tmp_path, [{"id": i, "image": "a.png", "revelation_type": "remove", "occluders": ["box"],
                                     "reference_turn": 0, "turns": turns} for i in ("first", "second")])
    editor = Recorder(tiny_models.editor, "edit")
    calls = {"n": 0}

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the editor ran out of memory")
        return tiny_models.editor.edit(*a, **kw)
    editor.edit = flaky
    summary = run_benchmark(BenchSettings(**SMALL, dataset=str(ds), out=str(tmp_path / "o"), configs=["baseline"]),
                            models=_with(tiny_models, editor=editor))
    assert list(summary.failed) == ["set|first|baseline|flux2"] and "out of memory" in summary.failed["set|first|baseline|flux2"]
    assert [r["scenario_id"] for r in ResultsFile(tmp_path / "o" / "results.jsonl").rows()] == ["second"]
    err = ResultsFile(tmp_path / "o" / "errors.jsonl").rows()
    assert err[0]["scenario_id"] == "first" and "RuntimeError" in err[0]["traceback"]


def _bench_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "respec", "bench", "--smoke", "--quiet", "--size", "64", "--steps", "1",
            "--limit", "2", "--config", "baseline,respec", "--out", str(out)]


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_without_losing_or_duplicating_rows(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "RESPEC_HOME": str(tmp_path / "home"), "RESPEC_PROGRESS": "0"}
    results = out / "results.jsonl"
    proc = subprocess.Popen(_bench_cmd(out), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed:\n" + proc.stdout.read().decode()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    first = results.read_bytes()
    written = [json.loads(line) for line in first.splitlines()]
    assert 1 <= len(written) < 4
    done = subprocess.run(_bench_cmd(out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    final = results.read_bytes()
    assert final.startswith(first[: first.rfind(b"\n") + 1]), "rows written before the kill must stay as they were"
    keys = [json.loads(line)["key"] for line in final.splitlines()]
    assert len(keys) == 4 == len(set(keys))
    assert f"already there {len(written)}" in done.stdout
    assert "Report:" in done.stdout and (out / "report" / "report.md").is_file()


def test_without_weights_a_real_run_stops_before_the_first_scenario_and_says_where_it_looked(tmp_path, monkeypatch):
    from respec.errors import MissingWeightsError
    monkeypatch.setenv("RESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RESPEC_MODELS_DIR", raising=False)
    out = tmp_path / "out"
    with pytest.raises(MissingWeightsError) as ei:
        run_benchmark(BenchSettings(out=str(out), configs=["baseline"], limit=1))
    msg = str(ei.value)
    # Every missing file at once, in pipeline order; the baseline has no controller.
    stages = [line.split(":")[0].split(". ")[1] for line in msg.splitlines() if line[:5].strip().rstrip(".").isdigit()]
    assert stages == ["editor", "masks", "masks", "masks", "scores"]
    assert "FLUX.2-klein-base-9B" in msg and "yolov8l-worldv2.pt" in msg and "alexnet-owt-7be5be79.pth" in msg
    # A CLI run is told its own folder and variable, not ComfyUI's.
    models_dir = str(tmp_path / "home" / "models")
    assert f"into {models_dir}/respec_metrics/" in msg and "RESPEC_MODELS_DIR" in msg and "ComfyUI/models" not in msg
    assert not out.exists()


def test_the_missing_files_list_starts_with_the_controller_and_fits_comfyui_there(tmp_path, monkeypatch):
    monkeypatch.setenv("RESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RESPEC_MODELS_DIR", raising=False)
    settings = BenchSettings(out=str(tmp_path), configs=["baseline", "respec"], editor="omnigen2")
    found = runner.missing_model_files(settings)
    assert [stage for stage, _ in found] == ["controller", "editor", "masks", "masks", "masks", "scores"]
    assert found[0][1].what.startswith("Qwen/Qwen3-VL-8B-Instruct") and "OmniGen2" in found[1][1].what
    monkeypatch.setattr(comfy, "in_comfyui", lambda: True)
    with pytest.raises(runner.MissingModelFiles) as ei:
        runner.check_model_files(settings)
    assert "ComfyUI's models folder" in str(ei.value) and "ComfyUI/models/ultralytics/" in str(ei.value)
    # The sim world needs no file (its scorer falls back to the tiny one); smoke runs neither.
    assert runner.missing_model_files(BenchSettings(editor="sim", configs=["respec"])) == []
    assert runner.missing_model_files(BenchSettings(smoke=True, configs=["respec"])) == []
    assert runner.missing_model_files(BenchSettings(configs=["respec"], editor_options={"allow_download": True})) == []


def test_preparing_a_run_leaves_the_callers_settings_as_they_were(tmp_path):
    settings = BenchSettings(dataset="occur_sim", editor="sim", configs=["respec", "baseline"], out=str(tmp_path))
    plan = runner.prepare_run(settings)
    assert settings.configs == ["respec", "baseline"] and settings.masks == ""
    assert plan.settings.configs == ["baseline", "respec"] and plan.settings.masks == "oracle"


@pytest.mark.parametrize("bad, error", [
    (dict(editor="flux3"), "unknown editor 'flux3'"),
    (dict(editor="omnigen2", smoke=True), "no tiny omnigen2"),
    (dict(editor="flux2", masks="oracle"), "--masks oracle needs --editor sim"),
    (dict(editor="flux2", configs=["respec", "nope"]), "unknown benchmark config 'nope'"),
])
def test_settings_that_cannot_run_are_refused_before_any_model_or_file_is_looked_at(monkeypatch, bad, error):
    import respec.controller as controller
    import respec.editors as editors
    import respec.eval.masks as masks
    import respec.eval.metric_models as metric_models
    touched = []
    for module, name in ((metric_models, "load_scorer"), (masks, "load_masker"), (controller, "load_backend"),
                         (editors, "load_editor"), (runner, "check_model_files")):
        monkeypatch.setattr(module, name, lambda *a, _name=name, **k: touched.append(_name))
    with pytest.raises(InputError, match=error):
        runner.load_models(BenchSettings(**bad), sim_world=lambda s: touched.append("sim_world"))
    assert touched == []


def test_a_sim_run_loads_its_models_with_the_loader_its_caller_hands_over(monkeypatch):
    """respec/bench imports nothing of respec/sim: --editor sim needs the sim world's loader from the
    caller (the CLI passes respec.bench.sim_models.load_sim_models), after the checks that need no model."""
    monkeypatch.setattr(runner, "check_model_files", lambda s: None)
    settings = BenchSettings(editor="sim", configs=["respec", "baseline"])
    with pytest.raises(TypeError, match="sim_world=respec.bench.sim_models.load_sim_models"):
        runner.load_models(settings)
    got = []
    models = runner.load_models(settings, sim_world=lambda s: got.append(s) or "the sim's models")
    assert models == "the sim's models"
    assert got[0].configs == ["baseline", "respec"] and got[0].masks == "oracle"   # the checked settings
