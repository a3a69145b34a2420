"""The Ray runner on a local Ray (this machine's CPUs, no GPU): rows equal the in-process
runner's, a worker killed mid-scenario costs nothing, a restarted driver resumes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ray  # the [cluster] extra; scripts/setup.sh installs it for the tests

from respec.bench.ray_runner import RayOptions, run_ray
from respec.bench.results import ResultsFile
from respec.bench.runner import run_benchmark
from respec.bench.settings import BenchSettings
from respec.bench.shards import comparable, differences

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

# The tiny random-weight models, small and few: the point is the plumbing, not the numbers.
SMOKE = dict(dataset="occur_sample", editor="flux2", smoke=True, size=64, steps=1,
             configs=["baseline", "hrs", "pti", "respec"],
             scenario_ids=["astronaut_2t_remove", "coffee_3t_move", "grace_3t_resize"])


@pytest.fixture(scope="module")
def ray_home(tmp_path_factory):
    """One local Ray for the module; its workers see the same standalone home as the tests."""
    home = tmp_path_factory.mktemp("ray_home")
    old = {k: os.environ.get(k) for k in ("RESPEC_HOME", "RESPEC_MODELS_DIR", "OMP_NUM_THREADS")}
    os.environ.update(RESPEC_HOME=str(home), RESPEC_MODELS_DIR=str(home / "models"), OMP_NUM_THREADS="1")
    yield home
    ray.shutdown()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _isolated_home(ray_home, monkeypatch):
    # Overrides conftest's per-test home: Ray's workers are started once, with the module's home.
    monkeypatch.setenv("RESPEC_HOME", str(ray_home))
    monkeypatch.setenv("RESPEC_MODELS_DIR", str(ray_home / "models"))


def _rows(folder: Path) -> dict[str, dict]:
    rows = ResultsFile(folder / "results.jsonl").rows()
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "a key was written twice"
    return {r["key"]: r for r in rows}


# Ray's workers build and run the tiny models in other processes (one thread each): their float
# rounding may differ from this process's in the last bits (as a reloaded model's did on other
# CPUs), so scores are compared within this tolerance and everything else exactly.
SCORE_TOLERANCE = 1e-3


def _same_rows(a: dict[str, dict], b: dict[str, dict]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert differences(comparable(a[key]), comparable(b[key]), tol=SCORE_TOLERANCE) == [], key


@pytest.fixture(scope="module")
def in_process_rows(ray_home, tmp_path_factory):
    out = tmp_path_factory.mktemp("in_process")
    summary = run_benchmark(BenchSettings(out=str(out), **SMOKE))
    assert not summary.failed and len(summary.done) == 12
    return _rows(out)


def test_rows_on_ray_equal_the_in_process_rows(in_process_rows, tmp_path):
    summary = run_ray(BenchSettings(out=str(tmp_path), **SMOKE), RayOptions(address="local", num_cpus=2, workers=2))
    assert not summary.failed and len(summary.done) == 12
    _same_rows(_rows(tmp_path), in_process_rows)
    assert summary.work["edits_shared"] > 0          # configs of a scenario ran together on one worker


def test_a_worker_killed_mid_scenario_is_restarted_and_the_scenario_rerun(in_process_rows, tmp_path):
    victim = "coffee_3t_move"
    killed: dict = {}

    def kill_when_busy():
        # Workers say in <out>/workers/ which scenario they run; kill the process running the victim.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            for status in (tmp_path / "workers").glob("worker-*.json"):
                try:
                    info = json.loads(status.read_text())
                except (OSError, ValueError):
                    continue
                if info.get("scenario") == victim:
                    os.kill(info["pid"], signal.SIGKILL)
                    killed.update(info)
                    return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    summary = run_ray(BenchSettings(out=str(tmp_path), **SMOKE),
                      RayOptions(address="local", num_cpus=2, workers=1, max_attempts=3))
    killer.join(timeout=5)
    assert killed, "the victim scenario never started"
    assert not summary.failed and len(summary.done) == 12
    assert any("worker died" in r for r in summary.retried.get(victim, []))
    _same_rows(_rows(tmp_path), in_process_rows)
    worker = json.loads((tmp_path / "workers" / "worker-0.json").read_text())
    assert worker["pid"] != killed["pid"]              # a new process finished the run


def test_a_scenario_that_keeps_failing_goes_to_errors_after_its_attempts(ray_home, tmp_path):
    settings = BenchSettings(out=str(tmp_path), **{**SMOKE, "scenario_ids": ["astronaut_2t_remove"]})
    summary = run_ray(settings, RayOptions(address="local", num_cpus=2, workers=1, max_attempts=2,
                                           scenario_timeout=0.001))
    assert len(summary.failed) == 4 and not summary.done
    errors = ResultsFile(tmp_path / "errors.jsonl").rows()
    assert len(errors) == 4 and all("timed out after 0.001 s" in e["error"] and e["attempts"] == 2 for e in errors)


def test_a_stopped_driver_resumes_with_only_the_missing_keys(in_process_rows, tmp_path):
    cmd = [sys.executable, "-m", "respec", "bench", "--ray", "local", "--smoke", "--size", "64", "--steps", "1",
           "--config", "all", "--quiet", "--out", str(tmp_path)] + \
          [a for s in SMOKE["scenario_ids"] for a in ("--scenario", s)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = tmp_path / "results.jsonl"
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and len(ResultsFile(results).rows()) >= 4:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)      # the driver and the local Ray it started
        proc.wait(timeout=30)
    first = set(_rows(tmp_path))
    assert 4 <= len(first) < 12, "the driver should stop part-way"

    summary = run_ray(BenchSettings(out=str(tmp_path), **SMOKE), RayOptions(address="local", num_cpus=2, workers=2))
    assert set(summary.skipped) == first                       # nothing finished was run again
    assert set(summary.done) == set(in_process_rows) - first   # only the missing keys ran
    _same_rows(_rows(tmp_path), in_process_rows)
