"""`python -m respec` from the pack's folder: validate, report (bench itself runs in
test_bench_runner.py's killed-and-resumed run)."""
from __future__ import annotations

import json
import os
import re
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
    assert "5turn_v5 1" in out.stdout and "multi 2" in out.stdout and "5 turns: 2" in out.stdout


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


# ------------------------------------------------------------------ the first run (issue 21)

def test_cpu_threads_are_the_cores_other_work_leaves_free_and_threads_or_a_gpu_override_that():
    from respec.__main__ import choose_threads
    assert choose_threads(None, cores=2, busy=0.1, gpu=False, default=2)[0] == 2      # idle: both cores
    assert choose_threads(None, cores=2, busy=0.7, gpu=False, default=2)[0] == 1      # one core taken
    assert choose_threads(None, cores=2, busy=6.5, gpu=False, default=2)[0] == 1      # never 0
    assert choose_threads(None, cores=16, busy=0.0, gpu=False, default=8)[0] == 8     # not above torch's
    n, said = choose_threads(3, cores=2, busy=9.0, gpu=False, default=2)
    assert n == 3 and said == "CPU threads: 3 (--threads)"
    n, said = choose_threads(None, cores=2, busy=9.0, gpu=True, default=2)
    assert n is None and "GPU run" in said                                           # torch's default kept
    n, said = choose_threads(None, cores=2, busy=1.3, gpu=False, default=2)
    assert said == "CPU threads: 1 of 2 cores (1.3 busy with other work when the run started; --threads N sets it)"
    with pytest.raises(Exception, match="at least 1"):
        choose_threads(0, cores=2, busy=0.0, gpu=False, default=2)


def test_the_thread_count_follows_the_other_work_during_a_run(monkeypatch):
    import respec.__main__ as cli
    clock = {"t": 0.0, "cpu": 0.0, "stat": (0, 0, 2), "load": 0.0}
    set_to = []
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(cli.time, "process_time", lambda: clock["cpu"])
    monkeypatch.setattr(cli, "_cpu_jiffies", lambda: clock["stat"])
    monkeypatch.setattr(cli.os, "getloadavg", lambda: (clock["load"], 0.0, 0.0))
    monkeypatch.setattr(cli, "set_threads", set_to.append)
    gov = cli.ThreadGovernor(1, cores=2, default=2, every=2.0)

    def seconds(n, own_cores, busy_cores, load):
        total, idle, cpus = clock["stat"]
        clock["t"] += n
        clock["cpu"] += own_cores * n
        clock["stat"] = (total + int(200 * n), idle + int(100 * n * (2 - busy_cores)), cpus)
        clock["load"] = load
        return gov.check()

    assert seconds(1, 1.0, 1.0, 1.0) is None                 # too soon to re-count
    assert seconds(2, 1.0, 1.0, 1.0) == 2                    # only our own thread ran: the other core is free
    assert seconds(3, 2.0, 2.0, 3.1) == 1                    # the load says another process took a core
    assert seconds(3, 1.0, 1.0, 1.8) is None                 # 0.8 cores of other work: not clearly free
    assert seconds(3, 1.0, 1.0, 1.1) == 2
    assert set_to == [2, 1, 2] and [c[1] for c in gov.changes] == [2, 1, 2]


def _fake_venv(tmp_path: Path) -> Path:
    """A venv folder scripts/setup.sh takes as installed, whose python prints its arguments."""
    import hashlib
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text("#!/bin/sh\necho \"ARGS: $*\"\n")
    py.chmod(0o755)
    want = b"".join((ROOT / f).read_bytes() for f in ("requirements.txt", "requirements-eval.txt",
                                                      "requirements-test.txt", "scripts/setup.sh"))
    (venv / ".respec-installed").write_text(hashlib.sha256(want).hexdigest()[:16] + "\n")
    return venv


@pytest.mark.parametrize("args, expect", [
    ([], "-m respec bench --editor sim"),
    (["--limit", "5"], "-m respec bench --editor sim --limit 5"),
    (["--threads", "1", "--config", "baseline"], "-m respec bench --editor sim --threads 1 --config baseline"),
    (["--editor", "flux2", "--limit", "2"], "-m respec bench --editor flux2 --limit 2"),
    (["--editor=omnigen2"], "-m respec bench --editor=omnigen2"),
    (["--smoke", "--limit", "2"], "-m respec bench --smoke --limit 2"),
    (["--server", "http://h:8188"], "-m respec bench --server http://h:8188"),
])
def test_bench_sh_runs_the_sim_world_unless_an_editor_smoke_or_server_is_named(tmp_path, args, expect):
    import shutil
    if shutil.which("node") is None:
        pytest.skip("scripts/setup.sh installs Node.js when it is missing")
    env = {**os.environ, "RESPEC_VENV": str(_fake_venv(tmp_path)), "RESPEC_FLOOR": "0"}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "bench.sh"), *args], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"ARGS: {expect}"


def test_a_bench_that_fails_on_its_settings_prints_no_run_and_leaves_no_folder(tmp_path, capsys):
    from respec.__main__ import main
    out = tmp_path / "run"
    assert main(["bench", "--editor", "sim", "--scenario", "nosuch", "--out", str(out)]) == 2
    said = capsys.readouterr()
    assert "scenarios in" not in said.out
    assert "no scenario with id nosuch (its 63 ids run from sim0000_" in said.err and "['" not in said.err
    assert main(["bench", "--editor", "sim", "--limit", "0", "--out", str(out)]) == 2
    assert "--limit must be at least 1, got 0" in capsys.readouterr().err
    assert not out.exists()


def test_a_folder_whose_run_failed_before_the_first_row_takes_the_corrected_run(tmp_path, monkeypatch, capsys):
    from respec.__main__ import main
    from respec.bench import runner
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def no_weights(settings, sim_world=None):
        from respec.errors import MissingWeightsError
        raise MissingWeightsError("a file", ["/nowhere"], "get it")
    monkeypatch.setattr(runner, "load_models", no_weights)
    monkeypatch.setenv("RESPEC_HOME", str(tmp_path / "home"))
    assert main(["bench", "--editor", "sim", "--limit", "1", "--size", "64", "--out", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]          # as it was
    monkeypatch.undo()
    monkeypatch.setenv("RESPEC_HOME", str(tmp_path / "home"))
    # Another size: accepted, since the folder holds no results of the failed run.
    assert main(["bench", "--editor", "sim", "--limit", "1", "--size", "48", "--config", "baseline",
                 "--no-images", "--out", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["identity"]["size"] == 48
    said = capsys.readouterr().out
    assert said.startswith("CPU threads: ") and "1 of 63 scenarios" in said


def test_a_folder_with_other_settings_is_refused_in_plain_words(tmp_path):
    from respec.bench.results import check_run_identity
    from respec.errors import InputError
    check_run_identity(tmp_path, {"size": 256, "masks": "oracle"})
    with pytest.raises(InputError) as e:
        check_run_identity(tmp_path, {"size": 512, "masks": "oracle"})
    assert "(size: 256 there, 512 now)" in str(e.value)


def test_the_docs_name_the_report_folder_the_main_job_writes():
    import re
    from respec.bench.runner import default_out_dir
    folder = default_out_dir("occur_sim", False, "sim")
    named = f"<output>/bench/{folder.name}/report/"
    assert named in (ROOT / "docs" / "sim.md").read_text()
    # A hand-typed test count goes stale with the next test; install.md states none.
    assert not re.search(r"\b\d{3,} tests\b", (ROOT / "docs" / "install.md").read_text())


# ------------------------------------------------------------------ naming every config (issue 36)

def test_bench_help_names_every_config_and_group_and_list_configs_says_what_each_runs(capsys):
    """`bench --help` once stopped at "respec+reveal ..." and never named the Drift Guard configs."""
    from respec.__main__ import _parser, main
    from respec.bench.configs import CONFIG_GROUPS, CONFIGS
    bench = _parser()._subparsers._group_actions[0].choices["bench"]
    text = bench._option_string_actions["--config"].help
    words = set(re.findall(r"[A-Za-z0-9+-]+", text))
    assert set(CONFIGS) | set(CONFIG_GROUPS) <= words
    assert "..." not in text and "…" not in text and "--list-configs" in text
    assert "--list-configs" in bench.format_help()
    assert main(["bench", "--list-configs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    for name, config in CONFIGS.items():
        assert any(line.split()[0] == name and line.endswith(config.label) for line in listed if line), name
    groups = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in listed if len(line.split(None, 1)) == 2}
    assert groups["guard"] == "baseline+guard, respec+guard"


def test_the_command_line_prints_on_a_console_without_unicode(tmp_path):
    """Output redirected on Windows is cp1252: a character it lacks is printed as '?', not a crash (issue 45)."""
    env = {**os.environ, "PYTHONIOENCODING": "cp1252", "PYTHONUTF8": "0"}
    code = ("import sys; from respec.__main__ import _printable_anywhere; _printable_anywhere(); "
            "print('\\u0394 = 2 \\u2192 I\\u2080')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr.decode("cp1252", "replace")
    assert out.stdout.decode("cp1252").strip() == "? = 2 ? I?"
    bare = subprocess.run([sys.executable, "-c", "print('\\u0394')"], capture_output=True, env=env, timeout=60)
    assert bare.returncode != 0     # the failure the helper prevents
