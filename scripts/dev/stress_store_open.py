"""Several processes opening the same, not yet existing session store at the same moment.

Each round gets a new store directory; every process waits at a barrier, then opens the store,
starts a session of its own in it and reads it back. A failure is any exception (the old code
failed 2.2 % of rounds: "another program's database" or "database is locked").

    python scripts/dev/stress_store_open.py                     # 4 processes x 200 rounds
    python scripts/dev/stress_store_open.py --procs 8 --rounds 50
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # script only: run from a checkout


def _worker(base: str, worker: int, rounds: int, barrier, out) -> None:
    import numpy as np
    from respec.store import SessionStore
    img = np.full((4, 4, 3), worker, np.uint8)
    for r in range(rounds):
        try:
            barrier.wait(120)
        except Exception as e:  # a broken barrier: report and stop
            out.put((worker, r, f"barrier: {e!r}"))
            return
        error = None
        try:
            store = SessionStore(Path(base) / f"round-{r}", timeout=30.0)
            store.create(f"w{worker}", img)
            if len(store.load(f"w{worker}")) != 1:
                error = "the new session does not read back"
            store.close()
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        out.put((worker, r, error))


def run(procs: int = 4, rounds: int = 200, workdir: str | Path | None = None) -> dict:
    """Run the stress; returns {"opens", "failures", "errors", "seconds"}."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(dir=workdir) as base:
        barrier = ctx.Barrier(procs)
        out = ctx.Queue()
        ps = [ctx.Process(target=_worker, args=(base, w, rounds, barrier, out)) for w in range(procs)]
        start = time.monotonic()
        for p in ps:
            p.start()
        results = [out.get(timeout=600) for _ in range(procs * rounds)]
        for p in ps:
            p.join(60)
        seconds = time.monotonic() - start
        # every store must hold exactly the sessions of all workers
        from respec.store import SessionStore
        missing = []
        for r in range(rounds):
            ids = {s["session_id"] for s in SessionStore(Path(base) / f"round-{r}").list_sessions()}
            if ids != {f"w{w}" for w in range(procs)}:
                missing.append(f"round {r}: sessions {sorted(ids)}")
    errors = [f"round {r} worker {w}: {e}" for w, r, e in results if e] + missing
    return {"opens": len(results), "failures": len(errors), "errors": errors[:20], "seconds": seconds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--workdir", default=None, help="where the round folders go (default: the temp dir)")
    a = p.parse_args(argv)
    res = run(a.procs, a.rounds, a.workdir)
    print(f"{a.procs} processes x {a.rounds} rounds: {res['opens']} opens, {res['failures']} failures, "
          f"{res['seconds']:.1f} s")
    for e in res["errors"]:
        print("  " + e)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
