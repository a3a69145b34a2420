"""The results file (append-only, no duplicates, torn lines) and the report's aggregates on
hand-made rows with known answers."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from respec.bench.report import area_tertiles, build_tables, stat, write_report
from respec.bench.results import ResultsFile, row_key


def _row(sid, config="baseline", editor="flux2", **kw):
    r = {"dataset": "d", "scenario_id": sid, "config": config, "editor": editor, "status": "ok",
         "revelation_type": "remove", "reference_distance": 2, "num_turns": 2, "restore_area_ratio": 0.1,
         "S_restore": 0.5, "S_preserve": 0.5, "S_TC": 0.5, "S_IF": None, "judge": False,
         "reference_correct": None, "controller": ""}
    r.update(kw)
    r["key"] = row_key(r)
    return r


def _table(tables, name):
    return next(t for t in tables if t.name == name)


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------ results file

def test_a_row_is_appended_once_and_a_second_append_of_its_key_is_dropped(tmp_path):
    rf = ResultsFile(tmp_path / "r.jsonl")
    assert rf.append(_row("a")) is True
    assert rf.append(_row("a", S_TC=0.9)) is False
    assert rf.append(_row("a", config="respec")) is True
    rows = rf.rows()
    assert [r["config"] for r in rows] == ["baseline", "respec"] and rows[0]["S_TC"] == 0.5


def test_a_torn_last_line_is_ignored_and_cut_before_the_next_append(tmp_path):
    p = tmp_path / "r.jsonl"
    rf = ResultsFile(p)
    rf.append(_row("a"))
    with open(p, "ab") as f:
        f.write(b'{"dataset": "d", "scenario_id": "b", "conf')   # a crash in the middle of a write
    assert [r["scenario_id"] for r in rf.rows()] == ["a"] and rf.skipped_lines == 1
    assert rf.done_keys() == {_row("a")["key"]}
    rf.append(_row("c"))
    lines = p.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)


def _append_in_another_process(path, row):
    """Append `row` to `path` from a separate Python process (its own ResultsFile, its own memory)."""
    code = ("import json, sys; from respec.bench.results import ResultsFile; "
            "print(ResultsFile(sys.argv[1]).append(json.loads(sys.argv[2])))")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code, str(path), json.dumps(row)], cwd=root, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


@pytest.mark.slow
def test_a_row_appended_by_another_process_is_seen_by_an_open_results_file(tmp_path):
    p = tmp_path / "r.jsonl"
    rf = ResultsFile(p)
    assert rf.append(_row("a"))
    assert rf.done_keys() == {_row("a")["key"]}        # keys now held in memory
    assert _append_in_another_process(p, _row("b"))
    assert not _append_in_another_process(p, _row("a"))   # the other process sees ours too
    assert _row("b")["key"] in rf.done_keys()
    assert rf.append(_row("b", S_TC=0.9)) is False        # not written twice
    assert rf.append(_row("c")) is True
    assert [r["scenario_id"] for r in rf.rows()] == ["a", "b", "c"]


def test_an_append_reads_only_what_other_processes_added(tmp_path, monkeypatch):
    from respec.bench import results
    p = tmp_path / "r.jsonl"
    rf = ResultsFile(p)
    for i in range(50):
        rf.append(_row(f"s{i}"))
    real_read = os.read

    def bytes_read_by(append, row):
        read = []
        monkeypatch.setattr(results.os, "read", lambda fd, n: _counted(read, fd, n))
        try:
            assert append(row)
        finally:
            monkeypatch.setattr(results.os, "read", real_read)
        return sum(read)

    def _counted(read, fd, n):
        data = real_read(fd, n)
        read.append(len(data))
        return data

    assert bytes_read_by(rf.append, _row("own")) == 0          # nothing new in the file: nothing read
    assert _append_in_another_process(p, _row("other"))
    other_line = len(p.read_bytes().splitlines()[-1]) + 1
    assert bytes_read_by(rf.append, _row("own-2")) == other_line   # just the other process's line


def test_a_results_file_replaced_behind_an_open_one_is_read_again(tmp_path):
    p = tmp_path / "r.jsonl"
    rf = ResultsFile(p)
    rf.append(_row("a"))
    rf.append(_row("b"))
    p.unlink()                                  # e.g. a fresh run started over in the same folder
    ResultsFile(p).append(_row("c"))
    assert rf.done_keys() == {_row("c")["key"]}
    assert rf.append(_row("a")) is True
    assert [r["scenario_id"] for r in rf.rows()] == ["c", "a"]


def test_nan_scores_are_written_as_null(tmp_path):
    p = tmp_path / "r.jsonl"
    ResultsFile(p).append(_row("a", S_restore=math.nan, S_TC=math.inf))
    text = p.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["S_restore"] is None


# ------------------------------------------------------------------------------ aggregates

def test_means_leave_nan_out_and_count_it():
    s = stat([0.2, None, 0.4, math.nan, "x"])
    assert s.n == 2 and s.nan == 3 and s.mean == pytest.approx(0.3)
    assert math.isnan(stat([None]).mean) and stat([None]).cell() == "— (NaN 1)"


def test_table_1_and_2_average_per_editor_and_config_without_nan():
    rows = [_row("a", S_restore=0.2, S_preserve=0.4, S_TC=0.3),
            _row("b", S_restore=None, S_preserve=0.6, S_TC=None, nan_reason="R_restore is empty"),
            _row("a", "respec", S_restore=0.6, S_preserve=0.8, S_TC=0.7),
            _row("b", "respec", S_restore=0.8, S_preserve=0.6, S_TC=0.7),
            _row("a", "pti", S_TC=0.1)]
    tables = build_tables(rows)
    t1 = _table(tables, "table1_main")
    assert [r[0] for r in t1.md_rows] == ["Flux.2", "Flux.2 w/ ReSpec"]   # table 1: baseline vs ReSpec only
    base = dict(zip(t1.header, t1.md_rows[0]))
    # row b has no S_restore/S_TC, so its S_preserve is left out too (S_TC = mean of its parts)
    assert base["S_restore"] == "0.200" and base["S_preserve"] == "0.400" and base["S_TC"] == "0.300"
    assert base["NaN left out"] == "S_restore/S_preserve/S_TC: 1 row"
    assert dict(zip(t1.header, t1.md_rows[1]))["S_TC"] == "0.700"
    t2 = _table(tables, "table2_ablation")
    assert [r[0] for r in t2.md_rows] == ["Flux.2", "Flux.2 + PTI", "Flux.2 + PTI + HRS"]


def test_s_tc_equals_the_mean_of_its_parts_over_the_same_rows():
    # S_TC = (S_restore + S_preserve) / 2 per row; a row missing any of the three leaves all three
    rows = [_row("a", S_restore=0.6, S_preserve=0.6, S_TC=0.6),
            _row("b", S_restore=None, S_preserve=0.7, S_TC=None),
            _row("c", S_restore=0.2, S_preserve=None, S_TC=None),
            _row("d", S_restore=0.4, S_preserve=0.8, S_TC=0.6)]
    t1 = _table(build_tables(rows), "table1_main")
    cells = dict(zip(t1.header, t1.md_rows[0]))
    s_r, s_p, s_tc = (float(cells[k]) for k in ("S_restore", "S_preserve", "S_TC"))
    assert s_tc == pytest.approx((s_r + s_p) / 2, abs=1e-3) and (s_r, s_p, s_tc) == (0.5, 0.7, 0.6)
    assert cells["NaN left out"] == "S_restore/S_preserve/S_TC: 2 rows"
    csv_row = dict(zip(t1.csv_header, t1.csv_rows[0]))
    assert csv_row["S_preserve_n"] == csv_row["S_TC_n"] == 2 and csv_row["S_preserve_nan"] == 2


def test_s_if_counts_only_where_the_judge_ran():
    rows = [_row("a", judge=True, S_IF=0.6), _row("b", judge=True, S_IF=None), _row("c", S_IF=None)]
    t1 = _table(build_tables(rows), "table1_main")
    cells = dict(zip(t1.header, t1.md_rows[0]))
    assert cells["S_IF"] == "0.600" and cells["NaN left out"] == "S_IF: 1"


def test_table_4_groups_by_revelation_type_in_the_papers_order():
    rows = [_row("a", revelation_type="move", S_TC=0.4), _row("b", revelation_type="resize", S_TC=0.2),
            _row("c", revelation_type="move", S_TC=0.6)]
    t4 = _table(build_tables(rows), "table4_revelation_type")
    assert [r[0] for r in t4.md_rows] == ["A Resize", "B Move"]
    assert t4.md_rows[1][1] == "0.500 (2)"


def test_table_5_groups_by_reference_distance():
    rows = [_row("a", reference_distance=2, S_TC=0.8), _row("b", reference_distance=4, S_TC=0.4),
            _row("c", reference_distance=4, S_TC=0.2), _row("d", reference_distance=5, S_TC=None)]
    t5 = _table(build_tables(rows), "table5_reference_distance")
    assert [r[:2] for r in t5.md_rows] == [["\u0394 = 2", "0.800 (1)"], ["\u0394 = 4", "0.300 (2)"], ["\u0394 = 5", "— (NaN 1)"]]
    assert "NaN values left out: 1" in t5.note


def test_area_tertiles_cut_the_scenarios_into_thirds():
    rows = [_row(s, restore_area_ratio=v) for s, v in
            zip("abcdef", [0.01, 0.02, 0.05, 0.06, 0.30, 0.40])]
    bins, (q1, q2) = area_tertiles(rows)
    assert q1 == pytest.approx(0.02 + (0.05 - 0.02) * 2 / 3) and q2 == pytest.approx(0.06 + (0.30 - 0.06) / 3)
    assert [bins[f"d|{s}"] for s in "abcdef"] == ["Small", "Small", "Medium", "Medium", "Large", "Large"]


def test_a_scenarios_configs_share_one_area_bin_from_their_median_ratio():
    rows = [_row("a", restore_area_ratio=0.01), _row("a", "respec", restore_area_ratio=0.5),
            _row("a", "pti", restore_area_ratio=0.02),
            _row("b", restore_area_ratio=0.2), _row("c", restore_area_ratio=0.3),
            _row("n", restore_area_ratio=None)]
    bins, _ = area_tertiles(rows)
    assert bins["d|a"] == "Small" and "d|n" not in bins


def test_table_6_reports_the_respec_gain_per_area_bin():
    rows = []
    for s, area, base, full in (("a", 0.01, 0.6, 0.7), ("b", 0.2, 0.5, 0.6), ("c", 0.5, 0.4, 0.8)):
        rows += [_row(s, restore_area_ratio=area, S_TC=base), _row(s, "respec", restore_area_ratio=area, S_TC=full)]
    t6 = _table(build_tables(rows), "table6_area_tertile")
    assert t6.header[-1] == "Gain Flux.2"
    assert [(r[0], r[-1]) for r in t6.md_rows] == [("Small", "+0.100"), ("Medium", "+0.100"), ("Large", "+0.400")]


def test_table_7_is_the_fraction_of_correct_restoration_sources():
    rows = [_row("a", "respec", controller="qwen", reference_correct=True, S_restore=0.6),
            _row("b", "respec", controller="qwen", reference_correct=False, S_restore=0.2),
            _row("c", "respec", controller="qwen", reference_correct=True, S_restore=0.4),
            _row("a", controller="", reference_correct=None)]
    t7 = _table(build_tables(rows), "table7_reference_accuracy")
    assert len(t7.md_rows) == 1
    row = dict(zip(t7.header, t7.md_rows[0]))
    assert row["Ref. Acc."] == "66.7%" and row["S_restore"] == "0.400" and row["N"] == "3"


def test_figure_7_averages_s_restore_by_number_of_turns(tmp_path):
    rows = [_row("a", num_turns=2, S_restore=0.8), _row("b", num_turns=5, S_restore=0.2),
            _row("c", num_turns=5, S_restore=0.4), _row("a", "respec", num_turns=2, S_restore=0.9)]
    paths = write_report(rows, tmp_path)
    data = _csv(paths["figure7_turns"])
    assert [d["group"] for d in data] == ["2 turns", "5 turns"]
    assert float(data[1]["Flux.2"]) == pytest.approx(0.3) and data[1]["Flux.2 n"] == "2"
    png = (tmp_path / "figure7_turns.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_report_command_writes_every_table_as_markdown_and_csv(tmp_path):
    rf = ResultsFile(tmp_path / "results.jsonl")
    for r in (_row("a", parts={"restore": {"psnr_db": 20.0}}, seconds={"editor": 1.5}),
              _row("a", "respec", reference_correct=True, controller="qwen")):
        rf.append(r)
    paths = write_report(tmp_path / "results.jsonl", tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    for title in ("Table 1", "Table 2", "Table 4", "Table 5", "Table 6", "Table 7", "Figure 7"):
        assert title in md
    for name in ("table1_main", "table2_ablation", "table4_revelation_type", "table5_reference_distance",
                 "table6_area_tertile", "table7_reference_accuracy", "figure7_turns", "scenarios"):
        assert (tmp_path / "rep" / f"{name}.csv").is_file(), name
    per = _csv(paths["scenarios"])
    assert per[0]["parts.restore.psnr_db"] == "20.0" and per[0]["seconds.editor"] == "1.5"


def test_rows_that_failed_are_not_averaged():
    rows = [_row("a", S_TC=0.2), _row("b", S_TC=0.9, status="error")]
    t2 = _table(build_tables(rows), "table2_ablation")
    assert dict(zip(t2.header, t2.md_rows[0]))["S_TC"] == "0.200"


def test_without_matplotlib_the_report_says_how_to_get_figure_7(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    paths = write_report([_row("a", num_turns=2, S_restore=0.8)], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "pip install matplotlib" in md and "figure7_turns.csv" in md
    assert "figure7" not in paths and not (tmp_path / "figure7_turns.png").exists()
    assert (tmp_path / "figure7_turns.csv").is_file()


# ------------------------------------------------------------------------------ what the numbers are (issue 21)

def _parts(pr, pp, lp=0.5, cl=0.5):
    part = lambda db: {"psnr_db": db, "psnr_norm": db / 50, "lpips": lp, "clip": cl}  # noqa: E731
    return {"restore": part(pr), "preserve": part(pp)}


def _plan_turn(t, fallbacks, vlm=True):
    return {"t": t, "fallbacks": list(fallbacks), "plan": {"vlm_called": vlm}}


FAILED = ["json_parse_failed", "identity_anchor_id_missing", "restoration_source_id_missing"]


def test_with_random_lpips_and_clip_the_headline_scores_are_the_psnr_part_and_say_so():
    tiny = "lpips+clip (tiny random weights: ...)"
    rows = [_row("a", scorer=tiny, S_restore=0.9, S_preserve=0.9, S_TC=0.9, parts=_parts(15.0, 30.0)),
            _row("b", scorer=tiny, S_restore=0.9, S_preserve=0.9, S_TC=0.9, parts=_parts(25.0, 30.0))]
    t1 = _table(build_tables(rows), "table1_main")
    assert t1.header[1:4] == ["S_restore†", "S_preserve†", "S_TC†"] and "PSNR part only" in t1.note
    assert t1.md_rows[0][1:4] == ["0.400", "0.600", "0.500"]                 # 20 dB / 50, 30 dB / 50
    assert t1.md_rows[0][5:7] == ["20.0", "30.0"]                           # PSNR in dB
    real = [dict(r, scorer="lpips:alexnet-owt-7be5be79.pth+clip:x") for r in rows]
    t1 = _table(build_tables(real), "table1_main")
    assert t1.header[1] == "S_restore" and t1.md_rows[0][1:4] == ["0.900", "0.900", "0.900"]   # the full A.5 score


def test_psnr_in_db_is_in_tables_2_and_4_to_7():
    rows = [_row("a", config=c, parts=_parts(10.0 + 10 * i, 30.0), reference_correct=True, use_hrs=c != "baseline",
                 controller="q") for i, c in enumerate(("baseline", "respec"))]
    tables = {t.name: t for t in build_tables(rows)}
    assert tables["table2_ablation"].md_rows[1][5:7] == ["20.0", "30.0"]
    for name in ("table4_revelation_type", "table5_reference_distance", "table6_area_tertile"):
        assert tables[name].md_rows[0][1].endswith("· 10.0 / 30.0 dB"), name
    t7 = tables["table7_reference_accuracy"]
    assert "PSNR_restore (dB)" in t7.header and t7.md_rows[0][t7.header.index("PSNR_restore (dB)")] == "20.0"


def test_reference_accuracy_only_for_configs_whose_editor_gets_the_reference_with_the_c3_count():
    rows = [_row("a", config="pti", use_hrs=False, reference_correct=True, controller="q", restoration_turn=2,
                 turns=[_plan_turn(2, FAILED)]),
            _row("a", config="hrs", use_hrs=True, reference_correct=True, controller="q", restoration_turn=2,
                 turns=[_plan_turn(2, FAILED)]),
            _row("b", config="hrs", use_hrs=True, reference_correct=False, controller="q", restoration_turn=2,
                 turns=[_plan_turn(2, [])])]
    t7 = _table(build_tables(rows), "table7_reference_accuracy")
    assert [r[1] for r in t7.md_rows] == ["Flux.2 + HRS"]
    assert t7.md_rows[0][2:4] == ["50.0%", "1 of 2"]


def test_the_report_counts_parsed_plans_and_fallbacks_per_config_and_says_when_none_parsed(tmp_path):
    from respec.bench.report import controller_answers
    ok = [_row("a", config="respec", vlm_calls=2, turns=[_plan_turn(1, []), _plan_turn(2, ["restoration_region_empty"])]),
          _row("a", config="respec-prov", vlm_calls=1, turns=[_plan_turn(1, ["json_parse_failed"]),
                                                               _plan_turn(2, [], vlm=False)]),
          _row("a", config="baseline", vlm_calls=0)]
    stats, sentence = controller_answers(ok)
    by = {s["config"]: s for s in stats}
    assert (by["respec"]["plans"], by["respec"]["parsed"]) == (2, 1 + 1)
    assert by["respec"]["fallbacks"] == {"restoration_region_empty": 1}
    assert (by["respec-prov"]["vlm_calls"], by["respec-prov"]["plans"], by["respec-prov"]["parsed"]) == (1, 1, 0)
    assert sentence == ""
    bad = [_row("a", config="respec", vlm_calls=2, turns=[_plan_turn(1, ["json_parse_failed"]), _plan_turn(2, FAILED)])]
    stats, sentence = controller_answers(bad)
    assert "No controller answer parsed" in sentence and "C.3 fallback's fixed choice, I_0" in sentence
    md = Path(write_report(bad, tmp_path)["report"]).read_text()
    assert "No controller answer parsed** (2 of 2 plans fell back)" in md
    assert "json_parse_failed 2, restoration_source_id_missing 1" in md


def test_the_provenance_label_counts_its_vlm_calls_instead_of_promising_none():
    from respec.bench.report import column_label
    assert "VLM calls" not in column_label("sim", "respec-prov")
    rows = [_row("a", config="respec-prov", vlm_calls=1), _row("b", config="respec-prov", vlm_calls=0)]
    t2 = _table(build_tables(rows), "table2_ablation")
    assert t2.md_rows[0][t2.header.index("VLM calls")] == "1"


def test_figure_7_uses_the_tables_names_marks_equal_series_and_names_the_run(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    from respec.bench import report
    drawn = {}
    real_savefig = Figure.savefig

    def spy(fig, path, *a, **kw):
        ax = fig.axes[0]
        legend = ax.get_legend()
        drawn.update(title=ax.get_title(), ylim=ax.get_ylim(), labels=[t.get_text() for t in legend.get_texts()],
                     styles=[(ln.get_marker(), ln.get_linestyle()) for ln in ax.lines],
                     outside=legend.get_bbox_to_anchor().x0 > ax.get_position().x1 * fig.bbox.width * 0.99)
        return real_savefig(fig, path, *a, **kw)
    monkeypatch.setattr(Figure, "savefig", spy)
    configs = ["baseline", "hrs", "pti", "respec"]
    rows = [_row(f"s{n}", config=c, editor="sim", num_turns=n, S_restore=0.70 + (0.1 if "r" in c[:2] else 0) + n / 1000)
            for n in (2, 3) for c in configs]
    report.plot_turns(rows, tmp_path / "f.png")
    assert drawn["labels"] == ["Sim (simulated)", "Sim (simulated) + HRS", "Sim (simulated) + PTI  (= Sim (simulated))",
                               "Sim (simulated) + PTI + HRS  (= Sim (simulated) + HRS)"]
    assert len(set(drawn["styles"])) == 4                       # every series its own marker and dash
    assert "sim run" in drawn["title"] and drawn["ylim"] == (0.0, 1.0) and not drawn["outside"]
    smoke = [dict(r, smoke=True, editor="flux2") for r in rows]
    more = smoke + [dict(r, config="respec+reveal", key=r["key"] + "x") for r in smoke[:2]]
    report.plot_turns(more, tmp_path / "g.png")
    assert "smoke run" in drawn["title"] and drawn["outside"]   # 5 series: the legend leaves the plot


def test_the_robustness_table_counts_reveals_and_bad_pastes():
    from respec.bench.report import robustness_table

    def row(sid, config, s, applied=None):
        turns = [{"t": 1, "is_restoration": False, "post_edit": []}]
        if applied is not None:
            turns.append({"t": 2, "is_restoration": True,
                          "post_edit": [{"step": "reveal_composite", "applied": applied}]})
        return {"dataset": "d", "scenario_id": sid, "config": config, "S_restore": s, "turns": turns}
    runs = {"zoom 1 %": [row("a", "respec-prov", 0.8), row("a", "respec-prov+reveal", 0.9, True),
                         row("b", "respec-prov", 0.8), row("b", "respec-prov+reveal", 0.7, True),
                         row("c", "respec-prov", 0.6), row("c", "respec-prov+reveal", 0.6, False)]}
    t = robustness_table(runs)
    assert t.md_rows[0][:4] == ["zoom 1 %", "3", "2", "1"]
    assert t.md_rows[0][-1] == "1"              # b: applied and 0.1 worse than without the reveal
    assert t.csv_rows[0][4] == pytest.approx(0.7333, abs=1e-3) and t.csv_rows[0][5] == pytest.approx(0.7333, abs=1e-3)
