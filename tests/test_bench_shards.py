"""--shard i/N and `merge`: the shards of one run partition it; merging refuses what does not fit."""
from __future__ import annotations

import json

import pytest

from respec.bench.results import ResultsFile
from respec.bench.shards import Shard, comparable, differences, merge_results, parse_shard
from respec.errors import InputError


def _row(scenario: str, config: str, score: float = 0.5, seconds: float = 1.0) -> dict:
    return {"dataset": "d", "scenario_id": scenario, "config": config, "editor": "flux2", "S_TC": score,
            "seconds": {"total": seconds}, "finished_at": f"t{seconds}",
            "turns": [{"t": 1, "seconds": {"editor": seconds}, "editor_image_ids": [0]}]}


def _folder(tmp_path, name: str, rows: list[dict], identity: dict | None = None):
    folder = tmp_path / name
    folder.mkdir()
    results = ResultsFile(folder / "results.jsonl")
    for r in rows:
        results.append(r)
    (folder / "run.json").write_text(json.dumps({"identity": identity or {"seed": 0}, "settings": {}}))
    return folder


def test_shard_spec_is_i_of_n():
    assert parse_shard("2/8") == Shard(2, 8)
    assert parse_shard(None) is None
    for bad in ("0/2", "3/2", "1/0", "a/b", "1-2"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)


def test_shards_partition_the_scenarios_and_keep_a_scenarios_configs_together():
    ids = [f"s{i:03d}" for i in range(300)]
    shards = [Shard(i, 4) for i in range(1, 5)]
    owners = {sid: [s for s in shards if s.holds("occur", sid)] for sid in ids}
    assert all(len(o) == 1 for o in owners.values())          # each scenario in exactly one shard
    sizes = [sum(1 for o in owners.values() if o[0] == s) for s in shards]
    assert min(sizes) > 300 / 4 * 0.6                           # roughly even
    assert Shard(1, 1).holds("occur", "anything")


def test_comparable_drops_timings_at_every_depth():
    a, b = _row("s1", "baseline", seconds=1.0), _row("s1", "baseline", seconds=9.0)
    assert a != b
    assert comparable(a) == comparable(b)
    c = _row("s1", "baseline", score=0.7)
    assert differences(comparable(a), comparable(c)) == [".S_TC: 0.5 in the first, 0.7 in the second"]


def test_differences_can_allow_float_rounding_but_nothing_else():
    a, b = {"S_TC": 0.5, "n": 1, "ids": [0, 3]}, {"S_TC": 0.5 + 1e-7, "n": 1, "ids": [0, 3]}
    assert differences(a, b) == [".S_TC: 0.5 in the first, 0.5000001 in the second"]
    assert differences(a, b, tol=1e-6) == []
    assert differences(a, {**b, "S_TC": 0.6}, tol=1e-6) != []
    assert differences(a, {**b, "n": 2}, tol=1e-6) == [".n: 1 in the first, 2 in the second"]


def test_merge_dedupes_by_key_and_copies_images(tmp_path):
    one = _folder(tmp_path, "one", [_row("s1", "baseline"), _row("s2", "baseline")])
    two = _folder(tmp_path, "two", [_row("s2", "baseline", seconds=5.0), _row("s3", "respec")])
    img = one / "images" / "s1" / "baseline-flux2" / "I0.png"
    img.parent.mkdir(parents=True)
    img.write_bytes(b"png")
    rows = ResultsFile(one / "results.jsonl").rows()
    rows[0]["images"] = ["images/s1/baseline-flux2/I0.png"]
    (one / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    summary = merge_results([one, two], tmp_path / "all")
    merged = ResultsFile(tmp_path / "all" / "results.jsonl").rows()
    assert sorted(r["key"] for r in merged) == ["d|s1|baseline|flux2", "d|s2|baseline|flux2", "d|s3|respec|flux2"]
    assert summary.rows == 3 and summary.duplicates == 1
    assert (tmp_path / "all" / "images" / "s1" / "baseline-flux2" / "I0.png").read_bytes() == b"png"
    assert json.loads((tmp_path / "all" / "run.json").read_text())["merged_from"] == [str(one), str(two)]


def test_merge_refuses_conflicting_rows_and_writes_nothing(tmp_path):
    one = _folder(tmp_path, "one", [_row("s1", "baseline", score=0.5)])
    two = _folder(tmp_path, "two", [_row("s1", "baseline", score=0.9)])
    with pytest.raises(InputError, match=r"d\|s1\|baseline\|flux2.*S_TC: 0.5 in the first, 0.9"):
        merge_results([one, two], tmp_path / "all")
    assert not (tmp_path / "all" / "results.jsonl").exists()


def test_merge_refuses_folders_made_with_other_settings(tmp_path):
    one = _folder(tmp_path, "one", [_row("s1", "baseline")], identity={"seed": 0})
    two = _folder(tmp_path, "two", [_row("s2", "baseline")], identity={"seed": 1})
    with pytest.raises(InputError, match="different settings"):
        merge_results([one, two], tmp_path / "all")


def test_merge_refuses_a_folder_without_results_and_a_used_target(tmp_path):
    one = _folder(tmp_path, "one", [_row("s1", "baseline")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no results.jsonl"):
        merge_results([one, tmp_path / "empty"], tmp_path / "all")
    with pytest.raises(InputError, match="also one of the folders"):
        merge_results([one], one)
    merge_results([one], tmp_path / "all")
    with pytest.raises(InputError, match="already has rows"):
        merge_results([one], tmp_path / "all")


def test_merge_keeps_errors_only_for_keys_without_a_row(tmp_path):
    one = _folder(tmp_path, "one", [_row("s1", "baseline")])
    two = _folder(tmp_path, "two", [])
    errs = ResultsFile(two / "errors.jsonl")
    errs.append({"key": "d|s1|baseline|flux2|1700000000", "status": "error", "error": "oom"})
    errs.append({"key": "d|s9|baseline|flux2|1700000000", "status": "error", "error": "oom"})
    summary = merge_results([one, two], tmp_path / "all")
    kept = ResultsFile(tmp_path / "all" / "errors.jsonl").rows()
    assert summary.errors == 1 and [e["key"] for e in kept] == ["d|s9|baseline|flux2|1700000000"]


@pytest.mark.slow
def test_two_shards_merged_equal_one_unsharded_run(tmp_path, capsys):
    from respec.__main__ import main
    common = ["bench", "--editor", "sim", "--size", "96", "--config", "all", "--limit", "10", "--quiet"]
    assert main(common + ["--out", str(tmp_path / "whole")]) == 0
    assert main(common + ["--shard", "1/2", "--out", str(tmp_path / "s1")]) == 0
    assert main(common + ["--shard", "2/2", "--out", str(tmp_path / "s2")]) == 0
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--into", str(tmp_path / "all")]) == 0
    whole = {r["key"]: r for r in ResultsFile(tmp_path / "whole" / "results.jsonl").rows()}
    parts = [ResultsFile(tmp_path / s / "results.jsonl").rows() for s in ("s1", "s2")]
    merged = {r["key"]: r for r in ResultsFile(tmp_path / "all" / "results.jsonl").rows()}
    assert len(whole) == 40 and all(parts)                  # each shard did some of the work
    assert not {r["key"] for r in parts[0]} & {r["key"] for r in parts[1]}
    assert merged.keys() == whole.keys()
    for key in whole:
        assert differences(comparable(merged[key]), comparable(whole[key])) == [], key
    assert (tmp_path / "all" / "report" / "report.md").is_file()
