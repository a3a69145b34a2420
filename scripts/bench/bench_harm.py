#!/usr/bin/env python
"""The harm benchmark (issue 43, step 3): every real pair and chain of ../shared/realdata replayed
through the chat graphs' conversational steps, a contact sheet per turn (not a test).

    python scripts/bench/bench_harm.py --realdata ../shared/realdata --out /tmp/harm
        [--history-first off] [--before /tmp/harm_before/turns.csv] [--limit 5] [--only gemini]

Reads the folder it is given (never copies from it) and writes only under --out (outside the
repository: the sheets show the real pictures). Every conversation is replayed as
scripts/bench/chat_replay.py replays it (bench_undo_chains.py's replay): per turn the provenance
planner, the undo from history (history first, on by default as in the chat graphs), Reveal
Composite and the Drift Guard, the editor's recorded output scaled to I_{t-1}'s size.

The conversations: the chains of chains/index.json (FLUX.1 Kontext, Gemini 2.0 Flash, MTC, Nano
Banana), the MC-Edit sequences of pairs/index.json (one conversation per scene and method, the
target captions as requests), the other pairs there (Step1X-Edit, OmniEraser: one turn each) and
pairs/index_more.json's steps (Qwen-Image-Edit, FLUX.2 [klein], LongCat; steps that share a
"chain" are one conversation).

Written under --out:
  sheets/<name>_t<k>.png   previous | editor | kept | |kept - editor| ×4, labelled, each panel at
                           most 640 px (a person can inspect it); kept/<name>_t<k>.png full size
  turns.csv                a row per turn (docs/harm.md says what the columns mean)
  flags.csv                every turn where a verification check made a step step aside
  summary.md               counts per editor, the undo figure per ConvergeBench removal turn, a
                           line per flagged turn pointing at its sheet
With --before, an earlier run's turns.csv: of the ConvergeBench turns where the pack changed the
editor's picture then, how many it still changes (the issue's bar is 90 %).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_replay import ReplayedTurn, psnr, replay  # noqa: E402
from respec.errors import InputError  # noqa: E402
from respec.pixels.undo import REPEAT_METHOD  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEPS = {"history_undo": "undo", "reveal_composite": "reveal", "drift_guard": "guard"}
REMOVALS = (2, 4, 6)          # ConvergeBench: after these turns the right picture is I_0
TARGET_DB = 60.0
CHANGED_LEVEL = 16            # a pixel differs when its largest channel differs by more (0-255)
PANEL_PX = 640                # a sheet's panel's longest side
COLUMNS = ("editor", "sequence", "kind", "turn", "instruction", "changed_by", "changed_share",
           "undo", "undo_reason", "reveal", "reveal_reason", "guard", "guard_reason", "failed_checks",
           "mended", "editor_called", "editor_db", "kept_db", "sheet", "seconds")
FLAG_COLUMNS = ("editor", "sequence", "turn", "step", "check", "detail", "sheet")


@dataclass(frozen=True)
class Conversation:
    """One replayed conversation: its editor's label, a unique name, "chain" or "pair", I_0's file,
    the editor's outputs I_1..I_n and their requests; convergebench: I_0 is the answer after
    every removal (turns 2, 4, 6)."""

    editor: str
    name: str
    kind: str
    source: Path
    outputs: tuple[Path, ...]
    instructions: tuple[str, ...]
    convergebench: bool = False


# --------------------------------------------------------------------------- the conversations

def _read_index(path: Path) -> dict:
    if not path.is_file():
        raise InputError(f"{path} is missing: --realdata must be the realdata folder that holds chains/index.json, "
                         f"pairs/index.json and pairs/index_more.json (e.g. ../shared/realdata)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON ({e}); restore it from the shared realdata folder") from e


def chain_editor(chain_id: str) -> str:
    """The editor's label of a chains/index.json chain."""
    for key, label in (("kontext", "Kontext"), ("gemini", "Gemini"), ("mtc_", "MTC"), ("nano_banana", "Nano Banana")):
        if key in chain_id:
            return label
    return "other"


def _chains(folder: Path) -> list[Conversation]:
    out = []
    for c in _read_index(folder / "index.json")["chains"]:
        turns = c["turns"]
        out.append(Conversation(chain_editor(c["chain_id"]), c["chain_id"], "chain", folder / turns[0]["file"],
                                tuple(folder / t["file"] for t in turns[1:]),
                                tuple(t["instruction"] for t in turns[1:]),
                                c["chain_id"].startswith("convergebench_")))
    return out


def _pairs(folder: Path) -> list[Conversation]:
    out = []
    for it in _read_index(folder / "index.json")["items"]:
        if it.get("kind") == "multi_turn_sequence":       # MC-Edit: a conversation per method
            captions = tuple(t["target_caption"] for t in it["turns"])
            for method, files in it["methods"].items():
                files = sorted(files, key=lambda f: f["turn"])
                out.append(Conversation(f"MC-Edit {method}", f"{it['id']}_{method}", "pair",
                                        folder / it["source_image"]["path"], tuple(folder / f["path"] for f in files),
                                        captions[:len(files)]))
        elif "input" in it and "output" in it:
            out.append(Conversation(it["source"], it["id"], "pair", folder / it["input"]["path"],
                                    (folder / it["output"]["path"],), (it["instruction"],)))
    chains: dict[str, list[dict]] = defaultdict(list)
    for p in _read_index(folder / "index_more.json")["pairs"]:
        chains[p.get("chain") or p["id"]].append(p)
    for name, steps in chains.items():
        steps = sorted(steps, key=lambda p: p.get("turn") or 1)
        d = folder / steps[0]["folder"]
        out.append(Conversation(steps[0]["folder"], name, "pair", d / steps[0]["files"][0],
                                tuple(d / p["files"][1] for p in steps), tuple(p["instruction"] for p in steps)))
    return out


def conversations(realdata: Path) -> list[Conversation]:
    """Every conversation of the realdata folder: chains first, then pairs (see the docstring)."""
    if not realdata.is_dir():
        raise InputError(f"--realdata {realdata} is not a folder: give the realdata folder (e.g. ../shared/realdata)")
    convs = _chains(realdata / "chains") + _pairs(realdata / "pairs")
    names = Counter(c.name for c in convs)
    dup = [n for n, k in names.items() if k > 1]
    if dup:
        raise InputError(f"the realdata indexes name these conversations twice: {dup}; fix the index files")
    missing = [str(p) for c in convs for p in (c.source, *c.outputs) if not p.is_file()]
    if missing:
        raise InputError(f"{len(missing)} image files the indexes list are missing (first: {missing[0]}); "
                         "--realdata must be the complete realdata folder")
    return convs


# --------------------------------------------------------------------------- one turn's row

def verification(entry: dict) -> dict | None:
    """A step's verification record ({"passed", "mended", "failed": [{"check", "detail"}]}), None
    when the step recorded none (the checks are not on this branch, or the step did not run)."""
    v = entry.get("verify")
    if v is None and isinstance(entry.get("checks"), dict):
        v = entry["checks"].get("verify")
    return v if isinstance(v, dict) else None


def step_reads(post_edit: list[dict]) -> dict:
    """Per step (undo, reveal, guard): "applied", "aside" or "-" (not run), its reason, its
    verification record."""
    reads = {s: {"status": "-", "reason": "", "verify": None} for s in STEPS.values()}
    for e in post_edit:
        step = STEPS.get(e.get("step"))
        if step is None:
            continue
        reads[step] = {"status": "applied" if e.get("applied") else "aside", "reason": str(e.get("reason", "")),
                       "verify": verification(e), "method": e.get("method", "")}
    return reads


def changed_by(reads: dict) -> str:
    """Which step changed the editor's picture: undo, repeat (history first's answer to a request
    repeated on the same picture), reveal, guard, reveal+guard or none."""
    if reads["undo"]["status"] == "applied":
        return "repeat" if reads["undo"].get("method") == REPEAT_METHOD else "undo"
    done = [s for s in ("reveal", "guard") if reads[s]["status"] == "applied"]
    return "+".join(done) or "none"


def turn_row(conv: Conversation, rt: ReplayedTurn, i0: np.ndarray, sheet: str) -> tuple[dict, list[dict]]:
    """The turn's CSV row and its flags (a step that stepped aside because its verification failed)."""
    reads = step_reads(rt.record.post_edit)
    kept, ed = rt.kept, rt.editor_image
    share = float((np.abs(kept.astype(np.int16) - ed.astype(np.int16)).max(axis=2) > CHANGED_LEVEL).mean()) \
        if kept.shape == ed.shape else 1.0
    removal = conv.convergebench and rt.t in REMOVALS
    failed, mended, flags = [], [], []
    for step, r in reads.items():
        v = r["verify"]
        if v is None:
            continue
        if v.get("mended"):
            mended.append(step)
        for f in v.get("failed") or []:
            failed.append(f"{step}:{f.get('check')}")
            if not v.get("passed", True) and r["status"] == "aside":
                flags.append({"editor": conv.editor, "sequence": conv.name, "turn": rt.t, "step": step,
                              "check": f.get("check"), "detail": f.get("detail", ""), "sheet": sheet})
    row = {"editor": conv.editor, "sequence": conv.name, "kind": conv.kind, "turn": rt.t,
           "instruction": rt.request, "changed_by": changed_by(reads), "changed_share": f"{share:.4f}",
           **{k: v for s, r in reads.items() for k, v in ((s, r["status"]), (f"{s}_reason", r["reason"]))},
           "failed_checks": ";".join(failed), "mended": ";".join(mended), "editor_called": int(rt.editor_called),
           "editor_db": f"{psnr(ed, i0):.2f}" if removal else "", "kept_db": f"{psnr(kept, i0):.2f}" if removal else "",
           "sheet": sheet, "seconds": f"{rt.seconds:.2f}"}
    return row, flags


# --------------------------------------------------------------------------- the contact sheet

def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:               # Pillow < 10.1: one bitmap size
        return ImageFont.load_default()


def _panel(a: np.ndarray, px: int) -> Image.Image:
    im = Image.fromarray(a)
    s = min(1.0, px / max(im.size))
    return im if s == 1.0 else im.resize((round(im.width * s), round(im.height * s)), Image.LANCZOS)


def contact_sheet(previous: np.ndarray, editor: np.ndarray, kept: np.ndarray, title: str,
                  panel_px: int = PANEL_PX) -> Image.Image:
    """previous | editor | kept | |kept - editor| ×4, each labelled, under a title line."""
    diff = np.clip(np.abs(kept.astype(np.int16) - editor.astype(np.int16)) * 4, 0, 255).astype(np.uint8) \
        if kept.shape == editor.shape else np.zeros_like(kept)
    panels = [_panel(a, panel_px) for a in (previous, editor, kept, diff)]
    labels = ("previous I_(t-1)", "editor (scaled to I_(t-1))", "kept (handed back)", "|kept - editor| x4")
    head, lab, gap = 26, 20, 6
    w = sum(p.width for p in panels) + gap * 5
    h = max(p.height for p in panels) + head + lab + gap * 2
    sheet = Image.new("RGB", (w, h), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    draw.text((gap, 5), title[:220], fill=(255, 255, 255), font=_font(15))
    x = gap
    for p, text in zip(panels, labels):
        draw.text((x, head + 2), text, fill=(220, 220, 120), font=_font(13))
        sheet.paste(p, (x, head + lab))
        x += p.width + gap
    return sheet


# --------------------------------------------------------------------------- the run

def safe_name(text: str) -> str:
    """A file name part: letters, digits, dot, dash and underscore."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120]


def run_conversation(conv: Conversation, out: Path | None, history_first: bool) -> tuple[list[dict], list[dict]]:
    """Replay one conversation; its rows and flags. Writes its sheets and kept pictures under `out`
    (None: no pictures, the tests')."""
    i0_img = Image.open(conv.source).convert("RGB")
    outputs = [Image.open(p).convert("RGB") for p in conv.outputs]
    i0 = np.asarray(i0_img)
    rows, flags = [], []
    for rt in replay(i0_img, outputs, list(conv.instructions), history_first):
        name = f"{safe_name(conv.name)}_t{rt.t}.png"
        row, fl = turn_row(conv, rt, i0, f"sheets/{name}")
        rows.append(row)
        flags += fl
        if out is not None:
            title = (f"{conv.editor} | {conv.name} | turn {rt.t} | changed by {row['changed_by']} | "
                     f"{rt.request[:90]}")
            contact_sheet(rt.before.current.image.array, rt.editor_image, rt.kept, title).save(
                out / "sheets" / name, compress_level=1)
            Image.fromarray(rt.kept).save(out / "kept" / name, compress_level=1)
    return rows, flags


def run(convs: list[Conversation], out: Path | None, history_first: bool = True, progress=None):
    """Replay every conversation; (rows, flags). progress(text) is told after each one."""
    rows, flags = [], []
    for i, conv in enumerate(convs, start=1):
        start = time.perf_counter()
        r, f = run_conversation(conv, out, history_first)
        rows += r
        flags += f
        if progress is not None:
            changed = sum(x["changed_by"] != "none" for x in r)
            progress(f"[{i}/{len(convs)}] {conv.editor}: {conv.name}: {len(r)} turns, {changed} changed, "
                     f"{len(f)} flagged, {time.perf_counter() - start:.1f} s")
    return rows, flags


# --------------------------------------------------------------------------- the summary

def editor_counts(rows: list[dict]) -> list[str]:
    """The table of counts per editor (markdown lines)."""
    lines = ["| editor | turns | changed by undo | by repeat | by reveal | by guard | by reveal+guard | unchanged | "
             "editor not called | mended and passed | stepped aside per check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[r["editor"]].append(r)
    for ed, rs in list(by.items()) + [("all", rows)]:
        c = Counter(r["changed_by"] for r in rs)
        aside = Counter(x.split(":", 1)[1] for r in rs for x in r["failed_checks"].split(";") if x
                        if r[x.split(":", 1)[0]] == "aside")
        checks = ", ".join(f"{k} {n}" for k, n in sorted(aside.items())) or "-"
        lines.append(f"| {ed} | {len(rs)} | {c['undo']} | {c['repeat']} | {c['reveal']} | {c['guard']} | {c['reveal+guard']} | "
                     f"{c['none']} | {sum(str(r['editor_called']) == '0' for r in rs)} | "
                     f"{sum(bool(r['mended']) for r in rs)} | {checks} |")
    return lines


def undo_figure(rows: list[dict]) -> list[str]:
    """The undo figure per ConvergeBench removal turn: whole-image PSNR against I_0 (markdown lines)."""
    rem = [r for r in rows if r["kept_db"] != ""]
    if not rem:
        return ["(no ConvergeBench removal turn in this run)"]
    lines = ["| chain | turn | editor dB | kept dB | changed by |", "|---|---|---|---|---|"]
    for r in rem:
        lines.append(f"| {r['sequence'].replace('convergebench_', '')} | {r['turn']} | {float(r['editor_db']):.1f} | "
                     f"{float(r['kept_db']):.1f} | {r['changed_by']} |")
    kept = [float(r["kept_db"]) for r in rem]
    worse = sum(float(r["kept_db"]) < float(r["editor_db"]) - 1e-9 for r in rem)
    gain = statistics.median(float(r["kept_db"]) - float(r["editor_db"]) for r in rem)
    lines += ["", f"{len(rem)} removal turns: {sum(k >= TARGET_DB for k in kept)} at {TARGET_DB:.0f} dB or more, "
                  f"{sum(k >= 40 for k in kept)} at 40 dB or more, {worse} worse than the editor's, "
                  f"median gain over the editor {gain:+.1f} dB, editor not called on "
                  f"{sum(str(r['editor_called']) == '0' for r in rem)}."]
    return lines


def summary(rows: list[dict], flags: list[dict], history_first: bool, seconds: float,
            cpu: float | None = None) -> str:
    """The markdown summary: counts per editor, the undo figure, the flagged turns (seconds: wall
    clock; cpu: this process's CPU seconds, which a busy machine does not inflate)."""
    verified = any(r["failed_checks"] or r["mended"] for r in rows) or flags
    lines = [f"# Harm benchmark: {len(rows)} turns, {len({r['sequence'] for r in rows})} conversations, "
             f"history first {'on' if history_first else 'off'}, {seconds:.0f} s"
             + (f" ({cpu:.0f} s CPU)" if cpu is not None else ""), "",
             "## Counts per editor", "", *editor_counts(rows), "",
             "## The undo figure per ConvergeBench removal turn (whole-image PSNR against I_0, cap 100 dB)", "",
             *undo_figure(rows), ""]
    by_turn: dict[tuple, list[dict]] = defaultdict(list)
    for f in flags:
        by_turn[(f["editor"], f["sequence"], f["turn"], f["step"], f["sheet"])].append(f)
    lines += [f"## Turns where a check made a step step aside ({len(by_turn)} turns, {len(flags)} failed checks)", ""]
    if not flags:
        lines.append("none" + ("" if verified else " (no step recorded a verification: the checks are not in "
                                                   "this code)"))
    for (editor, sequence, turn, step, sheet), fs in sorted(by_turn.items(), key=lambda kv: kv[0][0]):   # per editor
        checks = "; ".join(f"{f['check']} ({str(f['detail'])[:120]})" for f in fs)
        lines.append(f"- {editor} | {sequence} turn {turn}: {step} stepped aside: {checks} -> {sheet}")
    return "\n".join(lines) + "\n"


def compare(before: list[dict], rows: list[dict]) -> str:
    """Of the ConvergeBench turns where the pack changed the editor's picture in `before`, how many
    it still changes in `rows` (the line, then one per turn it no longer changes)."""
    now = {(r["sequence"], str(r["turn"])): r for r in rows}
    was = [b for b in before if b["sequence"].startswith("convergebench_") and b["changed_by"] != "none"
           and (b["sequence"], str(b["turn"])) in now]
    lost = [b for b in was if now[(b["sequence"], str(b["turn"]))]["changed_by"] == "none"]
    n, m = len(was), len(was) - len(lost)
    lines = [f"of the {n} ConvergeBench turns where the pack changed the editor's picture before, {m} still "
             f"change it ({100.0 * m / n if n else 0.0:.1f} %)"]
    for b in lost:
        r = now[(b["sequence"], str(b["turn"]))]
        why = "; ".join(f"{s} {r.get(s, '?')}: {_why(r, s)}" for s in b["changed_by"].split("+"))
        lines.append(f"  no longer: {b['sequence']} turn {b['turn']} (was {b['changed_by']}; now {why})")
    return "\n".join(lines)


def _why(row: dict, step: str) -> str:
    """The failed checks of `step` in `row`, else its reason (shortened)."""
    failed = [x.split(":", 1)[1] for x in row.get("failed_checks", "").split(";") if x.startswith(step + ":")]
    return ("failed " + ", ".join(failed)) if failed else row.get(f"{step}_reason", "")[:120]


def write_csv(path: Path, rows: list[dict], columns) -> None:
    """`rows` as CSV with `columns`."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns))
        w.writeheader()
        w.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    """An earlier run's turns.csv (InputError when it is not one)."""
    if not path.is_file():
        raise InputError(f"--before {path} is not a file: give an earlier run's turns.csv")
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if rows and not {"sequence", "turn", "changed_by"} <= set(rows[0]):
        raise InputError(f"--before {path} has no sequence/turn/changed_by columns: give an earlier run's turns.csv")
    return rows


def check_out(out: Path) -> None:
    """InputError when --out lies in the repository and git does not ignore it (the sheets show
    real pictures that must never be committed)."""
    out = out.resolve()
    if out == ROOT or ROOT in out.parents:
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(out)], capture_output=True)
        if ignored.returncode != 0:
            raise InputError(f"--out {out} is inside the repository and not ignored by git: the sheets show the "
                             f"real pictures; give a folder outside the checkout (e.g. /tmp/harm) or under bench_out/")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--realdata", required=True, type=Path, help="the realdata folder (read only)")
    ap.add_argument("--out", required=True, type=Path, help="where the sheets, CSVs and summary go (outside git)")
    ap.add_argument("--history-first", choices=("on", "off"), default="on",
                    help="the undo from history (the chat graphs' default: on)")
    ap.add_argument("--before", type=Path, default=None, help="an earlier run's turns.csv to compare with")
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations only (a quick run)")
    ap.add_argument("--only", default="", help="conversations whose name or editor contains this text only")
    args = ap.parse_args(argv)
    try:
        if args.limit is not None and args.limit < 1:
            raise InputError(f"--limit must be 1 or more, got {args.limit}")
        check_out(args.out)
        before = read_csv(args.before) if args.before else None
        convs = [c for c in conversations(args.realdata)
                 if args.only.lower() in c.name.lower() or args.only.lower() in c.editor.lower()]
        if not convs:
            raise InputError(f"no conversation's name or editor contains {args.only!r}")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    convs = convs[:args.limit] if args.limit else convs
    for sub in ("sheets", "kept"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    start, cpu = time.perf_counter(), time.process_time()
    rows, flags = run(convs, args.out, args.history_first == "on",
                      progress=lambda s: print(s, file=sys.stderr, flush=True))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    write_csv(args.out / "turns.csv", rows, COLUMNS)
    write_csv(args.out / "flags.csv", flags, FLAG_COLUMNS)
    text = summary(rows, flags, args.history_first == "on", seconds, cpu)
    if before is not None:
        text += "\n## Against --before\n\n" + compare(before, rows) + "\n"
    (args.out / "summary.md").write_text(text)
    print(text)
    print(f"{len(rows)} turns in {seconds:.0f} s ({cpu:.0f} s CPU); wrote {args.out}/turns.csv, flags.csv, "
          "summary.md, sheets/, kept/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
