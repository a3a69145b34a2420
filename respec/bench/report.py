"""Reports over a results file, laid out like the paper's tables 1, 2, 4-7 and figure 7.

One call (`write_report(results, out_dir)`, or `python -m respec report RESULTS`) writes:

    report.md          every table in markdown, with counts and the NaN rows left out
    scenarios.csv      one row per scenario x config x editor (scores, parts, S_IF, reference
                       chosen vs ground truth, VLM calls, per-stage seconds)
    table1_main.csv, table2_ablation.csv, table4_revelation_type.csv,
    table5_reference_distance.csv, table6_area_tertile.csv, table7_reference_accuracy.csv,
    table7b_reference_right_wrong.csv,
    figure7_turns.csv, figure7_turns.png
    table_beyond.csv   beyond the paper (when the run has the "beyond" configs: the main job does)

Means skip NaN (a region that was empty, a judge that did not answer) and every table says how
many values were left out. In the score tables a row without all of S_restore, S_preserve and
S_TC is left out of all three, so S_TC is always the mean of the S_restore and S_preserve shown. A "column" of a table is one editor x config (e.g. "Flux.2 + PTI").
"""
from __future__ import annotations

import csv
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..eval.metrics import reference_accuracy
from .configs import CONFIG_GROUPS
from .results import ResultsFile

log = logging.getLogger("respec")

BEYOND_CONFIGS = tuple(CONFIG_GROUPS["beyond"])   # reported in their own table, not in the paper's
CONFIG_ORDER = ("baseline", "hrs", "pti", "respec", "hrs+reveal", "pti+reveal", "respec+reveal",
                "respec-prov", "respec-prov+reveal", "respec-hybrid", "respec-hybrid+reveal")
CONFIG_SUFFIX = {"baseline": "", "hrs": " + HRS", "pti": " + PTI", "respec": " + PTI + HRS",
                 "hrs+reveal": " + HRS + reveal", "pti+reveal": " + PTI + reveal",
                 "respec+reveal": " + PTI + HRS + reveal",
                 "respec-prov": " + ReSpec-prov", "respec-prov+reveal": " + ReSpec-prov + reveal",
                 "respec-hybrid": " + ReSpec-hybrid", "respec-hybrid+reveal": " + ReSpec-hybrid + reveal"}
# Table 1's rows: the paper's two, and the provenance method beside them (beyond the paper).
MAIN_CONFIGS = ("baseline", "respec", "respec-prov", "respec-prov+reveal")
EDITOR_NAMES = {"flux2": "Flux.2", "omnigen2": "OmniGen2", "tiny": "tiny klein (smoke)", "sim": "Sim (simulated)"}
REVELATION_LABELS = OrderedDict([("resize", "A Resize"), ("move", "B Move"), ("replace", "C Replace"),
                                 ("remove", "D Remove"), ("multi", "E Multi-edit")])
TERTILES = ("Small", "Medium", "Large")
SCORES = ("S_restore", "S_preserve", "S_TC", "S_IF")
TC_SCORES = ("S_restore", "S_preserve", "S_TC")   # left out together (S_TC is built from the other two)


def _num(v: Any) -> float:
    """A score as float; None / missing / non-numbers are NaN."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


@dataclass
class Stat:
    """Mean over the finite values, with how many were used and how many were NaN."""
    mean: float
    n: int
    nan: int

    def cell(self, digits: int = 3, with_n: bool = False) -> str:
        """A table cell: the mean (with n if asked), '—' when no value was finite (with the NaN count)."""
        if self.n == 0:
            return "—" if not self.nan else f"— (NaN {self.nan})"
        s = f"{self.mean:.{digits}f}"
        return f"{s} ({self.n})" if with_n else s


def stat(values: Iterable[Any]) -> Stat:
    """Mean of the finite values; NaN/None are counted, not averaged."""
    vals = [_num(v) for v in values]
    good = [v for v in vals if math.isfinite(v)]
    return Stat(sum(good) / len(good) if good else math.nan, len(good), len(vals) - len(good))


def editor_label(editor: str) -> str:
    """The editor's name as the paper's tables print it ('flux2' -> 'Flux.2')."""
    return EDITOR_NAMES.get(editor, editor)


def column_label(editor: str, config: str, main: bool = False) -> str:
    """'Flux.2', 'Flux.2 + HRS', ... ; in table 1 the full method reads 'Flux.2 w/ ReSpec'."""
    if main and config == "respec":
        return f"{editor_label(editor)} w/ ReSpec"
    return editor_label(editor) + CONFIG_SUFFIX.get(config, f" [{config}]")


def _columns(rows: list[dict], configs: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(editor, config) pairs present, editors in first-seen order, configs in the paper's order."""
    editors = list(OrderedDict.fromkeys(r.get("editor", "?") for r in rows))
    present = {(r.get("editor", "?"), r.get("config", "?")) for r in rows}
    order = list(CONFIG_ORDER) + sorted({c for _, c in present} - set(CONFIG_ORDER))
    want = set(configs) if configs is not None else None
    return [(e, c) for e in editors for c in order if (e, c) in present and (want is None or c in want)]


def ok_rows(rows: list[dict]) -> list[dict]:
    """The latest row per key with status ok (a results file never holds duplicates, but a
    hand-merged one might)."""
    latest: dict[str, dict] = {}
    for r in rows:
        if r.get("status", "ok") != "ok":
            continue
        key = r.get("key") or "|".join(str(r.get(k)) for k in ("dataset", "scenario_id", "config", "editor"))
        latest[key] = r
    return list(latest.values())


def calibrated_only(row: dict) -> bool:
    """Whether the row's LPIPS and CLIP had random weights (the tiny scorer: a smoke run, or the sim
    world without their files), so that only its PSNR part measures anything."""
    scorer = str(row.get("scorer") or "").lower()
    return "tiny" in scorer or "random" in scorer


def _part(row: dict, region: str, key: str) -> float:
    return _num(((row.get("parts") or {}).get(region) or {}).get(key))


def headline_rows(rows: list[dict]) -> list[dict]:
    """The rows as the tables average them: where LPIPS and CLIP had random weights, S_restore,
    S_preserve and S_TC are rebuilt from the calibrated part alone (PSNR_norm; S_TC their mean) and
    the row is marked `scores: "psnr"`; rows with real weights keep the full A.5 scores."""
    out = []
    for r in rows:
        if calibrated_only(r):
            sr, sp = _part(r, "restore", "psnr_norm"), _part(r, "preserve", "psnr_norm")
            r = {**r, "S_restore": sr, "S_preserve": sp, "S_TC": (sr + sp) / 2, "scores": "psnr",
                 "S_restore_a5": r.get("S_restore"), "S_preserve_a5": r.get("S_preserve"), "S_TC_a5": r.get("S_TC")}
        out.append(r)
    return out


PSNR_ONLY = ("**Scores marked † are the PSNR part of the A.5 score only** (PSNR_norm = PSNR / 50 dB; S_TC† "
             "= their mean): this run's LPIPS and CLIP have random weights, so their parts measure nothing and "
             "are left out. With their weight files the tables show the full A.5 score (PSNR, LPIPS, CLIP).")
PSNR_ONLY_NOTE = "†: PSNR part only (LPIPS and CLIP have random weights here; see the top of the report)."


def _score_name(k: str, psnr_only: bool) -> str:
    return f"{k}†" if psnr_only and k in TC_SCORES else k


PARSE_FAILED = ("json_parse_failed", "result_not_a_dict")


def controller_answers(rows: list[dict]) -> tuple[list[dict], str]:
    """Per config: the plans the VLM wrote, how many parsed, and which C.2 / C.3 fallbacks fired
    (counted over plans); and a sentence when no answer parsed at all ("" otherwise)."""
    from collections import Counter
    per: "OrderedDict[str, dict]" = OrderedDict()
    order = list(CONFIG_ORDER) + sorted({r.get("config", "?") for r in rows} - set(CONFIG_ORDER))
    for c in order:
        sub = [r for r in rows if r.get("config") == c]
        if not sub:
            continue
        plans = [t for r in sub for t in (r.get("turns") or []) if (t.get("plan") or {}).get("vlm_called")]
        fired = Counter(f for t in plans for f in (t.get("fallbacks") or []))
        parsed = sum(1 for t in plans if not set(t.get("fallbacks") or []) & set(PARSE_FAILED))
        per[c] = {"config": c, "rows": len(sub), "vlm_calls": sum(int(_num(r.get("vlm_calls")) or 0)
                                                                  if math.isfinite(_num(r.get("vlm_calls"))) else 0
                                                                  for r in sub),
                  "plans": len(plans), "parsed": parsed, "fallbacks": dict(sorted(fired.items()))}
    total = sum(v["plans"] for v in per.values())
    sentence = ""
    if total and not any(v["parsed"] for v in per.values()):
        sentence = (f"**No controller answer parsed** ({total} of {total} plans fell back): by C.2 the raw text "
                    "became the instruction, by C.3 the restoration source is 0 and the anchor t\u22121. Reference "
                    "accuracy here is the C.3 fallback's fixed choice, I_0: it is the share of scenarios whose "
                    "I_ref is I_0, not a measure of the controller.")
    return list(per.values()), sentence


def _answers_markdown(rows: list[dict]) -> list[str]:
    stats, sentence = controller_answers(rows)
    if not any(v["vlm_calls"] or v["plans"] for v in stats):
        return []
    out = ["### Controller answers", "",
           "| Config | VLM calls | Plans the VLM wrote | Parsed | Fallbacks fired (plans) |", "|---|---|---|---|---|"]
    for v in stats:
        fb = ", ".join(f"{k} {n}" for k, n in v["fallbacks"].items()) or "none"
        out.append(f"| {CONFIG_SUFFIX.get(v['config'], v['config']).strip(' +') or 'baseline'} | {v['vlm_calls']} | "
                   f"{v['plans']} | {v['parsed']} | {fb} |")
    out += ["", "C.2 (json_parse_failed, result_not_a_dict, synthesis_instruction_missing) and C.3 (identity_anchor_id_"
            "missing -> t\u22121, restoration_source_id_missing -> 0, restoration_region_empty, image_ids_missing -> "
            "[source, anchor]) are appendix C's fallback rules; VLM calls are counted from the rows."]
    if sentence:
        out += ["", sentence]
    return out + [""]


# ------------------------------------------------------------------------------ grouping

def area_tertiles(rows: list[dict]) -> tuple[dict[str, str], tuple[float, float] | None]:
    """Scenario -> 'Small' | 'Medium' | 'Large' by tertiles of the restoration-area ratio.

    A scenario's ratio is the median of its rows' `restore_area_ratio` (masks come from each
    run's own images, so the configs of one scenario can differ a little; the median keeps a
    scenario's configs in the same bin, as paired comparisons need). Cut points are the 1/3 and
    2/3 quantiles (linear interpolation) of the scenarios' ratios; a ratio equal to a cut point
    goes to the lower bin. Scenarios without a finite ratio get no bin."""
    per: dict[str, list[float]] = {}
    for r in rows:
        v = _num(r.get("restore_area_ratio"))
        if math.isfinite(v):
            per.setdefault(_scenario_key(r), []).append(v)
    med = {k: _median(v) for k, v in per.items()}
    if not med:
        return {}, None
    vals = sorted(med.values())
    q1, q2 = _quantile(vals, 1 / 3), _quantile(vals, 2 / 3)
    bins = {k: (TERTILES[0] if v <= q1 else TERTILES[1] if v <= q2 else TERTILES[2]) for k, v in med.items()}
    return bins, (q1, q2)


def _scenario_key(r: dict) -> str:
    return f"{r.get('dataset')}|{r.get('scenario_id')}"


def _median(v: list[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of sorted values."""
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


@dataclass
class Table:
    """A report table: a title, a header, rows of cells (markdown) and rows of values (CSV)."""
    name: str
    title: str
    header: list[str]
    md_rows: list[list[str]]
    csv_header: list[str]
    csv_rows: list[list[Any]]
    note: str = ""

    def markdown(self) -> str:
        """The table as a markdown section (a title and a pipe table, or a note that no row fits)."""
        lines = [f"### {self.title}", ""]
        if not self.md_rows:
            lines.append("_No rows for this table in these results._")
        else:
            lines.append("| " + " | ".join(self.header) + " |")
            lines.append("|" + "|".join("---" for _ in self.header) + "|")
            lines += ["| " + " | ".join(r) + " |" for r in self.md_rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines) + "\n"

    def write_csv(self, path: Path) -> None:
        """Write the table's raw numbers as CSV (NaN and infinities as empty cells)."""
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(self.csv_header)
            for r in self.csv_rows:
                w.writerow(["" if isinstance(v, float) and not math.isfinite(v) else
                            (round(v, 6) if isinstance(v, float) else v) for v in r])


def _psnr_db(rows: list[dict], region: str) -> Stat:
    return stat(_part(r, region, "psnr_db") for r in rows)


def _db(st: Stat) -> str:
    return f"{st.mean:.1f}" if st.n else "—"


def _score_table(name: str, title: str, rows: list[dict], cols: list[tuple[str, str]], main: bool,
                 note: str) -> Table:
    psnr_only = any(r.get("scores") == "psnr" for r in rows)
    header = (["Editor"] + [_score_name(k, psnr_only) for k in SCORES]
              + ["PSNR_restore (dB)", "PSNR_preserve (dB)", "VLM calls", "N", "NaN left out"])
    md, csv_rows = [], []
    for e, c in cols:
        sub = [r for r in rows if r.get("editor") == e and r.get("config") == c]
        # S_TC is the mean of S_restore and S_preserve per row: a row that lacks any of the three
        # leaves all three columns, so the table's S_TC stays the mean of its own parts.
        complete = [r for r in sub if all(math.isfinite(_num(r.get(k))) for k in TC_SCORES)]
        stats = {k: Stat(stat(r.get(k) for r in complete).mean, len(complete), len(sub) - len(complete))
                 for k in TC_SCORES}
        # S_IF exists only where the judge ran; elsewhere it is "not measured", not NaN.
        stats["S_IF"] = stat(r.get("S_IF") for r in sub if r.get("judge", True))
        dropped = len(sub) - len(complete)
        notes = [f"{'/'.join(TC_SCORES)}: {dropped} row{'s' if dropped != 1 else ''}"] if dropped else []
        notes += [f"S_IF: {stats['S_IF'].nan}"] if stats["S_IF"].nan else []
        nan_note = ", ".join(notes) or "0"
        label = column_label(e, c, main)
        pr, pp = _psnr_db(complete, "restore"), _psnr_db(complete, "preserve")
        calls = sum(int(_num(r.get("vlm_calls"))) for r in sub if math.isfinite(_num(r.get("vlm_calls"))))
        md.append([label] + [stats[k].cell() for k in SCORES] + [_db(pr), _db(pp), str(calls), str(len(sub)),
                                                                 nan_note])
        csv_rows.append([label, e, c] + [x for k in SCORES for x in (stats[k].mean, stats[k].n, stats[k].nan)]
                        + [len(sub), pr.mean, pp.mean, calls, "psnr" if psnr_only else "a5"])
    csv_header = (["editor_label", "editor", "config"] + [f"{k}{s}" for k in SCORES for s in ("", "_n", "_nan")]
                  + ["rows", "psnr_restore_db", "psnr_preserve_db", "vlm_calls", "scores"])
    if psnr_only:
        note = f"{note} {PSNR_ONLY_NOTE}".strip()
    return Table(name, title, header, md, csv_header, csv_rows, note)


def _grouped_table(name: str, title: str, rows: list[dict], cols: list[tuple[str, str]],
                   groups: list[tuple[str, Callable[[dict], bool]]], metric: str, note: str,
                   gains: bool = False, psnr: bool = False) -> Table:
    labels = [column_label(e, c) for e, c in cols]
    gain_pairs = []
    if gains:
        for e in OrderedDict.fromkeys(e for e, _ in cols):
            if (e, "baseline") in cols and (e, "respec") in cols:
                gain_pairs.append(e)
    header = ["Group"] + labels + [f"Gain {editor_label(e)}" for e in gain_pairs]
    md, csv_rows = [], []
    nan_total = 0
    for gname, pred in groups:
        in_group = [r for r in rows if pred(r)]
        if not in_group:
            continue
        stats = [stat(r.get(metric) for r in in_group if r.get("editor") == e and r.get("config") == c)
                 for e, c in cols]
        dbs = [(_psnr_db([r for r in in_group if r.get("editor") == e and r.get("config") == c], "restore"),
                _psnr_db([r for r in in_group if r.get("editor") == e and r.get("config") == c], "preserve"))
               for e, c in cols] if psnr else []
        nan_total += sum(s.nan for s in stats)
        gain_vals = []
        for e in gain_pairs:
            b = stats[cols.index((e, "baseline"))]
            p = stats[cols.index((e, "respec"))]
            gain_vals.append(p.mean - b.mean if b.n and p.n else math.nan)
        cells = [s.cell(with_n=True) for s in stats]
        if psnr:
            cells = [f"{c} · {_db(a)} / {_db(b)} dB" if a.n or b.n else c for c, (a, b) in zip(cells, dbs)]
        md.append([gname] + cells + [(f"{g:+.3f}" if math.isfinite(g) else "—") for g in gain_vals])
        csv_rows.append([gname] + [x for s in stats for x in (s.mean, s.n, s.nan)] + gain_vals
                        + [x for a, b in dbs for x in (a.mean, b.mean)])
    csv_header = ["group"] + [f"{lab}{s}" for lab in labels for s in ("", " n", " nan")] + \
                 [f"gain {editor_label(e)}" for e in gain_pairs] + \
                 ([f"{lab} psnr_{k}_db" for lab in labels for k in ("restore", "preserve")] if psnr else [])
    psnr_only = any(r.get("scores") == "psnr" for r in rows)
    shown = _score_name(metric, psnr_only)
    full_note = note + f" Cells: mean {shown} (values used)" + (
        "; then the mean restoration / preservation PSNR in dB" if psnr else "") + f". NaN values left out: {nan_total}."
    if psnr_only and metric in TC_SCORES:
        full_note += " " + PSNR_ONLY_NOTE
    return Table(name, title, header, md, csv_header, csv_rows, full_note.strip())


def build_tables(all_rows: list[dict]) -> list[Table]:
    """Every table of the report from results rows (status ok, one per key; scores as headline_rows
    gives them)."""
    everything = headline_rows(ok_rows(all_rows))
    rows = paper_rows(everything)      # the beyond-the-paper group has its own table (beyond_table)
    cols = _columns(rows)
    tables = [
        _score_table("table1_main", "Table 1: main results (without vs with ReSpec)", rows,
                     _columns(rows, MAIN_CONFIGS), True,
                     "S_TC = (S_restore + S_preserve) / 2; S_IF (instruction faithfulness, 0-1) is auxiliary "
                     "and not part of S_TC; it is empty when the judge was off."),
        _score_table("table2_ablation", "Table 2: ablation of PTI and HRS", rows, cols, False,
                     "PTI: Preservation Target Identification (rewritten instruction). HRS: Historical Reference "
                     "Selection (the past image goes to the editor)."),
    ]
    types = [(label, (lambda r, t=t: r.get("revelation_type") == t)) for t, label in REVELATION_LABELS.items()]
    extra = sorted({r.get("revelation_type") for r in rows} - set(REVELATION_LABELS) - {None})
    types += [(t, (lambda r, t=t: r.get("revelation_type") == t)) for t in extra]
    tables.append(_grouped_table("table4_revelation_type", "Table 4: temporal consistency by revelation type",
                                 rows, cols, types, "S_TC", "", psnr=True))
    dists = sorted({int(_num(r.get("reference_distance"))) for r in rows
                    if math.isfinite(_num(r.get("reference_distance")))})
    tables.append(_grouped_table("table5_reference_distance", "Table 5: temporal consistency by reference distance",
                                 rows, cols,
                                 [(f"\u0394 = {d}", (lambda r, d=d: _num(r.get("reference_distance")) == d)) for d in dists],
                                 "S_TC", "\u0394 = turns between the ground-truth reference I_ref and the revelation turn.",
                                 psnr=True))
    bins, cuts = area_tertiles(rows)
    unbinned = sum(1 for r in rows if _scenario_key(r) not in bins)
    cut_note = (f"Area bins are tertiles of the restoration-area ratio (|R_restore| / image area) over scenarios; "
                f"cut points {cuts[0]:.4f} and {cuts[1]:.4f}." if cuts else "No restoration areas in these results.")
    if unbinned:
        cut_note += f" Rows without a restoration area (left out): {unbinned}."
    tables.append(_grouped_table("table6_area_tertile", "Table 6: temporal consistency by restoration area size",
                                 rows, cols,
                                 [(b, (lambda r, b=b: bins.get(_scenario_key(r)) == b)) for b in TERTILES],
                                 "S_TC", cut_note, gains=True, psnr=True))
    tables.append(_reference_table(rows))
    tables.append(_right_wrong_table(rows, cols))
    tables.append(_turns_table(rows, cols))
    tables.append(drift_table(rows))
    if len(rows) < len(everything):
        tables.append(beyond_table(everything))
    return tables


def paper_rows(rows: list[dict]) -> list[dict]:
    """The rows the paper's tables (and the drift table, figure 7) are built from: every config but
    the "beyond" group (configs.CONFIG_GROUPS), which the main job adds and beyond_table reports."""
    return [r for r in rows if r.get("config") not in BEYOND_CONFIGS]


def beyond_table(rows: list[dict]) -> Table:
    """Beyond the paper: the conversational configs (provenance selector + Reveal + Drift Guard, and
    history first) beside ReSpec, per editor: reference accuracy, VLM calls, edits skipped (turns
    history answered, the editor not run), S_restore and the untouched pixels' PSNR."""
    configs = ("respec",) + BEYOND_CONFIGS
    header = ["Editor", "Config", "Ref. Acc.", "VLM calls (per scenario)", "edits skipped", "S_restore",
              "untouched PSNR (median dB)", "N"]
    md, csv_rows = [], []
    for e, c in _columns(rows, configs):
        sub = [r for r in rows if (r.get("editor", "?"), r.get("config")) == (e, c)]
        acc = reference_accuracy(r.get("reference_correct") for r in sub)
        calls = stat(r.get("vlm_calls") for r in sub)
        skipped = sum(int(r.get("edits_skipped") or 0) for r in sub)
        turns = sum(len(r.get("turns") or []) for r in sub)
        restore = stat(r.get("S_restore") for r in sub)
        vals = sorted(_num(r.get("untouched_psnr")) for r in sub if math.isfinite(_num(r.get("untouched_psnr"))))
        med = _median(vals) if vals else float("nan")
        md.append([editor_label(e), c, f"{100 * acc['accuracy']:.1f}%" if acc["n"] else "–", calls.cell(2),
                   f"{skipped} of {turns} turns", restore.cell(), f"{med:.2f} (n={len(vals)})" if vals else "–",
                   str(len(sub))])
        csv_rows.append([e, c, acc["accuracy"], calls.mean, skipped, turns, restore.mean, med, len(sub)])
    return Table("table_beyond", "Beyond the paper: the conversational configs beside ReSpec", header, md,
                 ["editor", "config", "reference_accuracy", "vlm_calls_mean", "edits_skipped", "turns",
                  "S_restore", "untouched_psnr_median", "N"], csv_rows,
                 "respec-prov+reveal+guard: the provenance selector (0 VLM calls) with Reveal Composite and the "
                 "Drift Guard (the conversational_provenance graph). respec-prov+undo+reveal+guard: the same with "
                 "history first: a request that takes back what an earlier turn added is answered from the "
                 "history (I_{t-1} with C_k's region from I_{k-1}) and the editor is not run (edits skipped). "
                 "untouched PSNR: the final image against I_0 where no turn's ground-truth edit touched (sim only).")


def drift_table(rows: list[dict]) -> Table:
    """The drift table (Drift Guard, docs/drift-guard.md): per editor, sim defect level and config,
    the median untouched PSNR after the last turn, S_preserve, S_restore, the edit's fidelity
    (the guard's output against the editor's on each turn's ground-truth edit region: the median
    over turns and the worst turn) and how often the guard stepped aside."""
    groups = list(OrderedDict.fromkeys((r.get("editor", "?"), r.get("sim_defects") or "-", r.get("config", "?"))
                                       for r in rows if r.get("untouched_psnr") is not None or r.get("sim_defects")))
    header = ["Editor", "Defects", "Config", "untouched PSNR (median dB)", "S_preserve", "S_restore",
              "edit region PSNR, guard vs editor (median / worst turn, dB)", "guard stepped aside", "N"]
    md, csv_rows = [], []
    for e, d, c in groups:
        sub = [r for r in rows if (r.get("editor", "?"), r.get("sim_defects") or "-", r.get("config", "?")) == (e, d, c)]
        vals = sorted(_num(r.get("untouched_psnr")) for r in sub if math.isfinite(_num(r.get("untouched_psnr"))))
        med = _median(vals) if vals else float("nan")
        st = {k: stat(r.get(k) for r in sub) for k in ("S_preserve", "S_restore")}
        steps = [p for r in sub for t in (r.get("turns") or []) for p in (t.get("post_edit") or [])]
        guard = [p for p in steps if p.get("step") == "drift_guard"]
        aside = sum(1 for p in guard if p.get("stepped_aside"))
        fid = sorted(_num(p.get("edit_region_psnr")) for p in steps if p.get("step") == "sim_edit_fidelity"
                     and math.isfinite(_num(p.get("edit_region_psnr"))))
        fid_med, fid_min = (_median(fid), fid[0]) if fid else (float("nan"), float("nan"))
        md.append([editor_label(e), d, c, f"{med:.2f} (n={len(vals)})" if vals else "–",
                   st["S_preserve"].cell(), st["S_restore"].cell(),
                   f"{fid_med:.1f} / {fid_min:.1f} (n={len(fid)})" if fid else "–",
                   f"{aside}/{len(guard)} turns" if guard else "–", str(len(sub))])
        csv_rows.append([e, d, c, med, len(vals), st["S_preserve"].mean, st["S_restore"].mean, fid_med, fid_min,
                         len(fid), aside, len(guard), len(sub)])
    return Table("table_drift", "Drift: untouched pixels after the last turn (Drift Guard)", header, md,
                 ["editor", "sim_defects", "config", "untouched_psnr_median", "untouched_n", "S_preserve",
                  "S_restore", "edit_region_psnr_median", "edit_region_psnr_min", "edit_region_turns",
                  "guard_stepped_aside", "guard_turns", "N"], csv_rows,
                 "untouched PSNR: the final image against I_0 on the pixels no turn's ground-truth edit touched "
                 "(sim only; scenarios with a style turn have none). Edit region PSNR: on each turn the guard "
                 "changed, its output against the editor's own output on that turn's ground-truth edit region "
                 "(sim only; the edit kept as the editor made it scores high). Defects: --sim-defects.")


def _right_wrong_table(rows: list[dict], cols: list[tuple[str, str]]) -> Table:
    """S_restore of every config on the scenarios where the controller's reference (in the + HRS row,
    else the ReSpec row, of the same editor) was right, and where it was wrong: a paired view of
    what a right reference is worth."""
    right: dict[tuple, bool] = {}
    for config in ("respec", "hrs"):            # + HRS decides when both ran
        for r in rows:
            if r.get("config") == config and r.get("reference_correct") is not None:
                right[(_scenario_key(r), r.get("editor"))] = bool(r["reference_correct"])
    groups = [(label, (lambda r, want=want: right.get((_scenario_key(r), r.get("editor"))) is want))
              for label, want in (("reference right", True), ("reference wrong", False))]
    return _grouped_table("table7b_reference_right_wrong",
                          "Table 7b: restoration consistency when the chosen reference was right or wrong",
                          rows, cols, groups, "S_restore",
                          "Scenarios grouped by whether the + HRS row's restoration_source_id (else the ReSpec "
                          "row's) equals the ground-truth reference; every config's S_restore on the same scenarios.")


def _reference_table(rows: list[dict]) -> Table:
    """Table 7: how often plan.restoration_source_id equals the ground-truth I_ref, for the configs
    whose editor receives that reference (+ HRS); how many of those references were C.3's fallback."""
    judged = [r for r in rows if r.get("reference_correct") is not None and _gets_reference(r)]
    groups = list(OrderedDict.fromkeys((r.get("controller", "?"), r.get("editor"), r.get("config")) for r in judged))
    psnr_only = any(r.get("scores") == "psnr" for r in rows)
    header = (["Analyzer", "Editor", "Ref. Acc.", "C.3 fallback"] + [_score_name(k, psnr_only) for k in TC_SCORES]
              + ["PSNR_restore (dB)", "PSNR_preserve (dB)", "N"])
    md, csv_rows = [], []
    for ctrl, e, c in groups:
        sub = [r for r in judged if (r.get("controller", "?"), r.get("editor"), r.get("config")) == (ctrl, e, c)]
        acc = reference_accuracy(r.get("reference_correct") for r in sub)["accuracy"]
        st = {k: stat(r.get(k) for r in sub) for k in TC_SCORES}
        fell = sum(1 for r in sub if "restoration_source_id_missing" in _restoration_fallbacks(r))
        pr, pp = _psnr_db(sub, "restore"), _psnr_db(sub, "preserve")
        md.append([ctrl, column_label(e, c), f"{100 * acc:.1f}%", f"{fell} of {len(sub)}"]
                  + [st[k].cell() for k in st] + [_db(pr), _db(pp), str(len(sub))])
        csv_rows.append([ctrl, e, c, acc, fell] + [st[k].mean for k in st] + [pr.mean, pp.mean, len(sub)])
    note = ("Ref. Acc.: fraction of scenarios whose restoration-turn plan named the ground-truth reference "
            "(restoration_source_id == reference_turn), for the configs whose editor receives that reference "
            "(+ HRS); the baseline and + PTI alone never give it to the editor and have no entry. C.3 fallback: "
            "plans whose restoration_source_id was missing, so C.3 set it to 0 (I_0); where that is every plan, "
            "Ref. Acc. is the share of scenarios whose I_ref is I_0.")
    if psnr_only:
        note += " " + PSNR_ONLY_NOTE
    return Table("table7_reference_accuracy", "Table 7: historical reference selection quality", header, md,
                 ["controller", "editor", "config", "reference_accuracy", "c3_source_fallback", "S_restore",
                  "S_preserve", "S_TC", "psnr_restore_db", "psnr_preserve_db", "N"],
                 csv_rows, note)


def _gets_reference(row: dict) -> bool:
    """Whether the row's config gives the editor the chosen historical reference (HRS)."""
    from .configs import CONFIGS
    if row.get("use_hrs") is not None:
        return bool(row["use_hrs"])
    cfg = CONFIGS.get(str(row.get("config")))
    return bool(cfg and cfg.switches.use_hrs)


def _restoration_fallbacks(row: dict) -> list[str]:
    turn = _num(row.get("restoration_turn"))
    for t in row.get("turns") or []:
        if math.isfinite(turn) and t.get("t") == int(turn):
            return list(t.get("fallbacks") or [])
    return []


def _turns_table(rows: list[dict], cols: list[tuple[str, str]]) -> Table:
    turns = sorted({int(_num(r.get("num_turns"))) for r in rows if math.isfinite(_num(r.get("num_turns")))})
    return _grouped_table("figure7_turns", "Figure 7 (data): restoration consistency by number of turns",
                          rows, cols, [(f"{n} turns", (lambda r, n=n: _num(r.get("num_turns")) == n)) for n in turns],
                          "S_restore", "The plot is figure7_turns.png.")


MATPLOTLIB_HELP = "matplotlib is not installed (it is optional); `pip install matplotlib` to get the PNG."


def plot_turns(rows: list[dict], path: Path) -> Path:
    """Figure 7: S_restore against the number of turns, one line per editor x config (PNG).
    Needs matplotlib (optional); ImportError says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(MATPLOTLIB_HELP) from None
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    rows = headline_rows(ok_rows(rows))
    turns = sorted({int(_num(r.get("num_turns"))) for r in rows if math.isfinite(_num(r.get("num_turns")))})
    series = []
    for e, c in _columns(rows):
        xs, ys = [], []
        for n in turns:
            s = stat(r.get("S_restore") for r in rows
                     if r.get("editor") == e and r.get("config") == c and _num(r.get("num_turns")) == n)
            if s.n:
                xs.append(n)
                ys.append(s.mean)
        if xs:
            series.append((column_label(e, c), xs, ys))   # the tables' names (table 2's)
    outside = len(series) > 4
    fig = Figure(figsize=(8.2 if outside else 5.5, 3.8), dpi=120)
    ax = fig.add_subplot(1, 1, 1)
    markers, styles = "osD^vP*Xh<>", ("-", "--", ":", "-.")
    for i, (label, xs, ys) in enumerate(series):
        # A series equal to an earlier one (to 3 decimals, as the tables print) is drawn over it with
        # another marker and dash and says which it equals, so no line hides behind another unsaid.
        same = next((lab for lab, x2, y2 in series[:i] if x2 == xs and [round(v, 3) for v in y2] ==
                     [round(v, 3) for v in ys]), None)
        ax.plot(xs, ys, marker=markers[i % len(markers)], linestyle=styles[i % len(styles)],
                markersize=7 - 1.2 * min(i, 3), linewidth=1.6, alpha=0.9,
                label=label + (f"  (= {same})" if same else ""))
    psnr_only = any(r.get("scores") == "psnr" for r in rows)
    ax.set_xlabel("Number of turns")
    ax.set_ylabel("S_restore† (PSNR part only)" if psnr_only else "S_restore")
    ax.set_title(f"Restoration consistency by trajectory length\n{run_kind(rows)}", fontsize=10)
    # Scores lie in [0, 1]: the whole range, so that differences of a few thousandths stay flat.
    ax.set_ylim(0.0, 1.0)
    if turns:
        ax.set_xticks(turns)
    ax.grid(True, alpha=0.3)
    if ax.lines:
        if outside:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        else:
            ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no finite S_restore values", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(str(path))
    return path


def run_kind(rows: list[dict]) -> str:
    """'sim run', 'smoke run (tiny random models)', 'real run', or a mix of them, from the rows."""
    kinds = []
    for r in rows:
        k = ("smoke run (tiny random models)" if r.get("smoke") else "sim run (simulated editor)"
             if r.get("editor") == "sim" else "real run")
        if k not in kinds:
            kinds.append(k)
    return " + ".join(kinds) or "no rows"


SCENARIO_COLUMNS = ["scenario_id", "dataset", "template", "stages", "num_turns", "revelation_type",
                    "reference_distance", "editor", "config", "controller", "S_restore", "S_preserve", "S_TC",
                    "S_IF", "restore_area_ratio", "preserve_area_ratio", "nan_reason", "reference_turn",
                    "reference_chosen", "reference_correct", "editor_reference_ids", "fallbacks", "vlm_calls",
                    "judge_calls"]


def _flatten(prefix: str, d: Any, out: dict) -> None:
    if isinstance(d, dict):
        for k, v in d.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(d, (list, tuple)):
        out[prefix] = ";".join(str(x) for x in d)
    else:
        out[prefix] = d


def scenario_rows(rows: list[dict]) -> tuple[list[str], list[list[Any]]]:
    """Per-scenario CSV: the fixed columns, then every score part and per-stage second found."""
    rows = ok_rows(rows)
    flat = []
    extra: list[str] = []
    for r in rows:
        f: dict = {}
        for k in SCENARIO_COLUMNS:
            v = r.get(k)
            f[k] = ";".join(str(x) for x in v) if isinstance(v, (list, tuple)) else v
        _flatten("parts", r.get("parts") or {}, f)
        _flatten("whole", r.get("whole") or {}, f)
        _flatten("seconds", r.get("seconds") or {}, f)
        for k in f:
            if k not in SCENARIO_COLUMNS and k not in extra:
                extra.append(k)
        flat.append(f)
    header = SCENARIO_COLUMNS + extra
    return header, [[f.get(k) for k in header] for f in flat]


def run_conditions(rows: list[dict]) -> list[str]:
    """What the numbers rest on: which editor, which masks, which scorer, which controller chose the
    references and what the reference accuracy is measured against (markdown lines)."""
    def values(key: str) -> str:
        vals = sorted({str(r.get(key)) for r in rows if r.get(key)})
        return ", ".join(f"`{v}`" for v in vals) or "not recorded"
    out = []
    if any(r.get("editor") == "sim" for r in rows):
        out += ["> **Simulated editor** (`--editor sim`, docs/sim.md): a test instrument with exact ground truth. "
                "Its defects are set by hand (colour drift, blur, noise, re-invention of revealed pixels, "
                "copying from references with fidelity < 1); it reads no instruction text, so + PTI equals "
                "the config without it. The numbers measure the pipeline around the editor, not any real "
                "editor's quality.", ""]
    out += [f"- Masks (A.5 regions): {values('masks_source')}",
            f"- Scorer: {values('scorer')}",
            f"- References chosen by (controller): {values('controller')}",
            f"- Reference accuracy measured against: {values('reference_truth')}", ""]
    return out


def write_report(results: str | Path | list[dict], out_dir: str | Path) -> dict:
    """Write report.md, the CSVs and figure 7 for a results file (or rows); return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(results, (str, Path)):
        rf = ResultsFile(results)
        rows = rf.rows()
        source, skipped = str(results), rf.skipped_lines
    else:
        rows, source, skipped = list(results), "(rows given in memory)", 0
    good = ok_rows(rows)
    tables = build_tables(rows)
    paths: dict[str, str] = {}
    for t in tables:
        p = out / f"{t.name}.csv"
        t.write_csv(p)
        paths[t.name] = str(p)
    header, srows = scenario_rows(rows)
    sp = out / "scenarios.csv"
    with open(sp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in srows:
            w.writerow(["" if v is None or (isinstance(v, float) and not math.isfinite(v)) else v for v in r])
    paths["scenarios"] = str(sp)
    try:
        paths["figure7"] = str(plot_turns(paper_rows(rows), out / "figure7_turns.png"))
        figure = ["![Figure 7: S_restore by number of turns](figure7_turns.png)", ""]
    except ImportError:
        # matplotlib is optional: the figure's data is in figure7_turns.csv either way.
        figure = [f"> Figure 7 was not drawn: {MATPLOTLIB_HELP} Its data is in `figure7_turns.csv`.", ""]
        log.warning("figure 7 not drawn: %s", MATPLOTLIB_HELP)

    scenarios = {_scenario_key(r) for r in good}
    md = ["# OCCUR-Bench report", "",
          f"Results: `{source}` — {len(good)} rows ({len(scenarios)} scenarios"
          + (f"; {skipped} unreadable line(s) skipped" if skipped else "") + ").", ""]
    smoke = sorted({bool(r.get("smoke")) for r in good})
    if True in smoke:
        md += ["> **Smoke run**: tiny random-weight models. The numbers check the pipeline, they mean nothing "
               "about image quality.", ""]
    md += run_conditions(good)
    if any(calibrated_only(r) for r in good):
        md += ["> " + PSNR_ONLY, ""]
    md += _answers_markdown(good)
    md += [t.markdown() for t in tables]
    md += figure + [
           "### Per-scenario rows", "", f"See `scenarios.csv` ({len(srows)} rows: scores, their parts, S_IF, "
           "reference chosen vs ground truth, VLM calls, per-stage seconds).", ""]
    rp = out / "report.md"
    rp.write_text("\n".join(md), encoding="utf-8")
    paths["report"] = str(rp)
    return paths


# --------------------------------------------------------------------------- robustness (beyond the paper)

def _reveal_entry(row: dict) -> dict | None:
    """The Reveal Composite record of a row's restoration turn (None: it did not run)."""
    for t in row.get("turns") or []:
        if t.get("is_restoration"):
            for e in t.get("post_edit") or []:
                if e.get("step") == "reveal_composite":
                    return e
    return None


def robustness_table(runs: dict, base_config: str = "respec-prov", reveal_config: str = "respec-prov+reveal",
                     tolerance: float = 0.01) -> Table:
    """Reveal Composite under the simulated editor's real-editor defects (respec.sim.SimDefects:
    zoom, shift, local warp, re-render field, pose change): one row per run, `runs` = {label:
    rows of a run with `base_config` and `reveal_config`}. Columns: how many restoration turns the
    reveal applied / refused, S_restore without and with the reveal, and the bad pastes (applied,
    and S_restore with the reveal more than `tolerance` below the same scenario's without it)."""
    header = ["Defect / level", "N", "reveal applied", "refused", f"S_restore {base_config}",
              f"S_restore {reveal_config}", "bad pastes"]
    md, csv_rows = [], []
    for label, rows in runs.items():
        base = {_scenario_key(r): _num(r.get("S_restore")) for r in rows if r.get("config") == base_config}
        rev = [r for r in rows if r.get("config") == reveal_config]
        applied = refused = bad = 0
        for r in rev:
            e = _reveal_entry(r)
            if e is None:
                continue
            if e.get("applied"):
                applied += 1
                b, s = base.get(_scenario_key(r), math.nan), _num(r.get("S_restore"))
                if math.isfinite(b) and math.isfinite(s) and s < b - tolerance:
                    bad += 1
            else:
                refused += 1
        sb, sr = stat(base.values()), stat(r.get("S_restore") for r in rev)
        md.append([label, str(len(rev)), str(applied), str(refused), sb.cell(), sr.cell(), str(bad)])
        csv_rows.append([label, len(rev), applied, refused, sb.mean, sr.mean, bad])
    return Table("robustness_sim_defects", "Robustness: Reveal Composite under real-editor defects (sim)",
                 header, md, ["defect", "n", "applied", "refused", "S_restore_base", "S_restore_reveal", "bad_pastes"],
                 csv_rows, f"A bad paste: applied, and S_restore more than {tolerance} below the same scenario "
                           f"without the reveal ({base_config}).")
