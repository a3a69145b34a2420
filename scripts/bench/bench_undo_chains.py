#!/usr/bin/env python
"""History first on real conversations (issue 43): the 21 ConvergeBench chains replayed with the
undo from history on and off (not a test).

    python scripts/bench/bench_undo_chains.py --chains ../shared/realdata/chains

Reads the folder it is given (never copies from it). Each chain (FLUX.1 Kontext [dev] at 512²,
Gemini 2.0 Flash at 1024² from a 512² source) adds an object, removes it, and repeats three times;
after every removal (turns 2, 4, 6) the right picture is the source I_0, exactly. Each turn the
editor's recorded output, scaled to I_{t-1}'s size (bicubic) as the chat graphs do, is returned by a
"replay" editor, through the pack's conversational steps as `conversational_provenance` runs them:
the provenance planner and selector (no VLM), the restoration flag from the request's words, Reveal
Composite and the Drift Guard; with `history_first` on, a removal that history can answer is
answered before the edit and the replay editor is not called (scripts/bench/chat_replay.py, shared
with bench_harm.py).

A third run turns UndoParams.latest_whole off (the region rule answers the removal right after its
addition too), to measure that rule alone.

Per removal turn: whole-image PSNR against I_0 of the kept picture (100 dB for identical) with
history first on and off, the editor's own output's, and whether the editor was called. Totals: how
many reach 60 dB, how many are worse than the editor's, how many skipped the editor; per editor.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_replay import psnr, replay  # noqa: E402

TARGET_DB = 60.0
REMOVALS = (2, 4, 6)


def run_chain(folder: Path, chain: dict, history_first: bool, latest_whole: bool = True) -> list[dict]:
    """Replay one chain; a row per removal turn. latest_whole off: the region rule answers the
    removal right after its addition too (UndoParams.latest_whole), to measure that rule alone."""
    turns = chain["turns"]
    i0 = Image.open(folder / turns[0]["file"]).convert("RGB")
    outputs = [Image.open(folder / t["file"]).convert("RGB") for t in turns[1:]]
    truth = np.asarray(i0)
    rows = []
    for rt in replay(i0, outputs, [t["instruction"] for t in turns[1:]], history_first, latest_whole):
        if rt.t not in REMOVALS:
            continue
        record = rt.record
        undo = next((e for e in record.post_edit if e.get("step") == "history_undo"), {})
        steps = [f"{e['step']}:{'applied' if e.get('applied') else 'aside'}" for e in record.post_edit]
        rows.append({"chain": chain["chain_id"], "turn": rt.t, "kept_db": psnr(rt.kept, truth),
                     "editor_db": psnr(rt.editor_image, truth), "editor_called": rt.editor_called,
                     "answered": bool(undo.get("applied")), "undo_reason": undo.get("reason", ""),
                     "words": undo.get("words", ""), "steps": steps, "seconds": rt.seconds,
                     "covering": undo.get("covering_turn"), "whole": bool(undo.get("whole")),
                     "exact": bool(undo.get("exact"))})
    return rows


def editor_of(chain_id: str) -> str:
    return "Kontext" if "kontext" in chain_id else "Gemini" if "gemini" in chain_id else "other"


def table(rows_on: list[dict], rows_off: list[dict]) -> None:
    print("| chain | turn | kept dB (history first) | kept dB (off) | editor dB | editor called | answered | covering | why / words |")
    print("|---|---|---|---|---|---|---|---|---|")
    for on, off in zip(rows_on, rows_off):
        why = on["words"] or on["undo_reason"]
        print(f"| {on['chain'].replace('convergebench_', '')} | {on['turn']} | {on['kept_db']:.1f} | {off['kept_db']:.1f} | "
              f"{on['editor_db']:.1f} | {'yes' if on['editor_called'] else 'no'} | {'yes' if on['answered'] else 'no'} | "
              f"{on['covering']} | {why[:140]} |")


def totals(label: str, rows: list[dict]) -> str:
    n = len(rows)
    at = sum(r["kept_db"] >= TARGET_DB for r in rows)
    worse = sum(r["kept_db"] < r["editor_db"] - 1e-9 for r in rows)
    skipped = sum(not r["editor_called"] for r in rows)
    answered_called = sum(r["answered"] and r["editor_called"] for r in rows)
    gain = statistics.median(r["kept_db"] - r["editor_db"] for r in rows) if rows else float("nan")
    secs = statistics.median(r["seconds"] for r in rows) if rows else float("nan")
    whole = sum(r["answered"] and r["whole"] for r in rows)
    region = sum(r["answered"] and not r["whole"] for r in rows)
    return (f"| {label} | {n} | {at} | {sum(r['kept_db'] >= 40 for r in rows)} | {worse} | {skipped} | "
            f"{answered_called} | {whole} / {region} | {gain:+.1f} | {secs:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", required=True, type=Path, help="the realdata/chains folder (read only)")
    ap.add_argument("--only", default="", help="chain ids containing this text only")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    index = json.loads((args.chains / "index.json").read_text())
    chains = [c for c in index["chains"] if c["chain_id"].startswith("convergebench_") and args.only in c["chain_id"]]
    on, off, region_only = [], [], []
    for c in chains:
        on += run_chain(args.chains, c, True)
        region_only += run_chain(args.chains, c, True, latest_whole=False)
        off += run_chain(args.chains, c, False)
        print(f"# {c['chain_id']}: done", file=sys.stderr, flush=True)
    print("## Removal turns, history first on and off (whole-image PSNR against I_0, cap 100 dB)\n")
    table(on, off)
    print("\n## The region rule alone (UndoParams.latest_whole off): removals it did not bring to 60 dB\n")
    for r in region_only:
        if r["kept_db"] < TARGET_DB:
            print(f"- {r['chain'].replace('convergebench_', '')} turn {r['turn']}: {r['kept_db']:.1f} dB "
                  f"(editor {r['editor_db']:.1f}); {'answered' if r['answered'] else 'not answered: ' + r['undo_reason'][:160]}")
    print("\n## Totals\n")
    print("| run | removal turns | at 60 dB | at 40 dB | worse than the editor's | editor not called | "
          "answered but editor called | answered whole (I_{k-1}) / by the region rule | "
          "median gain over the editor (dB) | median turn seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rows in (("history first", on), ("history first, region rule only", region_only),
                       ("history first off (today)", off)):
        print(totals(name, rows))
        for ed in ("Kontext", "Gemini"):
            sub = [r for r in rows if editor_of(r["chain"]) == ed]
            if sub:
                print(totals(f"{name}: {ed}", sub))
    if args.json:
        args.json.write_text(json.dumps({"on": on, "region_only": region_only, "off": off}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
