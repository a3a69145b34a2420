#!/usr/bin/env python
"""Benchmark of the FLUX.2 [klein] editor (not a test): seconds per denoising step and per edit,
and peak memory, with 1 and 2 reference images.

    python scripts/bench/bench_editor.py                      # tiny random klein on the CPU (default)
    python scripts/bench/bench_editor.py --steps 8 --size 128 --repeats 3
    python scripts/bench/bench_editor.py --gpu                # real-size klein 9B, random bf16 weights, CUDA
    python scripts/bench/bench_editor.py --gpu --variant 4B --size 1024 --steps 30
    python scripts/bench/bench_editor.py --gpu --variant toy --device cpu   # check the --gpu code path anywhere

--gpu builds the real klein architecture (transformer 9.08 B params + Qwen3-8B text encoder + the
FLUX.2 VAE; or the 4B variant with Qwen3-4B) with random weights directly on the GPU in bf16, so no
download is needed; timings equal those of real weights (same shapes, same kernels), the pictures
are noise. Default for --gpu: 1024x1024, 30 steps (the paper's setting), real CFG (klein base).

Columns:
  refs          reference images given to the editor (1: a non-restoration turn; 2: restoration
                source + identity anchor)
  size          generation size (width x height)
  s/step        mean seconds of one denoising step (steps 2..N; step 1 includes warm-up)
  s/edit        seconds of one whole edit (text encoding, reference VAE encoding, N steps, decode);
                median over --repeats
  cpu s/edit    CPU seconds of the process for one edit, all threads (less sensitive than wall time to
                other programs sharing the machine; median)
  RSS MB        the process's resident memory at its highest during the edits (sampled every 5 ms
                from /proc; weights, activations and Python included)
  +RSS MB       that peak minus the resident memory just before the edits (what editing adds on
                top of the loaded, warmed-up pipeline)
  peak GPU GiB  CUDA: torch.cuda.max_memory_allocated during the edit (weights included)
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a script, not part of the pack
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RESPEC_PROGRESS", "0")

from real_size import KLEIN, build_klein  # noqa: E402  (scripts/bench/real_size.py: the published configs)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssPeak:
    """Highest resident set size seen while the block runs (sampled every 5 ms)."""

    def __enter__(self):
        self.start = self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())


def run(editor, refs: int, size: int, steps: int, repeats: int, cuda: bool) -> dict:
    images = [np.random.RandomState(i).randint(0, 256, (size, size, 3), dtype=np.uint8) for i in range(refs)]
    seconds, per_step, cpu = [], [], []
    if cuda:
        import torch
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with RssPeak() as rss:
        for r in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            editor.edit(images, "remove the flowers, revealing the shirt from the first image",
                        output_size=(size, size), seed=r, steps=steps)
            if cuda:
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            per_step.append(editor.last_run["seconds_per_step"])
    row = {"refs": refs, "size": f"{size}x{size}", "steps": steps, "s/edit": statistics.median(seconds),
           "cpu s/edit": statistics.median(cpu),
           "s/step": statistics.median(per_step), "RSS MB": rss.peak / 2**20,
           "+RSS MB": (rss.peak - rss.start) / 2**20}
    if cuda:
        row["peak GPU GiB"] = torch.cuda.max_memory_allocated() / 2**30
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true", help="real-size klein with random bf16 weights on CUDA")
    ap.add_argument("--variant", choices=sorted(KLEIN), default="9B",
                    help="architecture for --gpu (toy: a few-MB stand-in to check the --gpu code path)")
    ap.add_argument("--device", default="cuda", help="device for --gpu (cpu only makes sense with --variant toy)")
    ap.add_argument("--size", type=int, default=None, help="image side (default 64 CPU / 1024 GPU)")
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default 4 CPU / 30 GPU)")
    ap.add_argument("--repeats", type=int, default=3, help="edits per configuration (median reported)")
    ap.add_argument("--refs", type=int, nargs="+", default=[1, 2], help="reference counts to measure")
    args = ap.parse_args(argv)

    import torch
    from respec.editors import Flux2Editor
    from respec.tiny.klein import build_tiny_klein_pipeline

    cuda = args.gpu and args.device.startswith("cuda")
    if args.gpu:
        if cuda and not torch.cuda.is_available():
            print("--gpu needs CUDA; none is available here", file=sys.stderr)
            return 2
        size, steps = args.size or 1024, args.steps or 30
        t0 = time.perf_counter()
        pipe = build_klein(args.variant, args.device, torch.bfloat16)
        label = (f"klein base {args.variant}, random bf16 weights, "
                 f"{torch.cuda.get_device_name() if cuda else args.device}")
        build = time.perf_counter() - t0
        params = sum(p.numel() for m in (pipe.transformer, pipe.text_encoder, pipe.vae) for p in m.parameters())
        weights = f"{params / 1e9:.2f} B parameters" + (
            f", {torch.cuda.memory_allocated() / 2**30:.1f} GiB on the GPU" if cuda else "")
    else:
        size, steps = args.size or 64, args.steps or 4
        t0 = time.perf_counter()
        torch.manual_seed(0)
        pipe = build_tiny_klein_pipeline()
        label = f"tiny random klein, CPU ({torch.get_num_threads()} threads)"
        build = time.perf_counter() - t0
        params = sum(p.numel() for m in (pipe.transformer, pipe.text_encoder, pipe.vae) for p in m.parameters())
        weights = f"{params / 1e6:.2f} M parameters"
    editor = Flux2Editor(pipe, name=f"klein-{args.variant if args.gpu else 'tiny'}")
    editor.edit([np.zeros((size, size, 3), np.uint8)], "warm up", output_size=(size, size), seed=0, steps=1)
    rows = [run(editor, n, size, steps, args.repeats, cuda) for n in args.refs]

    print(f"# FLUX.2 [klein] editor benchmark: {label}")
    print(f"# built in {build:.1f} s; {weights}; real CFG (2 transformer passes per step); "
          f"median of {args.repeats} edits")
    cols = ["refs", "size", "steps", "s/step", "s/edit", "cpu s/edit", "RSS MB", "+RSS MB"] + (["peak GPU GiB"] if cuda else [])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols) + " |")
    print(f"# process peak RSS (getrusage): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
