"""`python -m respec` from the pack's folder: validate, report (bench itself runs in
test_bench_runner.py's killed-and-resumed run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, cwd=ROOT, tmp_home=None):
    env = {**os.environ, "RESPEC_PROGRESS": "0"}
    if tmp_home:
        env["RESPEC_HOME"] = str(tmp_home)
    return subprocess.run([sys.executable, "-m", "respec", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_validate_summarises_a_good_file_by_template_type_and_distance():
    out = _cli("validate", "occur_sample")
    assert out.returncode == 0, out.stderr
    assert "15 valid scenarios" in out.stdout
    assert "5turn_v5 1" in out.stdout and "multi 2" in out.stdout and "Δ=5 2" in out.stdout


@pytest.mark.slow
def test_validate_names_the_file_the_scenario_and_the_field_and_fails(tmp_path):
    data = json.loads((ROOT / "respec/bench/samples/occur_sample.json").read_text())
    data["scenarios"][3]["turns"][0]["stage"] = "Q"
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(data))
    out = _cli("validate", p)
    assert out.returncode == 2
    assert str(p) in out.stderr and "grace_3t_resize" in out.stderr and "turns[0].stage" in out.stderr


@pytest.mark.slow
def test_report_writes_the_tables_next_to_the_results_and_says_where(tmp_path):
    row = {"dataset": "d", "scenario_id": "a", "config": "baseline", "editor": "flux2", "status": "ok",
           "S_restore": 0.5, "S_preserve": 0.4, "S_TC": 0.45, "num_turns": 2, "revelation_type": "move",
           "reference_distance": 2, "restore_area_ratio": 0.1}
    (tmp_path / "results.jsonl").write_text(json.dumps(row) + "\n")
    out = _cli("report", tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"Report: {tmp_path / 'report' / 'report.md'}" in out.stdout
    assert (tmp_path / "report" / "table5_reference_distance.csv").is_file()


@pytest.mark.slow
def test_report_on_a_missing_file_says_so(tmp_path):
    out = _cli("report", tmp_path / "nothing.jsonl")
    assert out.returncode == 2 and "no results file" in out.stderr


@pytest.mark.slow
def test_bench_refuses_an_unknown_config_before_loading_any_model(tmp_path):
    out = _cli("bench", "--smoke", "--config", "turbo", "--out", tmp_path, tmp_home=tmp_path)
    assert out.returncode == 2 and "unknown benchmark config 'turbo'" in out.stderr


@pytest.mark.slow
def test_bench_with_an_unreachable_server_says_which_and_fails(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    out = _cli("bench", "--server", url, "--limit", "1", "--config", "baseline", "--out", tmp_path / "o",
               "--quiet", tmp_home=tmp_path)
    assert out.returncode == 1
    assert f"OCCUR bench on 1 ComfyUI server(s): {url}" in out.stdout
    assert url in out.stderr and "astronaut_2t_remove" in out.stderr


def test_threads_sets_torchs_cpu_threads_for_the_run_and_refuses_zero(tmp_path, capsys):
    import torch
    from respec.__main__ import main
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        # The dataset does not exist, so the run stops right after the settings are applied.
        assert main(["bench", "--threads", "1", "--dataset", str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 2
        assert torch.get_num_threads() == 1
        assert main(["bench", "--threads", "0", "--smoke", "--out", str(tmp_path)]) == 2
        assert "--threads must be at least 1" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
