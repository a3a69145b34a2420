"""Queueing the benchmark workflow to ComfyUI servers over HTTP + websocket (issue 6, item 4).

The servers are local aiohttp servers speaking ComfyUI's /prompt, /history, /ws and
/object_info protocol (tests/fake_comfyui.py); one of them fails mid-run, one is unreachable.
"""
from __future__ import annotations

import asyncio
import json

import pytest

from fake_comfyui import FakeComfyUI, free_port
from respec.bench import remote
from respec.errors import InputError

LOADER, WRITER = remote.SCENARIO_LOADER, remote.RESULTS_WRITER

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
    return {"3": {remote.ROW_UI_KEY: [json.dumps(row)]}}


def jobs(n, **fill):
    return [(i, f"s{i:02d}", remote.fill_workflow(WORKFLOW, dataset="sample", index=i, **fill)) for i in range(n)]


def run(job_list, servers, **kw):
    """Run prompts on the servers; returns the summary and the rows (scenario id, row, server)."""
    rows = []
    kw.setdefault("poll_interval", 0.5)
    urls = [s if isinstance(s, str) else s.url for s in servers]
    summary = asyncio.run(remote.run_jobs(job_list, urls, lambda i, sid, row, server: rows.append((sid, row, server)), **kw))
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
    with FakeComfyUI(NODE_INFO, execute, reject_500=True) as bad, FakeComfyUI(NODE_INFO, execute) as good:
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
    broken = remote.fill_workflow(WORKFLOW, dataset="sample", index=0)
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


def test_fill_workflow_sets_scenario_seed_and_config_switches():
    wf = remote.fill_workflow(WORKFLOW, dataset="/data/occur", index=4, seed=11,
                              config={"use_pti": False})
    assert wf["1"]["inputs"] == {"dataset": "/data/occur", "index": 4}
    assert wf["2"]["inputs"]["seed"] == 11 and wf["2"]["inputs"]["use_pti"] is False
    assert wf["2"]["inputs"]["scenario"] == ["1", 0]          # links untouched
    assert WORKFLOW["1"]["inputs"]["index"] == 0              # the template is not modified


def test_config_key_matching_no_widget_is_refused():
    with pytest.raises(InputError, match="use_pit"):
        remote.fill_workflow(WORKFLOW, dataset="sample", index=0, config={"use_pit": False})


def test_ui_format_workflow_is_refused_for_the_api():
    with pytest.raises(InputError, match="UI-format"):
        remote.load_api_workflow({"nodes": [], "links": [], "version": 0.4})
