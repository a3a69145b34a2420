"""Queueing the benchmark workflow to ComfyUI servers over HTTP + websocket (issue 6, item 4).

The servers are local aiohttp servers speaking ComfyUI's /prompt, /history, /ws and
/object_info protocol (tests/fake_comfyui.py); one of them fails mid-run, one is unreachable.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import fields

import pytest

from fake_comfyui import FakeComfyUI, free_port
from respec.bench import remote, workflow
from respec.bench.settings import BenchSettings
from respec.errors import InputError

LOADER, WRITER = workflow.SCENARIO_LOADER, workflow.RESULTS_WRITER

NODE_INFO = {
    LOADER: {"input": {"required": {"dataset": ["STRING", {}], "index": ["INT", {}]}},
             "output": ["OCCUR_SCENARIO"], "output_node": False},
    "ReSpecFakeEdit": {"input": {"required": {"scenario": ["OCCUR_SCENARIO", {}], "seed": ["INT", {}],
                                              "use_pti": ["BOOLEAN", {}]}},
                       "output": ["RESPEC_HISTORY"], "output_node": False},
    WRITER: {"input": {"required": {"history": ["RESPEC_HISTORY", {}]}}, "output": [], "output_node": True},
}

WORKFLOW = {
    "1": {"class_type": LOADER, "inputs": {"dataset": "sample", "index": 0}},
    "2": {"class_type": "ReSpecFakeEdit", "inputs": {"scenario": ["1", 0], "seed": 7, "use_pti": True}},
    "3": {"class_type": WRITER, "inputs": {"history": ["2", 0]}},
}


def execute(prompt):
    """What the benchmark graph reports: one row naming the scenario it ran, and its settings."""
    index = prompt["1"]["inputs"]["index"]
    row = {"scenario_id": f"s{index:02d}", "index": index, "seed": prompt["2"]["inputs"]["seed"],
           "use_pti": prompt["2"]["inputs"]["use_pti"]}
    return {"3": {workflow.ROW_UI_KEY: [json.dumps(row)]}}


def jobs(n, **fill):
    return [(i, f"s{i:02d}", workflow.fill_workflow(WORKFLOW, dataset="sample", index=i, **fill)) for i in range(n)]


def _queue(kw: dict) -> tuple:
    """Take run_jobs' QueueSettings fields out of `kw` (the rest are its keyword arguments)."""
    names = {f.name for f in fields(remote.QueueSettings)}
    return (remote.QueueSettings(**{k: kw.pop(k) for k in list(kw) if k in names}),)


def run(job_list, servers, **kw):
    """Run prompts on the servers; returns the summary and the rows (scenario id, row, server)."""
    rows = []
    kw.setdefault("poll_interval", 0.5)
    urls = [s if isinstance(s, str) else s.url for s in servers]
    summary = asyncio.run(remote.run_jobs(job_list, urls,
                                          lambda i, sid, row, info: rows.append((sid, row, info["server"])),
                                          *_queue(kw), **kw))
    return summary, rows


def test_scenarios_are_spread_across_servers_and_each_row_written_once():
    with FakeComfyUI(NODE_INFO, execute, step_delay=0.02) as a, FakeComfyUI(NODE_INFO, execute, step_delay=0.02) as b:
        summary, rows = run(jobs(8), [a, b])
    assert sorted(sid for sid, _, _ in rows) == [f"s{i:02d}" for i in range(8)]
    assert all(row["scenario_id"] == sid for sid, row, _ in rows)
    assert len(a.completed) > 0 and len(b.completed) > 0
    assert len(a.completed) + len(b.completed) == 8
    assert summary.failed == {} and sorted(summary.done) == [f"s{i:02d}" for i in range(8)]


def test_progress_is_followed_on_the_websocket():
    seen = []
    with FakeComfyUI(NODE_INFO, execute) as a:
        run(jobs(1), [a], on_event=lambda server, label, kind, data: seen.append((label, kind)))
    kinds = [k for label, k in seen if label == "s00"]
    for expected in ("queued", "execution_start", "executing", "progress", "executed", "done"):
        assert expected in kinds
    assert kinds.index("execution_start") < kinds.index("executed") < kinds.index("done")


def test_result_comes_from_history_when_the_websocket_is_silent():
    with FakeComfyUI(NODE_INFO, execute, silent_ws=True) as a:
        summary, rows = run(jobs(2), [a], poll_interval=0.2)
    assert sorted(sid for sid, _, _ in rows) == ["s00", "s01"]


def test_server_failing_mid_run_has_its_scenarios_retried_on_the_healthy_server():
    with FakeComfyUI(NODE_INFO, execute, fail_after=1, step_delay=0.05) as bad, \
            FakeComfyUI(NODE_INFO, execute, step_delay=0.05) as good:
        summary, rows = run(jobs(6), [bad, good])
    ids = [sid for sid, _, _ in rows]
    assert sorted(ids) == [f"s{i:02d}" for i in range(6)]          # nothing lost
    assert len(ids) == len(set(ids))                               # nothing duplicated
    assert len(bad.accepted) > len(bad.completed)                  # it really crashed mid-run
    assert bad.url in summary.retired
    crashed = [sid for sid, _, server in rows if server == good.url]
    assert len(crashed) == 6 - len(bad.completed)


def test_unreachable_server_is_left_out_and_every_scenario_runs_elsewhere():
    dead = f"http://127.0.0.1:{free_port()}"
    with FakeComfyUI(NODE_INFO, execute) as good:
        summary, rows = run(jobs(3), [dead, good])
    assert sorted(sid for sid, _, _ in rows) == ["s00", "s01", "s02"]
    assert "unreachable" in summary.retired[dead]
    assert summary.per_server[good.url] == 3


def test_server_answering_500_has_its_scenarios_retried_elsewhere():
    # The good server works slowly, so the bad one is asked for a job even on a busy machine
    # (otherwise the good one can finish all four before the bad one's first try).
    with FakeComfyUI(NODE_INFO, execute, reject_500=True) as bad, \
            FakeComfyUI(NODE_INFO, execute, step_delay=0.2) as good:
        summary, rows = run(jobs(4), [bad, good], max_server_failures=1)
    assert sorted(sid for sid, _, _ in rows) == ["s00", "s01", "s02", "s03"]
    assert all(server == good.url for _, _, server in rows)
    assert "HTTP 500" in summary.retired[bad.url]


def test_server_without_the_pack_is_left_out_naming_the_missing_nodes():
    partial = {k: v for k, v in NODE_INFO.items() if k != "ReSpecFakeEdit"}
    with FakeComfyUI(partial, execute) as bare, FakeComfyUI(NODE_INFO, execute) as good:
        summary, rows = run(jobs(2), [bare, good])
    assert len(rows) == 2 and not bare.accepted
    assert "ReSpecFakeEdit" in summary.retired[bare.url]


def test_validation_error_is_tried_once_per_server_then_reported_with_comfyui_node_errors():
    broken = workflow.fill_workflow(WORKFLOW, dataset="sample", index=0)
    del broken["2"]["inputs"]["seed"]
    with FakeComfyUI(NODE_INFO, execute) as a, FakeComfyUI(NODE_INFO, execute) as b:
        summary, rows = run([(0, "s00", broken)] + jobs(2)[1:], [a, b], max_attempts=5)
    assert [sid for sid, _, _ in rows] == ["s01"]
    attempts = summary.failed["s00"]
    assert sorted(at.server for at in attempts) == sorted([a.url, b.url])   # once on each, not 5 times
    assert all(at.kind == "rejected" for at in attempts)
    assert "ReSpecFakeEdit" in attempts[0].message and "seed" in attempts[0].message


def test_execution_error_on_every_server_is_a_final_error_naming_node_and_message():
    def fails_on_3(prompt):
        return "ReSpecFakeEdit:out of memory" if prompt["1"]["inputs"]["index"] == 3 else None

    with FakeComfyUI(NODE_INFO, execute, execution_error_for=fails_on_3) as a, \
            FakeComfyUI(NODE_INFO, execute, execution_error_for=fails_on_3) as b:
        summary, rows = run(jobs(5), [a, b])
    assert sorted(sid for sid, _, _ in rows) == ["s00", "s01", "s02", "s04"]
    assert list(summary.failed) == ["s03"]
    assert len(summary.failed["s03"]) == 2
    err = remote.RemoteBenchError(summary)
    assert "s03" in str(err) and "out of memory" in str(err) and "ReSpecFakeEdit" in str(err)
    assert not summary.retired   # a failing scenario does not take a working server out


def test_retries_are_bounded_when_every_server_fails():
    dead1, dead2 = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    summary, rows = run(jobs(3), [dead1, dead2])
    assert rows == []
    assert sorted(summary.failed) == ["s00", "s01", "s02"]
    assert "never sent" in str(remote.RemoteBenchError(summary))


def test_cancelling_a_run_withdraws_the_running_prompt_from_the_server():
    async def scenario(url):
        queued = asyncio.Event()
        task = asyncio.ensure_future(remote.run_jobs(
            jobs(1), [url], lambda *a: None, remote.QueueSettings(poll_interval=0.2),
            on_event=lambda server, label, kind, data: queued.set() if kind == "queued" else None))
        await asyncio.wait_for(queued.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with FakeComfyUI(NODE_INFO, execute, step_delay=1.0) as a:
        asyncio.run(scenario(a.url))
        pid = a.accepted[0]
    assert a.deleted == [pid] and a.interrupted == [pid]


def test_fill_workflow_sets_scenario_seed_and_config_switches():
    wf = workflow.fill_workflow(WORKFLOW, dataset="/data/occur", index=4, seed=11,
                              config={"use_pti": False})
    assert wf["1"]["inputs"] == {"dataset": "/data/occur", "index": 4}
    assert wf["2"]["inputs"]["seed"] == 11 and wf["2"]["inputs"]["use_pti"] is False
    assert wf["2"]["inputs"]["scenario"] == ["1", 0]          # links untouched
    assert WORKFLOW["1"]["inputs"]["index"] == 0              # the template is not modified


def test_config_key_matching_no_widget_is_refused():
    with pytest.raises(InputError, match="use_pit"):
        workflow.fill_workflow(WORKFLOW, dataset="sample", index=0, config={"use_pit": False})


def test_ui_format_workflow_is_refused_for_the_api():
    with pytest.raises(InputError, match="UI-format"):
        workflow.load_api_workflow({"nodes": [], "links": [], "version": 0.4})


def test_a_shipped_workflow_is_found_by_its_key_and_an_old_file_name_says_its_new_one(tmp_path):
    """Issue 36 named the files by their titles: a key (the old name) still loads the graph, and the
    old path is refused with the new file's name."""
    by_key = workflow.load_api_workflow("benchmark_native_flux2")
    path = workflow.shipped_workflow("benchmark_native_flux2")
    assert path.name == "ReSpec eval - FLUX.2 klein 9B.api.json" and by_key == json.loads(path.read_text())
    assert workflow.default_workflow("baseline", "omnigen2", route="diffusers").name == \
        "ReSpec paper - OmniGen2 baseline.api.json"
    with pytest.raises(InputError, match=r'benchmark_native_flux2\.api\.json was renamed to "ReSpec eval - '
                                         r'FLUX\.2 klein 9B\.api\.json"'):
        workflow.load_api_workflow(tmp_path / "benchmark_native_flux2.api.json")
    with pytest.raises(InputError, match="no shipped workflow 'benchmark_sim'"):
        workflow.shipped_workflow("benchmark_sim")


# ------------------------------------------------------------------------------ run_remote: the shipped workflows

ROOT = workflow.WORKFLOW_DIR.parent.parent
CORE = json.loads((ROOT / "scripts" / "workflows" / "comfy_core_nodes.json").read_text(encoding="utf-8"))["nodes"]


@pytest.fixture(scope="module")
def comfy_nodes(pack):
    """/object_info of a ComfyUI with the pack installed: the pack's nodes and the core ones."""
    info = json.loads(json.dumps(CORE))
    for name, cls in pack.NODE_CLASS_MAPPINGS.items():
        info[name] = {"input": cls.INPUT_TYPES(), "output": list(cls.RETURN_TYPES),
                      "output_node": bool(getattr(cls, "OUTPUT_NODE", False))}
    return with_model_files(info)


def with_model_files(info, skip=()):
    """The server has the model files the shipped workflows' loaders name, but not those in `skip`."""
    shipped = [json.loads(p.read_text(encoding="utf-8")) for p in workflow.WORKFLOW_DIR.glob("*.api.json")]
    info = json.loads(json.dumps(info, default=list))
    for key, names in remote.model_files(shipped).items():
        node, _, name = key.rpartition(".")
        spec = info[node]["input"].get("required", {}).get(name) or info[node]["input"].get("optional", {}).get(name)
        choices = remote.combo_choices(spec)
        if choices is not None:
            choices[:] = sorted((set(choices) | set(names)) - set(skip))
    return info


def bench_execute(prompt):
    """The Results Writer's row for the scenario the prompt names (the graph's work is the
    server's business; its row layout is the bench runner's)."""
    from respec.bench.results import row_key
    from respec.occur.scenario import load_dataset
    loader = next(n for n in prompt.values() if n["class_type"] == workflow.SCENARIO_LOADER)
    wid, writer = next((k, n) for k, n in prompt.items() if n["class_type"] == workflow.RESULTS_WRITER)
    scenario = load_dataset(loader["inputs"]["dataset"])[loader["inputs"]["index"]]
    row = {**scenario.summary(), "status": "ok", "config": writer["inputs"]["config"],
           "editor": writer["inputs"]["editor"], "S_TC": 0.5, "vlm_calls": 1, "source": "comfyui"}
    row["key"] = row_key(row)
    return {wid: {workflow.ROW_UI_KEY: [json.dumps({**row, "written": True})]}}


def run_bench(servers, out, **kw):
    """run_remote on the sample dataset, quiet, polling every 0.5 s; `kw` names BenchSettings and
    RemoteOptions fields."""
    opt_names = {f.name for f in fields(remote.RemoteOptions)}
    opts = remote.RemoteOptions(**{"poll_interval": 0.5, **{k: v for k, v in kw.items() if k in opt_names}})
    settings = BenchSettings(dataset="occur_sample", out=str(out),
                             **{k: v for k, v in kw.items() if k not in opt_names})
    return remote.run_remote(settings, servers, opts, quiet=True)


def read_rows(out):
    from respec.bench.results import ResultsFile
    return ResultsFile(out / "results.jsonl").rows()


def test_run_remote_writes_one_row_per_scenario_and_config(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute) as a, FakeComfyUI(comfy_nodes, bench_execute) as b:
        summary = run_bench([a.url, b.url], tmp_path, configs=["baseline", "respec"], limit=3)
        prompts = {**a.prompts, **b.prompts}
    rows = read_rows(tmp_path)
    assert len(rows) == 6 and len({r["key"] for r in rows}) == 6
    assert {r["config"] for r in rows} == {"baseline", "respec"}
    assert all(r["remote"]["server"] in (a.url, b.url) and "written" not in r for r in rows)
    by_config = {}
    for p in prompts.values():
        writer = next(n for n in p.values() if n["class_type"] == workflow.RESULTS_WRITER)
        by_config.setdefault(writer["inputs"]["config"], []).append(p)
    # the baseline runs the graph without a controller; ReSpec the one with it
    assert all(not any(n["class_type"] == "ReSpecPreservationTarget" for n in p.values()) for p in by_config["baseline"])
    assert all(any(n["class_type"] == "ReSpecPreservationTarget" for n in p.values()) for p in by_config["respec"])
    assert len(summary.done) == 6


def test_run_remote_resumes_without_running_or_writing_anything_twice(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path, configs=["respec"], limit=2)
        first = len(a.accepted)
        summary = run_bench([a.url], tmp_path, configs=["respec"], limit=4)
        second = len(a.accepted) - first
    rows = read_rows(tmp_path)
    assert (first, second) == (2, 2)
    assert len(rows) == 4 and len({r["key"] for r in rows}) == 4
    assert len(summary.skipped) == 2


@pytest.mark.slow
def test_run_remote_survives_a_server_dying_mid_run_with_every_row_once(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute, fail_after=2, step_delay=0.01) as bad, \
            FakeComfyUI(comfy_nodes, bench_execute, step_delay=0.01) as good:
        run_bench([bad.url, good.url], tmp_path, configs=["respec"], limit=6)
    rows = read_rows(tmp_path)
    assert len(rows) == 6 and len({r["scenario_id"] for r in rows}) == 6
    assert len(bad.accepted) > len(bad.completed)


def test_run_remote_gives_each_turn_slot_the_runners_seed(comfy_nodes, tmp_path):
    from respec.bench.configs import turn_seed
    from respec.occur.scenario import load_dataset
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path, configs=["respec"], limit=1, seed=5)
        prompt = next(iter(a.prompts.values()))
    sid = load_dataset("occur_sample")[0].id
    turns = {k: n["inputs"]["turn"] for k, n in prompt.items() if n["class_type"] == "ReSpecScenarioTurn"}
    noise = {k: n for k, n in prompt.items() if n["class_type"] == "RandomNoise"}
    assert len(noise) == 5, "the default (native) route: one RandomNoise per turn slot"
    for k, n in noise.items():
        # follow the noise to the History Append its slot ends in: RandomNoise -> sampler -> decode -> resize
        node = k
        for cls in ("SamplerCustomAdvanced", "VAEDecode", "ImageScale", "ReSpecHistoryAppend"):
            node = next(c for c, m in prompt.items() if m["class_type"] == cls and
                        any(isinstance(v, list) and v[0] == node for v in m["inputs"].values()))
        t = turns[prompt[node]["inputs"]["instruction"][0]]
        assert n["inputs"]["noise_seed"] == turn_seed(5, sid, t)
    for k, n in prompt.items():
        if n["class_type"] == "ReSpecFlux2Edit":
            rewriter = prompt[n["inputs"]["instruction"][0]]
            plan = prompt[rewriter["inputs"]["plan"][0]]
            t = turns[plan["inputs"]["instruction"][0]]
            assert n["inputs"]["seed"] == turn_seed(5, sid, t)
        if n["class_type"] == "ReSpecHistoryAppend":
            t = turns[n["inputs"]["instruction"][0]]
            assert json.loads(n["inputs"]["meta"])["seed"] == turn_seed(5, sid, t)


@pytest.mark.parametrize("config,pti,hrs,skip", [("respec", True, True, False), ("pti", True, False, False),
                                                 ("hrs", False, True, True)])
def test_run_remote_sets_the_table_2_switches_for_each_config(comfy_nodes, tmp_path, config, pti, hrs, skip):
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path, configs=[config], limit=1)
        prompt = next(iter(a.prompts.values()))

    def switch(node_class, name):
        values = set()
        for n in prompt.values():
            if n["class_type"] == node_class:
                v = n["inputs"][name]
                values.add(prompt[v[0]]["inputs"]["value"] if isinstance(v, list) else v)
        return values

    assert switch("ReSpecInstructionRewriter", "use_pti") == {pti}
    assert switch("ReSpecReferenceSelector", "use_history_reference") == {hrs}
    assert switch("ReSpecPreservationTarget", "skip_non_restoration") == {skip}
    assert read_rows(tmp_path)[0]["config"] == config


def test_run_remote_scenario_failing_everywhere_is_a_final_error_and_an_errors_row(comfy_nodes, tmp_path):
    def fail_index_1(prompt):
        loader = next(n for n in prompt.values() if n["class_type"] == workflow.SCENARIO_LOADER)
        return "SamplerCustomAdvanced:CUDA out of memory" if loader["inputs"]["index"] == 1 else None

    with FakeComfyUI(comfy_nodes, bench_execute, execution_error_for=fail_index_1) as a:
        with pytest.raises(remote.RemoteBenchError, match="out of memory"):
            run_bench([a.url], tmp_path, configs=["respec"], limit=3)
    assert len(read_rows(tmp_path)) == 2
    from respec.bench.results import ResultsFile
    errors = ResultsFile(tmp_path / "errors.jsonl").rows()
    assert len(errors) == 1 and "out of memory" in errors[0]["error"]


def test_run_remote_refuses_smoke_because_servers_run_real_models(tmp_path):
    with pytest.raises(InputError, match="smoke"):
        run_bench(["http://127.0.0.1:9"], tmp_path, smoke=True)


def test_fill_sets_a_switch_through_the_primitive_that_feeds_it():
    wf = workflow.load_api_workflow(workflow.default_workflow("respec", "flux2"))
    filled = workflow.fill_workflow(wf, dataset="occur_sample", index=2, config={"use_pti": False})
    prims = {filled[n["inputs"]["use_pti"][0]]["inputs"]["value"] for n in filled.values()
             if n["class_type"] == "ReSpecInstructionRewriter"}
    assert prims == {False}


def test_run_remote_defaults_to_the_native_route_and_labels_its_rows(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path / "n", configs=["respec", "baseline"], limit=1)
        native = list(a.prompts.values())
        run_bench([a.url], tmp_path / "d", configs=["respec"], limit=1, route="diffusers")
        diffusers = [p for pid, p in a.prompts.items() if p not in native]
    for p in native:
        types = {n["class_type"] for n in p.values()}
        assert "UNETLoader" in types and "ReSpecFlux2Edit" not in types
    assert {r["editor"] for r in read_rows(tmp_path / "n")} == {"flux2-native"}
    assert "ReSpecFlux2Edit" in {n["class_type"] for n in diffusers[0].values()}
    assert [r["editor"] for r in read_rows(tmp_path / "d")] == ["flux2"]
    with pytest.raises(InputError, match="route"):
        run_bench([a.url], tmp_path, route="gguf")


def test_a_scenario_prompt_sets_the_scenario_the_config_and_each_slots_seed():
    from respec.bench.configs import turn_seed
    from respec.occur.scenario import load_dataset
    ds = load_dataset("occur_sample")
    sc = ds.by_id("coffee_3t_move")
    wf = workflow.load_api_workflow(workflow.default_workflow("pti", "flux2", route="diffusers"))
    p = workflow.scenario_prompt(wf, ds, sc.id, "pti", "flux2", seed=4, size=96, steps=2)
    loader = next(n for n in p.values() if n["class_type"] == workflow.SCENARIO_LOADER)
    assert (loader["inputs"]["dataset"], loader["inputs"]["index"], loader["inputs"]["max_side"]) == \
        ("occur_sample", [s.id for s in ds].index(sc.id), 96)
    writer = next(n for n in p.values() if n["class_type"] == workflow.RESULTS_WRITER)
    assert (writer["inputs"]["config"], writer["inputs"]["editor"]) == ("pti", "flux2")
    slots = workflow.slot_turns(p)
    seeds = {slots[k]: n["inputs"]["seed"] for k, n in p.items() if n["class_type"] == "ReSpecFlux2Edit"}
    assert seeds == {t: turn_seed(4, sc.id, t) for t in range(1, 6)}
    with pytest.raises(InputError, match="no scenario"):
        workflow.scenario_prompt(wf, ds, "nope", "pti", "flux2")


def _recording_run(job_list, servers, **kw):
    """Like run(), but the rows keep the attempt number the runner reports."""
    rows = []
    urls = [s if isinstance(s, str) else s.url for s in servers]
    kw.setdefault("poll_interval", 0.2)
    summary = asyncio.run(remote.run_jobs(job_list, urls, lambda i, sid, row, info: rows.append((sid, info)),
                                          *_queue(kw), **kw))
    return summary, rows


def test_a_hung_servers_prompt_times_out_is_withdrawn_and_runs_elsewhere():
    with FakeComfyUI(NODE_INFO, execute, hang=True) as hung, FakeComfyUI(NODE_INFO, execute, step_delay=0.3) as good:
        summary, rows = _recording_run(jobs(3), [hung, good], timeout=1.0, max_server_failures=1)
    assert sorted(sid for sid, _ in rows) == ["s00", "s01", "s02"] and not summary.failed
    assert all(info["server"] == good.url for _, info in rows)
    stuck = hung.accepted[0]
    assert stuck in hung.deleted and stuck in hung.interrupted       # taken back from the hung server
    assert any(info["attempt"] == 2 for _, info in rows)             # that scenario's second try
    assert "timeout" in summary.retired[hung.url]


def test_a_retired_server_that_comes_back_is_used_again():
    import threading
    late = FakeComfyUI(NODE_INFO, execute, step_delay=0.05)           # down when the run starts
    starter = threading.Timer(1.0, late.__enter__)
    with FakeComfyUI(NODE_INFO, execute, step_delay=0.5) as steady:
        starter.start()
        try:
            summary, rows = _recording_run(jobs(8), [late.url, steady], server_grace=60,
                                           reprobe_backoff=(0.2, 0.5))
        finally:
            starter.join()
            late.__exit__(None, None, None)
    assert sorted(sid for sid, _ in rows) == [f"s{i:02d}" for i in range(8)] and not summary.failed
    assert summary.returned == {late.url: 1} and not summary.retired
    assert late.completed and summary.per_server[late.url] == len(late.completed)


def test_a_server_that_never_comes_back_is_given_up_after_the_grace_period():
    dead = f"http://127.0.0.1:{free_port()}"
    seen = []
    summary, rows = _recording_run(jobs(2), [dead], server_grace=1.0, reprobe_backoff=(0.2, 0.4),
                                   on_event=lambda server, label, kind, data: seen.append(kind))
    assert rows == [] and sorted(summary.failed) == ["s00", "s01"]
    assert "server_given_up" in seen and "unreachable" in summary.retired[dead]


def test_a_scenarios_configs_run_on_one_server():
    job_list = [(i, f"s{i // 4:02d}|c{i % 4}", workflow.fill_workflow(WORKFLOW, dataset="sample", index=i), f"s{i // 4:02d}")
                for i in range(12)]                                    # 3 scenarios x 4 configs
    with FakeComfyUI(NODE_INFO, execute, step_delay=0.05) as a, FakeComfyUI(NODE_INFO, execute, step_delay=0.05) as b:
        summary, rows = _recording_run(job_list, [a, b])
    assert len(rows) == 12 and not summary.failed
    servers_of = {}
    for label, info in rows:
        servers_of.setdefault(label.split("|")[0], set()).add(info["server"])
    assert all(len(s) == 1 for s in servers_of.values())
    assert len(set().union(*servers_of.values())) == 2               # both servers still worked


def _scenario_and_config(prompt):
    loader = next(n for n in prompt.values() if n["class_type"] == workflow.SCENARIO_LOADER)
    writer = next(n for n in prompt.values() if n["class_type"] == workflow.RESULTS_WRITER)
    return loader["inputs"]["index"], writer["inputs"]["config"]


def test_run_remote_queues_scenario_by_scenario(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path, configs=["baseline", "respec"], limit=3)
        order = [_scenario_and_config(a.prompts[pid]) for pid in a.accepted]
    assert [i for i, _ in order] == [0, 0, 1, 1, 2, 2]
    assert [c for _, c in order] == ["baseline", "respec"] * 3


def test_run_remote_refuses_to_resume_with_other_settings_or_model_files(comfy_nodes, tmp_path):
    with FakeComfyUI(comfy_nodes, bench_execute) as a:
        run_bench([a.url], tmp_path, configs=["respec"], limit=1)
        recorded = json.loads((tmp_path / "run.json").read_text())["identity"]
        assert recorded["model:UNETLoader.unet_name"] and recorded["route"] == "native"
        with pytest.raises(InputError, match="steps: none there, 12 now"):
            run_bench([a.url], tmp_path, configs=["respec"], limit=2, steps=12)
        with pytest.raises(InputError, match="UNETLoader.unet_name.*other-klein.safetensors"):
            run_bench([a.url], tmp_path, configs=["respec"], limit=2,
                      config={"UNETLoader.unet_name": "other-klein.safetensors"})
        accepted = len(a.accepted)
    assert accepted == 1 and len(read_rows(tmp_path)) == 1        # nothing ran or was written after a refusal


def test_run_remote_leaves_out_a_server_without_the_workflows_model_files(comfy_nodes, tmp_path):
    lacking = with_model_files(comfy_nodes, skip={"flux2-vae.safetensors"})
    with FakeComfyUI(lacking, bench_execute) as bare, FakeComfyUI(comfy_nodes, bench_execute) as good:
        summary = run_bench([bare.url, good.url], tmp_path, configs=["respec"], limit=2, server_grace=0)
    assert not bare.accepted and summary.per_server[good.url] == 2
    assert "flux2-vae.safetensors" in summary.retired[bare.url]


def test_a_remote_run_records_the_runners_values_of_the_settings_it_shares_with_it():
    settings = BenchSettings(dataset="occur_sample", seed=5, size=512, steps=12, editor="omnigen2")
    ident = remote.remote_identity(settings, "occur_sample", {}, "native")
    local = settings.identity("occur_sample")
    shared = ident.keys() & local.keys()
    assert shared == {"dataset_name", "seed", "size", "steps"}
    assert {k: ident[k] for k in shared} == {k: local[k] for k in shared}
    assert ident["editor"] == "omnigen2-native" and ident["route"] == "native"


def test_a_remote_run_refuses_a_folder_the_in_process_runner_filled_with_another_seed(tmp_path):
    from respec.bench.results import check_run_identity
    check_run_identity(tmp_path, BenchSettings(seed=0).identity("occur_sample"))   # as runner.RunPlan.start
    with pytest.raises(InputError, match="seed: 0 there, 5 now"):
        run_bench(["http://127.0.0.1:9"], tmp_path, configs=["respec"], limit=1, seed=5)
    assert not (tmp_path / "results.jsonl").exists()
