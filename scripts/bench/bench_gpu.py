#!/usr/bin/env python
"""Real-size, random-weight timings and peak GPU memory of the controller and the editors, per stage
of one turn (a benchmark, not a test; made for ONE run on a lent GPU with a hard time budget).

    python scripts/bench/bench_gpu.py --out DIR                      # every stage, within --budget seconds
    python scripts/bench/bench_gpu.py --out DIR --stages controller,klein9b
    python scripts/bench/bench_gpu.py --out DIR --tiny               # the same code paths, toy sizes, CPU
    python scripts/bench/bench_gpu.py --render DIR/bench_gpu.json [--write-docs]   # tables for docs/

Each model is built at its real size (scripts/bench/real_size.py: the published configs, cited
there) with random bf16 weights straight on the GPU, so nothing is downloaded; the numbers are
those of the real weights (same shapes, same kernels), the outputs are noise. Stages, most
important first (each in its own time cap; a failure is recorded and the next stage runs):

  controller  Qwen3-VL-8B through the pack's transformers backend and plan_turn: one restoration
              turn over --controller-images history images at the pack's 512x512 budget, greedy,
              --controller-tokens new tokens (prefill and per-token time; longer answers are
              extrapolated and labelled so)
  klein9b     FLUX.2 [klein] base 9B through the pack's Flux2Editor.edit: text encode, 2 reference
              images VAE-encoded, real CFG denoising at --size (two transformer passes a step),
              VAE decode; --klein-steps steps (the paper's 30) when they fit the stage's cap, else
              fewer, with the 30-step turn extrapolated and labelled so
  klein4b     the same with klein base 4B (Qwen3-4B text encoder)
  sam         SAM vit_h (the pack's builder, fp32) image encoding at 1024 px and one box prompt
  qwen_edit   Qwen-Image-Edit-2511 through diffusers' QwenImageEditPlusPipeline: 3 images, true CFG,
              --qwen-steps steps, extrapolated to its model card's 40

Every stage first runs once as a warm-up (kernel selection, the empty negative prompt's cache),
then the timed run. Times are CUDA-synchronised wall seconds around each model call (forward
hooks); memory is torch.cuda.max_memory_allocated / max_memory_reserved after
reset_peak_memory_stats at each call's start. "working" = a call's peak minus what was allocated
when it started (activations and temporaries); "one part at a time" = the weights a stage needs
resident plus that working memory (derived: what a loader that keeps only the stage's parts on the
GPU would need). Results go to DIR/bench_gpu.json after every step (a run cut short keeps what it
measured) and DIR/bench_gpu.md at the end; a watchdog ends the process shortly after --budget.

Expected on one H200 (estimated from FLOPs at ~600 TFLOP/s, not measured): imports ~20 s,
controller ~30 s, klein9b ~60 s (30 steps ~1.1 s each), klein4b ~35 s, sam ~15 s, qwen_edit
~70 s (~3 s a step): ~4 min in all, inside the default --budget of 390 s (the watchdog ends the
process at --budget + 45 s, whatever happens).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))                      # a script, not part of the pack
sys.path.insert(0, str(Path(__file__).resolve().parent))
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("RESPEC_PROGRESS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import real_size  # noqa: E402  (after the path set-up above)

GIB = real_size.GIB
STAGES = ("controller", "klein9b", "klein4b", "sam", "qwen_edit")
CAPS = {"controller": 90, "klein9b": 120, "klein4b": 80, "sam": 45, "qwen_edit": 120}   # seconds
RESULTS = "bench_gpu.json"
INSTRUCTION = "Remove the red umbrella and restore the bench it hid, as it looks in the first image."
TOY = " (toy size, CPU)"
PAPER_STEPS = {"klein": 30, "qwen_edit": 40}     # the paper's klein setting; Qwen-Image-Edit-2511's model card


class StageTimeout(BaseException):
    """A stage ran past its time cap (a BaseException, so that no library's `except Exception`
    turns it into an error of its own)."""


# --------------------------------------------------------------------------- measuring

class Gpu:
    """CUDA-synchronised clock and memory readings (memory readings are None on the CPU)."""

    def __init__(self, device):
        import torch
        self.torch, self.cuda = torch, device.type == "cuda"

    def now(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def allocated(self):
        return self.torch.cuda.memory_allocated() if self.cuda else None

    def peaks(self):
        """(max allocated, max reserved) since the last reset."""
        if not self.cuda:
            return None, None
        return self.torch.cuda.max_memory_allocated(), self.torch.cuda.max_memory_reserved()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()


class Probe:
    """Every call of the probed modules / methods: name, start and end (s, CUDA-synchronised),
    bytes allocated at its start, its peak allocated / reserved, and what `info` reads from the
    call's arguments. A call inside another probed call gets times only (the peak counters are
    reset at the outer call's start). `run_peak` is the highest allocation seen since clear()."""

    def __init__(self, gpu: Gpu):
        self.gpu, self.calls, self._depth, self._undo = gpu, [], 0, []
        self.clear()

    def clear(self) -> None:
        self.calls.clear()
        self.gpu.reset_peak()
        self.run_peak = self.gpu.allocated()
        self.run_reserved = self.gpu.peaks()[1]

    def _start(self, name: str, info: dict) -> dict:
        t = self.gpu.now()
        rec = {"name": name, "start": t, "nested": self._depth > 0, **info}
        if self._depth == 0 and self.gpu.cuda:
            self._fold_peaks()
            rec["start_alloc"] = self.gpu.allocated()
            self.gpu.reset_peak()
        self._depth += 1
        return rec

    def _end(self, rec: dict) -> None:
        rec["end"] = self.gpu.now()
        rec["seconds"] = rec["end"] - rec["start"]
        self._depth -= 1
        if not rec["nested"] and self.gpu.cuda:
            rec["peak_alloc"], rec["peak_reserved"] = self.gpu.peaks()
            self._fold_peaks()
        self.calls.append(rec)

    def _fold_peaks(self) -> None:
        alloc, reserved = self.gpu.peaks()
        self.run_peak = max(self.run_peak or 0, alloc or 0)
        self.run_reserved = max(self.run_reserved or 0, reserved or 0)

    def module(self, name: str, module, info=None) -> None:
        """Probe `module`'s forward calls; info(args, kwargs) -> dict of extra fields."""
        stack = []

        def pre(mod, args, kwargs):
            stack.append(self._start(name, info(args, kwargs) if info else {}))

        def post(mod, args, kwargs, output):
            self._end(stack.pop())

        self._undo += [module.register_forward_pre_hook(pre, with_kwargs=True).remove,
                       module.register_forward_hook(post, with_kwargs=True).remove]

    def method(self, name: str, obj, attr: str) -> None:
        """Probe calls of obj.attr (e.g. a VAE's encode / decode)."""
        original = getattr(obj, attr)

        def wrapped(*args, **kwargs):
            rec = self._start(name, {})
            try:
                return original(*args, **kwargs)
            finally:
                self._end(rec)

        setattr(obj, attr, wrapped)
        self._undo.append(lambda: obj.__dict__.pop(attr, None))

    def remove(self) -> None:
        for undo in self._undo:
            undo()
        self._undo.clear()

    def of(self, name: str) -> list[dict]:
        return [c for c in self.calls if c["name"] == name]

    def memory(self, name: str) -> dict:
        """memory_of all of `name`'s calls."""
        return memory_of(self.of(name))

    def seconds(self, name: str) -> list[float]:
        return [round(c["seconds"], 5) for c in self.of(name)]


def memory_of(calls: list[dict]) -> dict:
    """The highest peak among `calls` and that call's working memory (GiB); {} on the CPU."""
    outer = [c for c in calls if "peak_alloc" in c]
    if not outer:
        return {}
    top = max(outer, key=lambda c: c["peak_alloc"])
    return {"peak_gib": gib(top["peak_alloc"]), "working_gib": gib(top["peak_alloc"] - top["start_alloc"]),
            "reserved_gib": gib(top["peak_reserved"])}


def gib(n) -> float | None:
    return None if n is None else round(n / GIB, 3)


def mean(values) -> float | None:
    values = list(values)
    return round(sum(values) / len(values), 5) if values else None


def picture(seed: int, size: tuple[int, int]):
    """A random RGB picture (noise, never zeros: timings on zeros can flatter)."""
    import numpy as np
    from PIL import Image
    rng = np.random.RandomState(seed)
    return Image.fromarray(rng.randint(0, 256, (size[1], size[0], 3), dtype=np.uint8))


class Run:
    """The run's settings, clock, device and results (written to DIR/bench_gpu.json on every save)."""

    def __init__(self, args):
        import torch
        self.args, self.t0 = args, time.perf_counter()
        self.device = torch.device("cpu" if args.tiny else "cuda")
        self.dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype or ("fp32" if args.tiny else "bf16")]
        self.gpu = Gpu(self.device)
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.deadline = self.t0 + args.budget
        self.results = {"meta": environment(self), "stages": {}}
        self._lock = threading.Lock()
        self.watched: list[weakref.ref] = []

    def watch(self, *modules) -> None:
        """Remember the stage's models (weakly), to check after the stage that they were freed."""
        self.watched += [weakref.ref(m) for m in modules]

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():7.1f} s] {msg}", flush=True)

    def save(self) -> None:
        with self._lock:
            path = self.out / RESULTS
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.results, indent=1, default=str), encoding="utf-8")
            os.replace(tmp, path)


def environment(run: Run) -> dict:
    import platform

    import torch
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv[1:], "tiny": run.args.tiny, "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "dtype": str(run.dtype).replace("torch.", ""),
            "device": torch.cuda.get_device_name() if run.gpu.cuda else "cpu"}
    for name in ("transformers", "diffusers", "accelerate", "tokenizers", "segment_anything"):
        try:
            module = __import__(name)
            meta[name] = getattr(module, "__version__", "installed")
        except Exception as e:   # a missing package fails its stage, not the run
            meta[name] = f"missing ({type(e).__name__})"
    if run.gpu.cuda:
        meta["gpu_total_gib"] = gib(torch.cuda.get_device_properties(0).total_memory)
        meta["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        meta["flash_sdp"] = torch.backends.cuda.flash_sdp_enabled()
    return meta


def parts_record(parts: dict, toy: bool = False) -> dict:
    """Parameters (billions, with the published count of a real-size part) and resident GiB of each part."""
    out = {}
    for label, module in parts.items():
        n = real_size.count_params(module)
        published, source = (None, "toy size") if toy else real_size.PUBLISHED.get(label, (None, ""))
        zeros = sum(int((p == 0).sum()) for p in module.parameters())
        out[label] = {"params_b": round(n / 1e9, 4), "weights_gib": gib(real_size.weight_bytes(module)),
                      "published_b": published, "source": source,
                      # random weights, not zeros (timings on zeros can flatter): zero-initialised biases only
                      "zero_fraction": round(zeros / max(n, 1), 5)}
    return out


def fit_steps(stage_end: float, per_step: float, fixed: float, wanted: int) -> int:
    """How many denoising steps of `per_step` seconds fit before the stage's end, after `fixed`
    seconds of encoding / decoding and a 15 % margin (at least 2, at most `wanted`)."""
    left = (stage_end - time.perf_counter()) / 1.15 - fixed
    return max(2, min(int(wanted), int(left // max(per_step, 1e-6))))


# --------------------------------------------------------------------------- stage: controller

def stage_controller(run: Run, rec: dict, stage_end: float) -> None:
    """Qwen3-VL-8B, one restoration turn through the pack's TransformersVLM and plan_turn."""
    from respec.controller.backends.transformers_vlm import LocalVLMSettings, TransformersVLM
    from respec.controller.planner import PlanOptions, plan_turn
    from respec.controller.prompts import DEFAULT_MAX_PIXELS
    from respec.history import History

    args, variant = run.args, ("toy" if run.args.tiny else "8B")
    n_images, n_tokens = args.controller_images, args.controller_tokens
    size = (64, 64) if args.tiny else (1024, 1024)
    with tempfile.TemporaryDirectory(prefix="respec-bench-vlm-") as folder:
        t = time.perf_counter()
        real_size.write_controller_folder(folder, variant)
        with real_size.random_weights_from_config(run.device, run.dtype):
            backend = TransformersVLM("qwen3-vl", folder,
                                      LocalVLMSettings(dtype=str(run.dtype).replace("torch.", ""),
                                                       device=str(run.device), json_constrained=False,
                                                       max_new_tokens=n_tokens),
                                      source=f"Qwen3-VL-{variant} (random weights)")
        run.watch(backend.model)
        rec.update(model=f"Qwen3-VL-8B{TOY if args.tiny else ''}", build_s=round(run.gpu.now() - t, 2),
                   attn_implementation=_attn(backend.model),
                   parts=parts_record({"Qwen3-VL-8B": backend.model}, toy=args.tiny))
        run.log(f"{rec['model']}: built in {rec['build_s']} s, {rec['parts']['Qwen3-VL-8B']['weights_gib']} GiB")
        run.save()

        history = History.start(picture(0, size))
        for k in range(1, n_images):
            history = history.append(picture(k, size), f"Turn {k}: add a red umbrella over the bench, object {k}")
        image_token = backend.model.config.image_token_id
        probe = Probe(run.gpu)
        probe.module("forward", backend.model, info=lambda a, kw: _tokens(kw, image_token))
        visual = getattr(getattr(backend.model, "model", None), "visual", None)
        if visual is not None:
            probe.module("vision", visual)
        request = "Remove the red umbrella from the bench."
        plan_turn(history, request, backend, True, PlanOptions(max_new_tokens=2))       # warm-up
        probe.clear()
        t_call = run.gpu.now()
        plan = plan_turn(history, request, backend, True, PlanOptions(max_new_tokens=n_tokens))
        t_done = run.gpu.now()
        forwards = probe.of("forward")
        prefill, decode = forwards[0], forwards[1:]
        new_tokens = len(forwards)   # one forward per generated token (the prefill yields the first)
        per_token_wall = ((decode[-1]["end"] - prefill["end"]) / len(decode)) if decode else None
        rec.update(
            images=n_images, max_pixels=DEFAULT_MAX_PIXELS, history_image_size=list(size),
            prompt_tokens=prefill.get("tokens"), image_tokens=prefill.get("image_tokens"),
            text_tokens_note="byte-level tokenizer: text tokens ~4x the real BPE count; image tokens are real",
            preprocess_s=round(prefill["start"] - t_call, 4), prefill_s=round(prefill["seconds"], 4),
            vision_s=mean(probe.seconds("vision")), new_tokens=new_tokens,
            decode_forward_s=mean(c["seconds"] for c in decode),
            decode_token_s=round(per_token_wall, 5) if per_token_wall else None,
            call_s=round(t_done - t_call, 3), plan_seconds=round(plan.seconds, 3),
            plan_fallbacks=list(plan.fallbacks),
            memory={"weights_gib": gib(real_size.weight_bytes(backend.model)),
                    "prefill": memory_of([prefill]), "decode": memory_of(decode), "peak_gib": gib(probe.run_peak),
                    "reserved_peak_gib": gib(probe.run_reserved)})
        if per_token_wall:
            base = prefill["end"] - t_call
            rec["extrapolated"] = {f"{n} tokens": round(base + (n - 1) * per_token_wall, 2) for n in (256, 768)}
        probe.remove()
        run.log(f"controller: prefill {rec['prefill_s']} s over {rec['prompt_tokens']} tokens, "
                f"{rec['decode_token_s']} s/token, call {rec['call_s']} s")
        backend.release()


def _attn(model) -> str:
    """The attention implementation a transformers model runs (text encoders, the controller)."""
    return str(getattr(model.config, "_attn_implementation", None))


def _tokens(kwargs: dict, image_token_id: int) -> dict:
    ids = kwargs.get("input_ids")
    if ids is None or ids.shape[-1] < 2:
        return {}
    return {"tokens": int(ids.shape[-1]), "image_tokens": int((ids == image_token_id).sum())}


# --------------------------------------------------------------------------- stages: editors

def denoise_record(probe: Probe, steps: int, passes: int, paper_steps: int, parts: dict,
                   stage_parts: dict) -> dict:
    """Timings and memory of one timed edit from the probe: per stage and the turn at `paper_steps`."""
    passes_s = probe.seconds("transformer")
    calls = probe.of("transformer")
    per_step = (calls[-1]["end"] - calls[0]["start"]) / steps
    text_s, refs_s, decode_s = (sum(probe.seconds(n)) for n in ("text_encode", "reference_encode", "decode"))
    turn = text_s + refs_s + paper_steps * per_step + decode_s
    memory = {name: probe.memory(name) for name in ("text_encode", "reference_encode", "transformer", "decode")}
    for name, need in stage_parts.items():          # one part at a time: the stage's weights + its working memory
        if memory.get(name):
            memory[name]["one_part_at_a_time_gib"] = round(sum(parts[p]["weights_gib"] for p in need)
                                                           + memory[name]["working_gib"], 3)
    memory.update(all_parts_resident_peak_gib=gib(probe.run_peak), reserved_peak_gib=gib(probe.run_reserved),
                  weights_gib=round(sum(p["weights_gib"] for p in parts.values()), 3))
    return {"steps": steps, "passes_per_step": passes, "text_encode_s": round(text_s, 4),
            "text_encode_calls": len(probe.of("text_encode")), "reference_encode_s": round(refs_s, 4),
            "reference_encode_calls": len(probe.of("reference_encode")),
            "transformer_pass_s": mean(passes_s), "per_step_s": round(per_step, 4), "decode_s": round(decode_s, 4),
            "turn": {"steps": paper_steps, "seconds": round(turn, 2), "extrapolated": steps < paper_steps},
            "memory": memory}


def run_edit_stage(run: Run, rec: dict, stage_end: float, *, edit, pipe, parts: dict, stage_parts: dict,
                   passes: int, wanted_steps: int, paper_steps: int, warmup_steps: int = 2) -> None:
    """Warm-up edit, then a timed edit of as many steps (up to `wanted_steps`) as fit the stage's cap."""
    probe = Probe(run.gpu)
    probe.module("text_encode", pipe.text_encoder)
    probe.module("transformer", pipe.transformer)
    probe.method("reference_encode", pipe.vae, "encode")
    probe.method("decode", pipe.vae, "decode")
    edit(warmup_steps)
    calls = probe.of("transformer")
    last_step = calls[-passes:]
    per_step = (last_step[-1]["end"] - last_step[0]["start"]) * 1.1
    fixed = sum(sum(probe.seconds(n)) for n in ("text_encode", "reference_encode", "decode"))
    rec["warmup"] = {"steps": warmup_steps, "seconds": round(calls[-1]["end"] - probe.calls[0]["start"], 3),
                     "last_step_s": round(per_step / 1.1, 4)}
    steps = fit_steps(stage_end, per_step, fixed, wanted_steps)
    run.log(f"{rec['model']}: warm-up done, step ~{per_step / 1.1:.3f} s; timing {steps} steps")
    run.save()
    probe.clear()
    t = run.gpu.now()
    edit(steps)
    rec["edit_wall_s"] = round(run.gpu.now() - t, 3)
    rec.update(denoise_record(probe, steps, passes, paper_steps, parts, stage_parts))
    probe.remove()
    turn = rec["turn"]
    run.log(f"{rec['model']}: {rec['per_step_s']} s/step, turn at {turn['steps']} steps "
            f"{'~' if turn['extrapolated'] else ''}{turn['seconds']} s, "
            f"peak {rec['memory']['all_parts_resident_peak_gib']} GiB")


def stage_klein(run: Run, rec: dict, stage_end: float, variant: str) -> None:
    """FLUX.2 [klein] base through the pack's Flux2Editor (paper: 30 steps, guidance 4.0, 2 references)."""
    from respec.editors.base import place_pipeline
    from respec.editors.flux2 import Flux2Editor

    tiny = run.args.tiny
    t = time.perf_counter()
    pipe = real_size.build_klein("toy" if tiny else variant, run.device, run.dtype)
    run.watch(pipe.transformer, pipe.text_encoder, pipe.vae)
    text = {"9B": "Qwen3-8B text encoder", "4B": "Qwen3-4B text encoder"}[variant]
    parts = parts_record({f"klein {variant} transformer": pipe.transformer, text: pipe.text_encoder,
                          "FLUX.2 VAE": pipe.vae}, toy=tiny)
    managed, notes, offload = place_pipeline(
        pipe, {"text_encoder": pipe.text_encoder, "transformer": pipe.transformer, "vae": pipe.vae}, run.device, "none")
    editor = Flux2Editor(pipe, name=f"flux2-klein base {variant} (random weights)", parts=managed,
                         device=run.device, dtype=run.dtype, offload=offload, notes=notes)
    rec.update(model=f"FLUX.2 [klein] base {variant}{TOY if tiny else ''}", build_s=round(run.gpu.now() - t, 2),
               parts=parts, size=[run.args.size] * 2, references=2, cfg="real CFG: 2 transformer passes a step",
               guidance=4.0, attn_implementation=_attn(pipe.text_encoder))
    run.log(f"{rec['model']}: built in {rec['build_s']} s, {sum(p['weights_gib'] for p in parts.values()):.1f} GiB")
    run.save()
    refs = [picture(1, (run.args.size,) * 2), picture(2, (run.args.size,) * 2)]
    tr, te, vae = list(parts)

    def edit(steps: int) -> None:
        editor.edit(refs, INSTRUCTION, output_size=(run.args.size,) * 2, seed=0, steps=steps)

    run_edit_stage(run, rec, stage_end, edit=edit, pipe=pipe, parts=parts, passes=2,
                   stage_parts={"text_encode": [te], "reference_encode": [tr, vae], "transformer": [tr, vae],
                                "decode": [tr, vae]},
                   wanted_steps=run.args.klein_steps, paper_steps=PAPER_STEPS["klein"])
    rec["editor_last_run"] = dict(editor.last_run)


def stage_qwen_edit(run: Run, rec: dict, stage_end: float) -> None:
    """Qwen-Image-Edit-2511 through diffusers' QwenImageEditPlusPipeline, 3 images, true CFG 4.0."""
    import torch
    tiny = run.args.tiny
    t = time.perf_counter()
    pipe = real_size.build_qwen_image_edit("toy" if tiny else "2511", run.device, run.dtype)
    run.watch(pipe.transformer, pipe.text_encoder, pipe.vae)
    pipe.set_progress_bar_config(disable=True)
    parts = parts_record({"Qwen-Image-Edit-2511 transformer": pipe.transformer,
                          "Qwen2.5-VL-7B text encoder": pipe.text_encoder, "Qwen-Image VAE": pipe.vae}, toy=tiny)
    rec.update(model=f"Qwen-Image-Edit-2511{TOY if tiny else ''}", build_s=round(run.gpu.now() - t, 2), parts=parts,
               size=[run.args.size] * 2, references=3, cfg="true CFG 4.0: 2 transformer passes a step",
               attn_implementation=_attn(pipe.text_encoder))
    run.log(f"{rec['model']}: built in {rec['build_s']} s, {sum(p['weights_gib'] for p in parts.values()):.1f} GiB")
    run.save()
    images = [picture(i, (run.args.size,) * 2) for i in range(3)]
    tr, te, vae = list(parts)
    sizes = contextlib.nullcontext()
    if run.args.tiny:   # the pipeline's fixed 1024² / 384² reference sizes would make the CPU check take minutes
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as qwen_edit
        sizes = mock.patch.multiple(qwen_edit, VAE_IMAGE_SIZE=run.args.size ** 2,
                                    CONDITION_IMAGE_SIZE=run.args.size ** 2)

    def edit(steps: int) -> None:
        with sizes, torch.inference_mode():
            pipe(image=images, prompt=INSTRUCTION, negative_prompt=" ", true_cfg_scale=4.0, guidance_scale=1.0,
                 height=run.args.size, width=run.args.size, num_inference_steps=steps,
                 generator=torch.Generator("cpu").manual_seed(0))

    run_edit_stage(run, rec, stage_end, edit=edit, pipe=pipe, parts=parts, passes=2,
                   stage_parts={"text_encode": [te], "reference_encode": [vae], "transformer": [tr],
                                "decode": [vae]},
                   wanted_steps=run.args.qwen_steps, paper_steps=PAPER_STEPS["qwen_edit"])


def stage_sam(run: Run, rec: dict, stage_end: float) -> None:
    """SAM vit_h: one image encoding at 1024 px (the masker's _sam_features path) and one box prompt."""
    import numpy as np
    import torch
    from segment_anything import SamPredictor

    tiny = run.args.tiny
    t = time.perf_counter()
    sam = real_size.build_sam("toy" if tiny else "vit_h", run.device)
    run.watch(sam)
    rec.update(model=f"SAM vit_h{TOY if tiny else ''}", dtype="float32", build_s=round(run.gpu.now() - t, 2),
               parts=parts_record({"SAM vit_h image encoder": sam.image_encoder, "SAM prompt encoder + mask decoder":
                                   torch.nn.ModuleList([sam.prompt_encoder, sam.mask_decoder])}, toy=tiny))
    run.save()
    size = 256 if run.args.tiny else 1024
    image = np.asarray(picture(5, (size, size)))
    box = np.array([size * 0.25, size * 0.25, size * 0.75, size * 0.75], dtype=np.float32)
    predictor = SamPredictor(sam)
    probe = Probe(run.gpu)
    probe.module("image_encoder", sam.image_encoder)
    probe.module("mask_decoder", sam.mask_decoder)
    with torch.inference_mode():
        for timed in (False, True):
            if timed:
                probe.clear()
            t = run.gpu.now()
            predictor.set_image(image)
            encode_s = run.gpu.now() - t
            t = run.gpu.now()
            predictor.predict(box=box, multimask_output=False)
            prompt_s = run.gpu.now() - t
    rec.update(image=[size, size], encode_s=round(encode_s, 4), encoder_forward_s=mean(probe.seconds("image_encoder")),
               box_prompt_s=round(prompt_s, 4),
               memory={"weights_gib": gib(real_size.weight_bytes(sam)), "encode": probe.memory("image_encoder"),
                       "box_prompt": probe.memory("mask_decoder"), "peak_gib": gib(probe.run_peak)})
    probe.remove()
    run.log(f"{rec['model']}: encode {rec['encode_s']} s, box prompt {rec['box_prompt_s']} s")


STAGE_FUNCTIONS = {
    "controller": stage_controller,
    "klein9b": lambda run, rec, end: stage_klein(run, rec, end, "9B"),
    "klein4b": lambda run, rec, end: stage_klein(run, rec, end, "4B"),
    "sam": stage_sam,
    "qwen_edit": stage_qwen_edit,
}


# --------------------------------------------------------------------------- running

@contextlib.contextmanager
def time_cap(seconds: float):
    """Raise StageTimeout in this (main) thread once `seconds` have passed; CUDA kernels already
    queued finish first, so a stage stops within about one model call of its cap."""
    def alarm(signum, frame):
        raise StageTimeout(f"stage time cap of {seconds:.3g} s reached")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def free_memory(run: Run) -> float | None:
    """Collect garbage and return the cached blocks; GiB still allocated afterwards (should be ~0)."""
    gc.collect()
    if run.gpu.cuda:
        run.gpu.torch.cuda.synchronize()
        run.gpu.torch.cuda.empty_cache()
    return gib(run.gpu.allocated())


def run_stage(run: Run, name: str) -> None:
    """One stage under its cap; whatever happens is recorded and the run goes on."""
    rec = run.results["stages"].setdefault(name, {})
    left = run.deadline - time.perf_counter()
    if left < 10:
        rec.update(status="skipped", error=f"only {left:.0f} s of the --budget left")
        run.log(f"{name}: skipped ({rec['error']})")
        run.save()
        return
    cap = min(run.args.caps.get(name, CAPS[name]), left)
    rec.update(status="running", cap_s=round(cap, 1))
    run.log(f"{name}: start (cap {cap:.0f} s)")
    t = time.perf_counter()
    try:
        with time_cap(cap):
            STAGE_FUNCTIONS[name](run, rec, t + cap)
        rec["status"] = "ok"
    except BaseException as e:   # noqa: BLE001 - a stage's failure (OOM, timeout, import) must not end the run
        if isinstance(e, KeyboardInterrupt):
            raise
        rec.update(status="timeout" if isinstance(e, StageTimeout) else "error",
                   error=f"{type(e).__name__}: {str(e)[:800]}", traceback=traceback.format_exc(limit=12)[-4000:])
        run.log(f"{name}: {rec['status']}: {rec['error'][:300]}")
    rec["seconds"] = round(time.perf_counter() - t, 2)
    rec["left_allocated_gib"] = free_memory(run)
    # a model still alive here would stay on the GPU through the next stages
    rec["models_alive_after_free"] = sum(ref() is not None for ref in run.watched)
    run.watched.clear()
    run.save()


def start_watchdog(run: Run, grace: float = 45.0) -> None:
    """End the process (results saved) if it is still running `grace` s after the budget: a call
    stuck in native code cannot be interrupted by the stage's cap."""
    def fire():
        run.results["meta"]["watchdog"] = f"ended by the watchdog {grace:.0f} s after the --budget"
        run.log(run.results["meta"]["watchdog"])
        run.save()
        os._exit(3)

    timer = threading.Timer(max(run.deadline - time.perf_counter(), 0) + grace, fire)
    timer.daemon = True
    timer.start()


# --------------------------------------------------------------------------- rendering

def _f(value, digits: int = 2) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _header(results: dict) -> str:
    m = results["meta"]
    argv, shown = m.get("argv", []), []
    for k, a in enumerate(argv):   # the output folder is the machine's own business
        if a != "--out" and (k == 0 or argv[k - 1] != "--out"):
            shown.append(a)
    sizes = "toy sizes (--tiny)" if m.get("tiny") else "real sizes (scripts/bench/real_size.py)"
    return (f"Measured on {m.get('device')} ({m.get('gpu_total_gib', '?')} GiB), {m.get('started', '')[:10]}: "
            f"torch {m.get('torch')} (CUDA {m.get('cuda')}), transformers {m.get('transformers')}, "
            f"diffusers {m.get('diffusers')}; random {m.get('dtype')} weights at {sizes}, by "
            f"`python scripts/bench/bench_gpu.py{''.join(' ' + a for a in shown)}`.")


def _memory_section(results: dict) -> list[str]:
    st = results["stages"]
    rows = ["| model | stage | weights resident | peak allocated (all parts resident) | working | "
            "one part at a time (derived) |", "|---|---|---|---|---|---|"]

    def row(model, stage, weights, mem, one_part=None):
        rows.append(f"| {model} | {stage} | {_f(weights, 1)} | {_f(mem.get('peak_gib'), 1)} | "
                    f"{_f(mem.get('working_gib'), 2)} | {_f(one_part or mem.get('peak_gib'), 1)} |")

    for s in _ok(st, "klein9b", "klein4b", "qwen_edit"):
        m = s["memory"]
        for key, label in (("text_encode", "text encode"), ("reference_encode", "reference VAE encode"),
                           ("transformer", "denoise (one transformer pass)"), ("decode", "VAE decode")):
            mem = m.get(key) or {}
            row(s["model"], label, m["weights_gib"], mem, mem.get("one_part_at_a_time_gib"))
    for c in _ok(st, "controller"):
        row(c["model"], f"prefill ({c['images']} images)", c["memory"]["weights_gib"], c["memory"]["prefill"])
        row(c["model"], "decode (per token)", c["memory"]["weights_gib"], c["memory"]["decode"])
    for s in _ok(st, "sam"):
        row(f"{s['model']} (fp32)", f"image encode ({s['image'][0]} px)", s["memory"]["weights_gib"],
            s["memory"]["encode"])
    rows += ["", "GiB. Peak allocated = torch.cuda.max_memory_allocated during the stage with every part of the "
             "model on the GPU; working = that peak minus what was allocated when the stage started; one part at a "
             "time = the weights the stage needs (the text encoder alone; for klein the transformer + VAE, as the "
             "pack stages them) plus the working memory. Reserved memory (the caching allocator's pool) is in the "
             "JSON.", "", "| part | parameters built (B) | published (B) | source |", "|---|---|---|---|"]
    parts = {label: p for s in st.values() for label, p in (s.get("parts") or {}).items()}   # the VAE once
    for label, p in parts.items():
        rows.append(f"| {label} | {_f(p['params_b'], 3)} | {_f(p['published_b'], 3)} | {p['source'] or '–'} |")
    return rows


def _editors_section(results: dict) -> list[str]:
    rows = ["| editor | size | refs | steps timed | text encode s | reference encode s | s / step | VAE decode s | "
            "one turn s | peak GiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in _ok(results["stages"], "klein9b", "klein4b", "qwen_edit"):
        turn = s["turn"]
        mark = "~" if turn["extrapolated"] else ""
        rows.append(f"| {s['model']} | {s['size'][0]}² | {s['references']} | {s['steps']} | {_f(s['text_encode_s'])} | "
                    f"{_f(s['reference_encode_s'])} | {_f(s['per_step_s'], 3)} | {_f(s['decode_s'])} | "
                    f"{mark}{_f(turn['seconds'], 1)} at {turn['steps']} steps"
                    f"{' (extrapolated)' if mark else ''} | {_f(s['memory']['all_parts_resident_peak_gib'], 1)} |")
    return rows + ["", "Real CFG / true CFG: two transformer passes a step. One turn = text encode + reference encode "
                   "+ steps x s/step + decode (klein encodes its empty negative prompt once per loaded encoder and "
                   "caches it; Qwen-Image-Edit encodes its negative, with the images, on every edit, and resizes every "
                   "reference to about 1024² whatever the output size). A turn marked ~ was extrapolated from the "
                   "steps timed. Random weights: the pictures are noise, the cost is that of the real models."]


def _controller_section(results: dict) -> list[str]:
    c = results["stages"].get("controller", {})
    if c.get("status") != "ok":
        return [f"Not measured: {c.get('status', 'not run')} {c.get('error', '')[:200]}"]
    x = c.get("extrapolated", {})
    return ["| controller | history images | prompt tokens (image) | prefill s | s / new token | new tokens | "
            "call s | 256 tokens s (extrapolated) | 768 tokens s (extrapolated) |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| {c['model']} (transformers, {results['meta'].get('dtype')}, sdpa, greedy) | {c['images']} at 512² | "
            f"{c['prompt_tokens']} ({c['image_tokens']}) | {_f(c['prefill_s'], 3)} | {_f(c['decode_token_s'], 4)} | "
            f"{c['new_tokens']} | {_f(c['call_s'])} | {_f(x.get('256 tokens'), 1)} | {_f(x.get('768 tokens'), 1)} |",
            "", f"Peak {_f(c['memory']['peak_gib'], 1)} GiB ({_f(c['memory']['weights_gib'], 1)} GiB weights). "
            "One restoration turn through plan_turn and the transformers backend; call s = the whole call "
            "(prompt building, processor, prefill, decoding). The prompt's text was tokenised one token per byte "
            "(the real BPE needs about a quarter as many text tokens; image tokens are exact). Without "
            "JSON-constrained decoding (xgrammar adds its own per-token cost)."]


def _ok(stages: dict, *names: str) -> list[dict]:
    return [stages[n] for n in names if stages.get(n, {}).get("status") == "ok"]


SECTIONS = {"memory": (_memory_section, STAGES), "editors": (_editors_section, ("klein9b", "klein4b", "qwen_edit")),
            "controller": (_controller_section, ("controller",))}


def render(results: dict) -> dict[str, str]:
    """Markdown for docs/memory.md, docs/editors.md and docs/controller.md from a results JSON: each
    page's table, then the stages it covers that did not finish (and why)."""
    out = {}
    for name, (section, covered) in SECTIONS.items():
        failed = [f"- {n}: {s.get('status')} ({s.get('error', '')[:200]})"
                  for n, s in results["stages"].items() if n in covered and s.get("status") != "ok"]
        tail = (["", "Not measured in this run:"] + failed) if failed else []
        out[name] = "\n".join([_header(results), ""] + section(results) + tail)
    return out


DOCS = {"memory": "docs/memory.md", "editors": "docs/editors.md", "controller": "docs/controller.md"}


def write_docs(sections: dict[str, str], root: Path = ROOT) -> list[str]:
    """Replace the text between `<!-- bench_gpu:NAME -->` and `<!-- /bench_gpu:NAME -->` in each
    page of DOCS; returns the pages changed. A page without its markers is an error."""
    changed = []
    for name, rel in DOCS.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        start, end = f"<!-- bench_gpu:{name} -->", f"<!-- /bench_gpu:{name} -->"
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise SystemExit(f"{rel} has no {start} ... {end} section to fill")
        new = text[:i + len(start)] + "\n" + sections[name].strip() + "\n" + text[j:]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel)
    return changed


# --------------------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for bench_gpu.json / bench_gpu.md (e.g. $OUT)")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in order (default {','.join(STAGES)})")
    ap.add_argument("--tiny", action="store_true", help="toy sizes on the CPU: checks the code paths, not the speed")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                    help="weights of every model but SAM (fp32): default bf16 (fp32 with --tiny)")
    ap.add_argument("--budget", type=float, default=390, help="seconds for the whole run (default 390)")
    ap.add_argument("--cap", action="append", default=[], metavar="STAGE=SECONDS", help="a stage's time cap")
    ap.add_argument("--size", type=int, default=None, help="edit size in pixels (default 1024; 64 with --tiny)")
    ap.add_argument("--klein-steps", type=int, default=None, help="klein steps to time (default 30; 2 with --tiny)")
    ap.add_argument("--qwen-steps", type=int, default=None, help="Qwen-Image-Edit steps to time (default 8; 2 tiny)")
    ap.add_argument("--controller-images", type=int, default=5, help="history images shown to the controller")
    ap.add_argument("--controller-tokens", type=int, default=None, help="new tokens (default 128; 8 with --tiny)")
    ap.add_argument("--render", metavar="JSON", help="print the docs tables of a results file instead of running")
    ap.add_argument("--write-docs", action="store_true", help="with --render: fill the docs/ sections")
    args = ap.parse_args(argv)
    tiny = args.tiny
    args.size = args.size or (64 if tiny else 1024)
    args.klein_steps = args.klein_steps or (2 if tiny else PAPER_STEPS["klein"])
    args.qwen_steps = args.qwen_steps or (2 if tiny else 8)
    args.controller_tokens = args.controller_tokens or (8 if tiny else 128)
    args.stage_list = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(args.stage_list) - set(STAGES))
    if unknown:
        ap.error(f"unknown stage(s) {unknown}; choose from {', '.join(STAGES)}")
    args.caps = {}
    for item in args.cap:
        stage, _, seconds = item.partition("=")
        if stage not in STAGES or not seconds:
            ap.error(f"--cap takes STAGE=SECONDS with a stage of {', '.join(STAGES)}, got {item!r}")
        args.caps[stage] = float(seconds)
    if not args.render and not args.out:
        ap.error("--out DIR is needed (or --render JSON)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        sections = render(json.loads(Path(args.render).read_text(encoding="utf-8")))
        if args.write_docs:
            print("filled:", ", ".join(write_docs(sections)) or "nothing changed")
        else:
            print("\n\n".join(sections.values()))
        return 0
    import torch
    if not args.tiny and not torch.cuda.is_available():
        print("bench_gpu.py needs CUDA (or --tiny for the CPU code-path check)", file=sys.stderr)
        return 2
    run = Run(args)
    run.log(f"{run.results['meta']['device']}, torch {torch.__version__}, stages {args.stage_list}")
    run.save()
    start_watchdog(run)
    for name in args.stage_list:
        run_stage(run, name)
    run.results["meta"]["total_s"] = round(run.elapsed(), 1)
    run.save()
    text = "\n\n".join(render(run.results).values())
    (run.out / "bench_gpu.md").write_text(text + "\n", encoding="utf-8")
    print(text, flush=True)
    return 0 if all(s.get("status") == "ok" for s in run.results["stages"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
