"""Hostile controller answers through the whole turn path (issue 13's fuzz benchmark).

Each case is one controller answer (random bytes, truncated / deeply nested / huge JSON, 1 MB
strings, unbalanced braces, ```json fences that never close, lone surrogate escapes, huge and
non-finite numbers, well-formed plans with random ids) run through the real code:

    plan_turn (C.2 parse + C.3 fallbacks) -> select_references -> rewrite_instruction
    -> SessionStore.append (then rewind, so every case appends turn 4 of the same session)
    -> make_row -> ResultsFile.append

and counts exceptions (the goal: 0) and the time of each case (the goal: max < 0.1 s). Each case
is timed three ways: wall-clock for the whole path; CPU time of this process for the whole path
(what the code costs, without waiting for the disk's fsync or for other processes on a shared
machine); and wall-clock for the controller steps alone (parse -> select -> rewrite). The exit
status checks the exceptions and the CPU time. Answers are generated before the clock starts. The results file is started afresh every
ROWS_PER_RESULTS_FILE rows: its append reads the whole file to refuse duplicate keys, which is
the results writer's cost, not the controller's.

    python scripts/dev/fuzz_controller.py                  # 10,000 cases, seed 0
    python scripts/dev/fuzz_controller.py --count 200 --seed 3
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

os.environ.setdefault("RESPEC_PROGRESS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # script only: run from a checkout

import numpy as np  # noqa: E402

from respec.bench.results import ResultsFile  # noqa: E402
from respec.bench.rows import RowRun, make_row  # noqa: E402
from respec.occur.scenario import load_dataset  # noqa: E402
from respec.controller import plan_turn, rewrite_instruction, select_references  # noqa: E402
from respec.store import SessionStore  # noqa: E402

SCENARIO = "coffee_4t_v2_resize"     # 4 turns, the restoration turn is the last one
ROWS_PER_RESULTS_FILE = 10
MB = 1 << 20

PLAN = {"reasoning": {"occluder": "box", "uncovered_region": "chest", "target_evidence": "the patch",
                      "add_into_region_turn": 1, "per_turn_classification": {"T1": "ADD-INTO-REGION"},
                      "notes": "n"},
        "identity_anchor_id": 3, "restoration_source_id": 1, "restoration_region": "centre",
        "image_ids": [1, 3], "synthesis_instruction": "Resize the box, revealing the patch from the first image."}


class Answer:
    """A controller backend that answers with the given text."""

    name = "fuzz"

    def __init__(self, text: str):
        self.text = text

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        return self.text


def _random_text(rng: random.Random, n: int) -> str:
    alphabet = '{}[]":,0123456789 abcdefxyz\\\n`tnulre-.E+'
    return "".join(rng.choice(alphabet) for _ in range(n))


def _nested(rng: random.Random, depth: int) -> str:
    opener = rng.choice(['{"a": ', "[", '{"reasoning": '])
    closer = "}" if opener.startswith("{") else "]"
    return opener * depth + "1" + closer * depth


def _value(rng: random.Random, depth: int = 0):
    kinds = ["int", "bigint", "float", "nan", "str", "surrogate", "none", "bool"]
    if depth < 3:
        kinds += ["list", "dict"]
    k = rng.choice(kinds)
    if k == "int":
        return rng.randint(-10, 10)
    if k == "bigint":
        return rng.randint(2 ** 31, 10 ** 300)
    if k == "float":
        return rng.uniform(-1e300, 1e300)
    if k == "nan":
        return rng.choice([float("nan"), float("inf"), float("-inf")])
    if k == "str":
        return _random_text(rng, rng.randint(0, 40))
    if k == "surrogate":
        return "x" + chr(rng.randint(0xD800, 0xDFFF)) + "y"
    if k == "none":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_random_text(rng, 5): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def make_answer(rng: random.Random) -> tuple[str, str]:
    """(kind, answer text): one hostile controller answer."""
    kind = rng.choice(["bytes", "truncated", "nested", "huge_json", "big_string", "unbalanced",
                       "open_fences", "fields", "surrogates", "valid", "text"])
    if kind == "bytes":
        data = rng.randbytes(rng.choice([10, 1000, 100_000]))
        return kind, data.decode("utf-8", rng.choice(["surrogateescape", "replace", "ignore"]))
    if kind == "truncated":
        text = json.dumps({**PLAN, "restoration_source_id": rng.randint(-3, 9)})
        return kind, text[: rng.randint(0, len(text))]
    if kind == "nested":
        depth = rng.choice([50, 400, 600, 5_000, 200_000])
        inner = _nested(rng, depth)
        return kind, json.dumps({**PLAN, "reasoning": "@"}).replace('"@"', inner) if rng.random() < 0.5 else inner
    if kind == "huge_json":
        field = rng.choice(["synthesis_instruction", "restoration_region", "reasoning", "image_ids"])
        big = [rng.randint(0, 9) for _ in range(200_000)] if field == "image_ids" else "z" * MB
        return kind, json.dumps({**PLAN, field: big})
    if kind == "big_string":
        return kind, rng.choice(["a", "{", "}", " ", "\\", '"']) * MB
    if kind == "unbalanced":
        unit = rng.choice(["{", "x{", "{}", "}{", '{"', "[{"])
        return kind, unit * (MB // len(unit))
    if kind == "open_fences":
        return kind, rng.choice(["```json\n", "``` json {", "```JSON\n{\"a\":"]) * 60_000
    if kind == "fields":
        obj = {k: _value(rng) for k in rng.sample(list(PLAN), rng.randint(0, len(PLAN)))}
        try:
            text = json.dumps(obj)
        except (ValueError, OverflowError):
            text = repr(obj)
        return kind, rng.choice(["", "```json\n", "Sure: "]) + text + rng.choice(["", "\n```", " ok"])
    if kind == "surrogates":
        return kind, json.dumps(PLAN).replace("patch", "\\ud800patch\\udfff").replace("box", "box\udc80")
    if kind == "valid":
        obj = {**PLAN, "restoration_source_id": rng.randint(-2, 6),
               "image_ids": [rng.randint(-2, 6) for _ in range(rng.randint(0, 3))]}
        return kind, json.dumps(obj)
    return kind, _random_text(rng, rng.randint(0, 2000))


def _base(store: SessionStore, scenario) -> None:
    rng = np.random.default_rng(0)
    store.create("fuzz", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    for t in range(1, scenario.num_turns):
        store.append("fuzz", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), scenario.turns[t - 1].instruction)


def run_case(store: SessionStore, results: ResultsFile, scenario, answer: str, restoration: bool, i: int) -> float:
    """One answer through plan -> select -> rewrite -> store append -> results row; returns the
    wall-clock seconds of the controller steps (plan, select, rewrite)."""
    history = store.load("fuzz")
    t = scenario.num_turns
    request = scenario.turns[t - 1].instruction
    start = time.perf_counter()
    plan = plan_turn(history, request, Answer(answer), restoration)
    chosen = select_references(history, plan, use_history_reference=True)
    sent = rewrite_instruction(plan, use_pti=True)
    controller_s = time.perf_counter() - start
    done = store.append("fuzz", chosen.current, request, sent, plan=plan,
                        meta={"editor_image_ids": chosen.ids, "fallbacks": list(plan.fallbacks)})
    row = make_row(scenario, done, {}, RowRun(config="respec", editor="fuzz", controller="fuzz"))
    row["scenario_id"] = f"{scenario.id}-{i}"
    row.pop("key", None)
    results.append(row)
    store.rewind("fuzz", t - 1)
    return controller_s


def run(count: int = 10_000, seed: int = 0, workdir: str | Path | None = None, quiet: bool = True) -> dict:
    """Run `count` cases; returns {"cases", "exceptions", "errors", "max_s", "mean_s", "by_kind"}."""
    rng = random.Random(seed)
    scenario = load_dataset("occur_sample").by_id(SCENARIO)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        store = SessionStore(Path(tmp) / "store")
        _base(store, scenario)
        times: list[float] = []
        cpu: list[float] = []
        controller: list[float] = []
        worst: dict[str, float] = {}
        kinds: Counter = Counter()
        errors: list[str] = []
        results = None
        for i in range(count):
            if i % ROWS_PER_RESULTS_FILE == 0:
                results = ResultsFile(Path(tmp) / f"results-{i // ROWS_PER_RESULTS_FILE}.jsonl")
            kind, answer = make_answer(rng)
            restoration = rng.random() < 0.75
            kinds[kind] += 1
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                controller.append(run_case(store, results, scenario, answer, restoration, i))
            except Exception as e:  # counted: the goal is none
                errors.append(f"case {i} ({kind}, {len(answer)} chars): {type(e).__name__}: {e}"[:300])
                if not quiet:
                    traceback.print_exc()
                try:
                    store.rewind("fuzz", scenario.num_turns - 1)
                except Exception:
                    pass
            elapsed = time.perf_counter() - start
            cpu.append(time.process_time() - start_cpu)
            times.append(elapsed)
            worst[kind] = max(worst.get(kind, 0.0), elapsed)
    return {"cases": count, "seed": seed, "exceptions": len(errors), "errors": errors[:20],
            "max_s": max(times) if times else 0.0, "mean_s": statistics.fmean(times) if times else 0.0,
            "p99_s": sorted(times)[int(0.99 * (len(times) - 1))] if times else 0.0,
            "cpu_max_s": max(cpu) if cpu else 0.0, "cpu_mean_s": statistics.fmean(cpu) if cpu else 0.0,
            "controller_max_s": max(controller) if controller else 0.0,
            "controller_mean_s": statistics.fmean(controller) if controller else 0.0,
            "by_kind": {k: {"cases": kinds[k], "max_s": round(worst[k], 4)} for k in sorted(kinds)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=10_000, help="number of cases (default 10,000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--verbose", action="store_true", help="print each exception's traceback")
    a = p.parse_args(argv)
    res = run(a.count, a.seed, quiet=not a.verbose)
    print(f"cases {res['cases']}  seed {res['seed']}  exceptions {res['exceptions']}")
    print(f"whole path, wall:  max {res['max_s'] * 1000:.1f} ms  mean {res['mean_s'] * 1000:.2f} ms  "
          f"p99 {res['p99_s'] * 1000:.1f} ms")
    print(f"whole path, CPU:   max {res['cpu_max_s'] * 1000:.1f} ms  mean {res['cpu_mean_s'] * 1000:.2f} ms")
    print(f"controller steps (parse, select, rewrite), wall:  max {res['controller_max_s'] * 1000:.1f} ms  "
          f"mean {res['controller_mean_s'] * 1000:.2f} ms")
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("| kind | cases | max ms |\n|---|---:|---:|")
    for k, v in res["by_kind"].items():
        print(f"| {k} | {v['cases']} | {v['max_s'] * 1000:.1f} |")
    for e in res["errors"]:
        print("  " + e)
    return 1 if res["exceptions"] or res["cpu_max_s"] >= 0.1 else 0


if __name__ == "__main__":
    sys.exit(main())
