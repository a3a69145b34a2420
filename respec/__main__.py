"""Command line: `python -m respec bench | report | merge | validate | scenarios | gc` (run from the pack's folder).

    python -m respec bench --smoke                   # the sample set with tiny random models (CPU)
    python -m respec bench --config all --editor flux2 --out runs/flux2
    python -m respec bench --server http://127.0.0.1:8188 --server http://gpu2:8188
    python -m respec bench --ray auto --config all   # on a Ray cluster (docs/scale.md)
    python -m respec bench --shard 2/8 --out runs/s2  # one of 8 batch jobs; then:
    python -m respec merge runs/s1 ... runs/s8 --into runs/all
    python -m respec report runs/flux2/results.jsonl --out runs/flux2/report
    python -m respec validate my_scenarios.json
    python -m respec scenarios generate --photos my_photos/ --count 200 --out my_scenarios.json
    python -m respec gc --dry-run                    # session-store images no turn uses any more
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from .errors import InputError, ReSpecError

PAPER_DEFAULTS = ("paper defaults: controller Qwen/Qwen3-VL-8B-Instruct; FLUX.2 klein base 9B, 30 steps, "
                  "guidance 4.0; OmniGen2 50 steps, text guidance 5.0, image guidance 2.0; masks YOLO-World v2 "
                  "(yolov8l-worldv2.pt, conf 0.001, accept 0.2) + SAM vit_h; scores PSNR/LPIPS(AlexNet)/CLIP ViT-B/32")


def _config_help() -> str:
    """--config's help, from the configs themselves (so a new config is listed at once)."""
    from .bench.configs import CONFIG_GROUPS, CONFIGS
    groups = "; ".join(f"{g} = {', '.join(v)}" for g, v in CONFIG_GROUPS.items())
    return (f"one or more of {', '.join(CONFIGS)}; a group ({groups}); or a comma list of both "
            "(default: all, the paper's four; with --editor sim all,beyond: the main job adds the two "
            "conversational configs beyond the paper, history first among them). --list-configs says what each runs")


def config_list() -> str:
    """`bench --list-configs`: every config with its label, then the groups."""
    from .bench.configs import CONFIG_GROUPS, CONFIGS
    width = max(map(len, CONFIGS))
    lines = [f"{name:<{width}}  {c.label}" for name, c in CONFIGS.items()]
    lines += ["", "groups:"] + [f"{g:<{width}}  {', '.join(v)}" for g, v in CONFIG_GROUPS.items()]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m respec", description="ReSpec / OCCUR-Bench command line.")
    sub = p.add_subparsers(dest="command", required=True)
    # One step per subcommand, in the order --help lists them.
    b = _bench_parser(sub)
    for add in (_bench_what_args, _bench_server_args, _bench_model_args, _bench_run_args):
        add(b)
    _report_merge_validate_parsers(sub)
    _scenarios_parser(sub)
    _gc_parser(sub)
    return p


def _bench_parser(sub) -> argparse.ArgumentParser:
    """`bench`'s own parser; its options come from the _bench_*_args steps."""
    b = sub.add_parser("bench", help="run the OCCUR benchmark loop and write results + report",
                       description="Run every scenario of a dataset through the ReSpec loop under the chosen "
                                   "configs, writing a results row as each scenario finishes (re-running the same "
                                   "command resumes). " + PAPER_DEFAULTS + ".")
    return b


def _bench_what_args(b) -> None:
    """bench: what runs (dataset, configs, editor, masks, which scenarios)."""
    b.add_argument("--dataset", default=None,
                   help="scenario JSON file, or a packaged set's name (default: occur_sample; occur_sim with --editor sim)")
    b.add_argument("--smoke", action="store_true",
                   help="tiny random-weight models on the CPU (checks an install; numbers are meaningless)")
    b.add_argument("--out", default=None,
                   help="output folder (default: <output dir>/bench/<dataset>-<editor>[-smoke]); the same folder resumes")
    b.add_argument("--config", default=None, help=_config_help())
    b.add_argument("--list-configs", action="store_true",
                   help="print every config with what it runs (and the groups), then exit")
    b.add_argument("--selector", default=None, choices=["vlm", "provenance", "hybrid"],
                   help="reference selector for the configs with a controller: vlm (the paper), provenance (the "
                        "history's change masks, model-free rewrite, 0 VLM calls), hybrid (provenance picks, the "
                        "VLM writes); picks the matching config, e.g. respec -> respec-prov (hrs and pti have no "
                        "provenance variant and are left out)")
    b.add_argument("--reveal-composite", action="store_true",
                   help="paste the hidden pixels back after each restoration edit where the geometry held "
                        "(Reveal Composite; e.g. respec -> respec+reveal)")
    b.add_argument("--editor", default="flux2", choices=["flux2", "omnigen2", "sim"],
                   help="in-context editor; 'sim' is the simulated editor with exact ground truth (a test "
                        "instrument, docs/sim.md)")
    b.add_argument("--masks", default=None, choices=["oracle", "detect"],
                   help="A.5 masks from the sim editor's recorded layers (oracle, default with --editor sim) or "
                        "from YOLO-World + SAM on the generated images (detect)")
    b.add_argument("--sim-defects", default="default", choices=["none", "default", "realistic", "subject-warp"],
                   help="--editor sim: the simulated editor's drift: none (perfect), default (the paper's rows), "
                        "realistic (real editors' per-call zoom, sub-pixel shift, re-render texture, gain, blur, "
                        "noise), subject-warp (the default drift plus a local warp of up to 1.5 px per call around "
                        "the subject; respec/sim/drift.py)")
    b.add_argument("--limit", type=int, default=None, help="only the first N scenarios")
    b.add_argument("--scenario", action="append", default=None, metavar="ID", help="only this scenario (repeatable)")


def _bench_server_args(b) -> None:
    """bench: queueing to ComfyUI servers instead of running in-process."""
    b.add_argument("--server", action="append", default=None, metavar="URL",
                   help="queue the API workflow to this ComfyUI server instead of running in-process (repeatable)")
    b.add_argument("--workflow", default=None, help="API workflow for --server (default: the pack's benchmark workflow)")
    b.add_argument("--prompt-timeout", type=float, default=None, metavar="SECONDS",
                   help="--server: a prompt without a result this long after queueing is withdrawn and queued "
                        "again, elsewhere when possible (default 3600)")
    b.add_argument("--server-grace", type=float, default=None, metavar="SECONDS",
                   help="--server: how long a server taken out after failures is re-probed (pauses growing from "
                        "5 s to 5 min) before it is given up (default 1800)")
    b.add_argument("--route", default=None, choices=["native", "diffusers"],
                   help="with --server: native (default) fills the 'ReSpec eval' graphs (ComfyUI's own loaders, rows "
                        "labelled <editor>-native); diffusers fills the paper-exact 'ReSpec paper' graphs")


def _bench_model_args(b) -> None:
    """bench: the models and their settings (editor, controller, masks, scores, judge)."""
    b.add_argument("--size", type=int, default=None,
                   help="longer side of I_0 in pixels, rounded to multiples of 16 (default 1024; 96 with --smoke; "
                        "0 keeps the source size)")
    b.add_argument("--seed", type=int, default=0, help="base seed (each turn's seed derives from it)")
    b.add_argument("--steps", type=int, default=None, help="editor steps (default: paper's; 2 with --smoke)")
    b.add_argument("--guidance", type=float, default=None, help="editor guidance (default: paper's)")
    b.add_argument("--controller", default="qwen3-vl", choices=["qwen3-vl", "internvl3", "openai"],
                   help="controller backend (default qwen3-vl)")
    b.add_argument("--controller-model", default=None,
                   help="HF id, folder in models/LLM, or served model name (default Qwen/Qwen3-VL-8B-Instruct)")
    b.add_argument("--controller-url", default=None, help="base URL of an OpenAI-compatible server (--controller openai)")
    b.add_argument("--editor-model", default=None,
                   help="editor source: diffusers folder / HF id (default black-forest-labs/FLUX.2-klein-base-9B "
                        "or OmniGen2/OmniGen2)")
    b.add_argument("--dtype", default="auto", help="model dtype: auto | bf16 | fp16 | fp32")
    b.add_argument("--offload", default=None, help="editor offload mode (see docs/editors.md)")
    b.add_argument("--yolo", default=None, help="YOLO-World weights (default yolov8l-worldv2.pt in models/ultralytics)")
    b.add_argument("--sam-type", default=None, choices=["vit_h", "vit_l", "vit_b"], help="SAM type (default vit_h)")
    b.add_argument("--sam-weights", default=None, help="SAM checkpoint (default the official file for --sam-type)")
    b.add_argument("--clip", default=None, help="CLIP weights for scores and detection queries")
    b.add_argument("--lpips-trunk", default=None, help="AlexNet trunk file for LPIPS")
    b.add_argument("--judge", action="store_true", help="also score instruction faithfulness S_IF with a VLM judge")
    b.add_argument("--judge-backend", default=None, choices=["qwen3-vl", "internvl3", "openai"],
                   help="judge backend (default: the controller; the paper used GPT-4o-mini through 'openai')")
    b.add_argument("--judge-model", default=None, help="judge model (e.g. gpt-4o-mini)")
    b.add_argument("--allow-download", action="store_true", help="let missing weights download (off by default)")


def _bench_run_args(b) -> None:
    """bench: how the run goes (threads, resuming, Ray, shards, controller history, shared prefixes)."""
    b.add_argument("--no-images", action="store_true", help="do not save the generated images")
    b.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads torch uses in this process (default on the CPU: one per core that other "
                        "work leaves free when the run starts, at least 1; GPU runs: torch's default; the first "
                        "line printed says which; docs/benchmark.md)")
    b.add_argument("--fresh", action="store_true",
                   help="start over: move the folder's earlier results aside (results.<time>.jsonl) instead of resuming")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run on Ray: 'local' (a Ray instance on this machine; the default when no address is "
                        "given), 'auto' (the cluster this machine joined with `ray start`) or HOST:PORT / "
                        "ray://HOST:PORT; needs pip install 'respec-occur[cluster]' (docs/scale.md)")
    b.add_argument("--ray-workers", type=int, default=None,
                   help="Ray workers (default: one per GPU of the cluster, else one per CPU)")
    b.add_argument("--scenario-timeout", type=float, default=None,
                   help="with --ray: seconds after which a scenario's worker is restarted and the scenario retried")
    b.add_argument("--max-attempts", type=int, default=3,
                   help="with --ray: tries per scenario before it goes to errors.jsonl (default 3)")
    b.add_argument("--shard", default=None, metavar="I/N",
                   help="run only shard I of N (whole scenarios, chosen by a hash of their id); join the "
                        "shards' folders with `python -m respec merge`")
    b.add_argument("--controller-history", default="paper", choices=["paper", "bounded"],
                   help="history images the controller sees: paper (every image, the default) or bounded "
                        "(at most 6: I_0, the turns provenance marks relevant, the latest; the turns' plans say so)")
    b.add_argument("--no-shared-prefix", action="store_true",
                   help="run every config of a scenario from scratch (by default their identical turns run once; "
                        "the rows are the same either way)")


def _report_merge_validate_parsers(sub) -> None:
    """`report`, `merge` and `validate`: one results file, results folders, one scenario file."""
    r = sub.add_parser("report", help="tables 1, 2, 4-7 and figure 7 from a results file")
    r.add_argument("results", help="results.jsonl (or the bench output folder holding it)")
    r.add_argument("--out", default=None, help="report folder (default: <results folder>/report)")

    m = sub.add_parser("merge", help="join the results folders of --shard runs (or other runs of the same settings)")
    m.add_argument("folders", nargs="+", help="results folders (each holding results.jsonl)")
    m.add_argument("--into", required=True, help="a new folder for the merged results")

    v = sub.add_parser("validate", help="check a scenario file and summarise it")
    v.add_argument("dataset", help="scenario JSON file (or a packaged set's name)")
    v.add_argument("--images-root", default=None,
                   help="refuse scenario images outside this folder, as the Bench node does (default: "
                        "ComfyUI's input/respec_datasets for a file inside it, else no folder rule)")


def _scenarios_parser(sub) -> None:
    """`scenarios generate`: scenario files from photos."""
    sc = sub.add_parser("scenarios", help="make scenario files")
    scsub = sc.add_subparsers(dest="scenarios_command", required=True)
    g = scsub.add_parser("generate", help="generate valid scenarios with geometry from photos (paper figs 9-10)",
                         description="Write N valid OCCUR scenarios (with the geometry the simulated editor needs) "
                                     "from a folder of photos, spread over table 3's templates and the revelation "
                                     "types. Without --controller the instructions come from word lists; with one, "
                                     "the VLM writes the intermediate turns (figure 9/10-style prompts) and what it "
                                     "returns is validated (docs/sim.md).")
    g.add_argument("--photos", default=None,
                   help="folder of .png/.jpg photos (default: the photos that ship with the pack)")
    g.add_argument("--count", type=int, required=True, help="number of scenarios")
    g.add_argument("--out", required=True, help="dataset file to write (JSON)")
    g.add_argument("--seed", type=int, default=0, help="seed (the same seed and photos give the same file)")
    g.add_argument("--name", default=None, help="dataset name (default: the file name)")
    g.add_argument("--kind", default="occur", choices=["occur", "conversation"],
                   help="occur: table 3's templates x the revelation types (default); conversation: conversations "
                        "that repeat themselves (an object added, removed and added again; two objects of one kind, "
                        "one removed; docs/sim.md)")
    g.add_argument("--controller", default=None, choices=["qwen3-vl", "internvl3", "openai"],
                   help="ask this VLM backend for the intermediate turns (default: word lists only)")
    g.add_argument("--controller-model", default=None, help="HF id, folder in models/LLM, or served model name")
    g.add_argument("--controller-url", default=None, help="base URL of an OpenAI-compatible server")


def _gc_parser(sub) -> None:
    """`gc`: session-store files no turn refers to."""
    c = sub.add_parser("gc", help="delete session-store image files no turn refers to any more "
                                  "(after rewinds, deleted sessions, interrupted appends)")
    c.add_argument("--store", default=None, metavar="DIR",
                   help="the store folder (default: the default session store: RESPEC_SESSIONS_DIR, "
                        "else <ComfyUI user dir>/respec/sessions or <RESPEC_HOME>/sessions)")
    c.add_argument("--min-age", type=float, default=3600.0, metavar="SECONDS",
                   help="only files last changed at least this long ago (default 3600: an append in progress "
                        "in another process writes its image before its turn)")
    c.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")


def _settings(a):
    from .bench.settings import BenchSettings
    controller_opts: dict = {}
    if a.controller_url:
        controller_opts["base_url"] = a.controller_url
    if a.allow_download and a.controller != "openai":
        controller_opts["allow_download"] = True
    if a.dtype != "auto" and a.controller != "openai":
        controller_opts["dtype"] = a.dtype
    editor_opts: dict = {}
    if a.dtype != "auto":
        editor_opts["dtype"] = a.dtype
    if a.offload:
        editor_opts["offload"] = a.offload
    if a.allow_download:
        editor_opts["allow_download"] = True
    masker_opts = {k: v for k, v in (("yolo_weights", a.yolo), ("sam_type", a.sam_type),
                                     ("sam_weights", a.sam_weights), ("clip_weights", a.clip)) if v}
    scorer_opts = {k: v for k, v in (("lpips_trunk", a.lpips_trunk), ("clip_weights", a.clip)) if v}
    if a.allow_download:
        masker_opts["allow_download"] = True
        scorer_opts["allow_download"] = True
    size = a.size if a.size is not None else (96 if a.smoke else 256 if a.editor == "sim" else 1024)
    dataset = a.dataset or ("occur_sim" if a.editor == "sim" else "occur_sample")
    steps = a.steps if a.steps is not None else (2 if a.smoke else None)
    return BenchSettings(dataset=dataset, out=a.out or "", masks=a.masks or "",
                         configs=_configs(_config_spec(a), a.selector, a.reveal_composite), editor=a.editor,
                         smoke=a.smoke, size=size, seed=a.seed, steps=steps, guidance=a.guidance, limit=a.limit,
                         scenario_ids=a.scenario, judge=a.judge, save_images=not a.no_images,
                         controller=a.controller, controller_model=a.controller_model,
                         controller_options=controller_opts, judge_controller=a.judge_backend,
                         judge_model=a.judge_model, editor_model=a.editor_model, editor_options=editor_opts,
                         masker_options=masker_opts, scorer_options=scorer_opts, shard=a.shard,
                         share_prefix=not a.no_shared_prefix, controller_history=a.controller_history,
                         sim_defects=_sim_defects(a))


def _config_spec(a) -> str:
    """--config, or its default: the paper's four ("all"); with the simulated editor (the main job,
    where a config costs seconds) also the "beyond" group, whose table the report adds."""
    if a.config is not None:
        return a.config
    return "all,beyond" if a.editor == "sim" and not a.selector and not a.reveal_composite else "all"


def _sim_defects(a) -> str:
    if a.sim_defects != "default" and a.editor != "sim":
        raise SystemExit(f"error: --sim-defects {a.sim_defects} needs --editor sim (real editors drift on their own)")
    return a.sim_defects


def _configs(spec: str, selector: str | None, reveal: bool) -> list[str]:
    """The configs asked for, each switched to --selector / --reveal-composite when given (the
    baseline, which has no controller, stays as it is)."""
    from .bench.configs import CONFIGS, config_variant, parse_configs
    names = parse_configs(spec)
    if selector is None and not reveal:
        return names
    out = []
    for n in names:
        if not CONFIGS[n].switches.use_controller:
            out.append(n)
        elif selector in (None, "vlm") or CONFIGS[n].switches.use_pti and CONFIGS[n].switches.use_hrs:
            out.append(config_variant(n, selector, reveal))
    return parse_configs(out)


def _fresh(out: Path) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in ("results.jsonl", "errors.jsonl", "run.json"):
        p = out / name
        if p.exists():
            p.rename(out / f"{p.stem}.{stamp}{p.suffix}")
            print(f"moved {p} aside ({p.stem}.{stamp}{p.suffix})")


def _run_remote(a, settings) -> int:
    """`bench --server`: the settings' run queued to the servers (settings.out already resolved)."""
    from .bench.remote import RemoteOptions, run_remote
    given = {k: v for k, v in (("timeout", a.prompt_timeout), ("server_grace", a.server_grace)) if v is not None}
    opts = RemoteOptions(route=a.route or "native", workflow=a.workflow, **given)
    out = Path(settings.out)
    print(f"OCCUR bench on {len(a.server)} ComfyUI server(s): {', '.join(a.server)}; out {out}", flush=True)
    rc = 0
    try:
        summary = run_remote(settings, a.server, opts, quiet=a.quiet)
        if summary.interrupted:
            print(f"Interrupted: the rows finished so far are in {out / 'results.jsonl'}; run the same command to resume.")
            rc = 130
    except ReSpecError as e:
        # Some scenarios failed everywhere: say so, and still report what did finish.
        print(f"error: {e}", file=sys.stderr)
        rc = 1
    done = _finish(out / "results.jsonl", out)
    return rc or done


def _finish(results: Path, out: Path) -> int:
    from .bench.report import write_report
    if not results.exists():
        print(f"no results yet in {results}")
        return 1
    paths = write_report(results, out / "report")
    print(f"Results: {results}")
    print(f"Report:  {paths['report']}")
    print(f"Tables:  {out / 'report'}/*.csv   Figure 7: {paths['figure7']}")
    return 0


def set_threads(n: int | None) -> None:
    """Use `n` CPU threads for torch in this process (None: leave torch's default)."""
    if n is None:
        return
    if n < 1:
        raise InputError(f"--threads must be at least 1, got {n}")
    import torch
    torch.set_num_threads(int(n))


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        return os.cpu_count() or 1


def _cpu_jiffies() -> tuple[int, int, int] | None:
    """(all jiffies, idle + iowait jiffies, cpus) from Linux's /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read().splitlines()
        v = [int(x) for x in lines[0].split()[1:]]
        cpus = sum(1 for line in lines[1:] if line.startswith("cpu"))
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0), max(1, cpus)
    except (OSError, ValueError, IndexError):
        return None


def _busy_between(a, b) -> float | None:
    if a is None or b is None or b[0] <= a[0]:
        return None
    return (1 - (b[1] - a[1]) / (b[0] - a[0])) * b[2]


def _cpu_busy_now(seconds: float = 0.3) -> float | None:
    """Cores busy right now (over `seconds`), None where unknown."""
    a = _cpu_jiffies()
    time.sleep(seconds)
    return _busy_between(a, _cpu_jiffies())


def busy_cores() -> float:
    """How many cores other work keeps busy: the larger of the 1-minute load average (lags, but
    smooths bursts) and the busy share of the last 0.3 s (catches what just started)."""
    vals = []
    try:
        vals.append(os.getloadavg()[0])
    except (AttributeError, OSError):
        pass
    now = _cpu_busy_now()
    if now is not None:
        vals.append(now)
    return max(vals) if vals else 0.0


def choose_threads(requested: int | None, cores: int | None = None, busy: float | None = None,
                   gpu: bool | None = None, default: int | None = None) -> tuple[int | None, str]:
    """The CPU threads torch uses in this process and what to say about them. --threads wins; a
    GPU run keeps torch's default (the CPU only feeds the device); on the CPU, one thread per core
    that other work leaves free (at least 1): torch's threads wait for each other at every
    operation, so a thread on a core another process holds stalls all of them (docs/benchmark.md
    has the measurements). Measure before torch runs anything: our own start-up is not load."""
    if requested is not None:
        if requested < 1:
            raise InputError(f"--threads must be at least 1, got {requested}")
        return requested, f"CPU threads: {requested} (--threads)"
    cores = _usable_cores() if cores is None else cores
    busy = busy_cores() if busy is None else busy
    if gpu is None or default is None:
        import torch
        gpu = torch.cuda.is_available() if gpu is None else gpu
        default = torch.get_num_threads() if default is None else default
    if gpu:
        return None, f"CPU threads: torch's default ({default}; a GPU run)"
    n = max(1, min(cores, default, int(cores - busy + 0.5)))
    return n, (f"CPU threads: {n} of {cores} cores ({busy:.1f} busy with other work when the run started; "
               f"--threads N sets it)")


class ThreadGovernor:
    """Keeps torch's CPU threads at the cores other work leaves free while a run goes on (only when
    --threads was not given, on the CPU): every few seconds the busy cores of the machine and the
    load average, each minus this process's own CPU time, give the others' share (the larger). Threads go down as soon as the others take
    a core, up only once they leave one clearly free (a hysteresis of 0.2 cores)."""

    def __init__(self, n: int, cores: int, default: int, every: float = 2.0):
        self.n, self.cores, self.default, self.every = n, cores, default, every
        self.changes: list[tuple[float, int, float]] = []   # (seconds into the run, threads, others' cores)
        self._t0 = time.monotonic()
        self._mark = self._sample()

    @staticmethod
    def _sample():
        return time.monotonic(), time.process_time(), _cpu_jiffies()

    def check(self) -> int | None:
        """Re-count (at most every `every` s); the new thread count when it changed, else None."""
        now = self._sample()
        wall = now[0] - self._mark[0]
        if wall < self.every:
            return None
        busy = _busy_between(self._mark[2], now[2])
        own = (now[1] - self._mark[1]) / wall
        self._mark = now
        # The busy share of /proc/stat misses contention from outside a container (seen only as a
        # load, or as our own slowness); the load average, which includes our own threads, does not.
        try:
            load = os.getloadavg()[0] - own
        except (AttributeError, OSError):
            load = None
        seen = [v - (own if v is busy else 0.0) for v in (busy, load) if v is not None]
        if not seen:
            return None
        others = max(0.0, *seen)
        want = max(1, min(self.cores, self.default, int(self.cores - others + 0.5)))
        if want > self.n and int(self.cores - others + 0.3) < want:
            return None   # not clearly free yet
        if want == self.n:
            return None
        set_threads(want)
        self.n = want
        self.changes.append((round(now[0] - self._t0, 1), want, round(others, 1)))
        return want


def _with_out(settings):
    """The run's dataset, and the settings with their output folder (--out, else the default one)."""
    from .bench.runner import default_out_dir
    from .occur.scenario import load_dataset
    dataset = load_dataset(settings.dataset)
    out = settings.out or str(default_out_dir(dataset.name, settings.smoke, settings.editor))
    return dataset, replace(settings, out=out)


def cmd_bench(a) -> int:
    """`respec bench`: run the OCCUR benchmark (sim, smoke, real weights, ComfyUI servers or Ray) and report."""
    if a.list_configs:
        print(config_list())
        return 0
    from .bench.runner import prepare_run, select_scenarios
    bars = _progress_bars(a)
    settings = _settings(a)
    if a.server:
        if settings.editor == "sim":
            print("error: the sim editor runs in-process only (it is not a ComfyUI node); drop --server",
                  file=sys.stderr)
            return 2
        return _run_remote(a, _with_out(settings)[1])
    if a.route:
        print("error: --route chooses the workflow queued with --server; in-process runs use the pack's "
              "diffusers editors. Add --server URL, or drop --route.", file=sys.stderr)
        return 2
    governor = _start_threads(a)
    dataset, settings = _with_out(settings)
    out = Path(settings.out)
    # Every setting is checked before anything is printed about the run or written to its folder
    # (run.json is written as the first row is about to be made).
    plan = prepare_run(settings, check_folder=not a.fresh)
    settings = plan.settings
    if a.fresh:
        _fresh(out)
    chosen = len(select_scenarios(dataset, settings))
    count = f"{chosen} of {len(dataset)}" if chosen != len(dataset) else f"{len(dataset)}"
    sim = " (SIMULATED editor: a test instrument, docs/sim.md)" if settings.editor == "sim" else ""
    print(f"OCCUR bench: {count} scenarios in {dataset.path}; configs {', '.join(settings.configs)}; "
          f"editor {settings.editor}{sim}{' (smoke: tiny random-weight models)' if settings.smoke else ''}; "
          f"masks {settings.masks_mode()}; out {out}", flush=True)
    summary = _run_bench(a, settings, plan.keys, governor, bars)
    return _say_summary(summary, settings, out)


def _progress_bars(a) -> bool:
    """Whether this run draws progress bars; without them, say so to the libraries that draw their own."""
    bars = not a.quiet and sys.stderr.isatty() and os.environ.get("RESPEC_PROGRESS") != "0"
    if not bars:
        # A redirected stderr gets no bars (they are rewritten in place: kilobytes of \r lines in a
        # log); the rows' own lines and a progress line every few rows say how far the run is.
        os.environ["RESPEC_PROGRESS"] = "0"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # transformers' "Loading weights"
    return bars


def _start_threads(a) -> ThreadGovernor | None:
    """Choose and set torch's CPU threads (printing why); the governor that adapts them, if any."""
    # Before torch does any work, so that our own start-up does not count as other work.
    import torch
    default = torch.get_num_threads()
    threads, said = choose_threads(a.threads, default=default)
    print(said, flush=True)
    set_threads(threads)
    return ThreadGovernor(threads, _usable_cores(), default) if a.threads is None and threads else None


def _run_bench(a, settings, total: int, governor: ThreadGovernor | None, bars: bool):
    """Run the benchmark in-process or on Ray, printing each row; Ctrl-C interrupts cleanly."""
    from . import comfy
    from .bench.runner import run_benchmark
    from .bench.sim_models import load_sim_models   # --editor sim: the runner takes the sim's loader from its caller

    # Ctrl-C: finish nothing half-way; rows written so far stay, a re-run resumes.
    def _on_sigint(signum, frame):
        comfy.request_interrupt()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once
    old = signal.signal(signal.SIGINT, _on_sigint)
    if a.ray:
        from .bench.ray_runner import RayOptions, run_ray
        opts = RayOptions(address=a.ray, workers=a.ray_workers, max_attempts=a.max_attempts,
                          scenario_timeout=a.scenario_timeout)
        run = lambda **kw: run_ray(settings, opts, sim_world=load_sim_models, **kw)  # noqa: E731
    else:
        run = lambda **kw: run_benchmark(settings, sim_world=load_sim_models, **kw)  # noqa: E731
    started = time.perf_counter()
    every = max(1, total // 10)

    def on_row(row: dict, n=[0]) -> None:
        print(f"  {row['scenario_id']} [{row['config']}] S_restore={_f(row.get('S_restore'))} "
              f"S_preserve={_f(row.get('S_preserve'))} S_TC={_f(row.get('S_TC'))} "
              f"VLM calls={row.get('vlm_calls')} {row['seconds']['total']:.1f}s", flush=True)
        n[0] += 1
        if governor is not None and governor.check() is not None:
            t, k, others = governor.changes[-1]
            print(f"  -- CPU threads now {k} (other work used {others} cores over the last seconds)", flush=True)
        if not bars and (n[0] % every == 0 or n[0] == total):
            took = time.perf_counter() - started
            left = f", about {took / n[0] * (total - n[0]):.0f} s left" if n[0] < total else ""
            print(f"  -- {n[0]} of {total} rows in {took:.0f} s{left}", flush=True)
    try:
        return run(on_row=on_row)
    finally:
        signal.signal(signal.SIGINT, old)


def _say_summary(summary, settings, out: Path) -> int:
    """Print what the run did and failed, write the report; the command's exit status."""
    print(f"done {len(summary.done)}, already there {len(summary.skipped)}, failed {len(summary.failed)} "
          f"in {summary.seconds:.1f}s")
    w = summary.work
    if w.get("edits_run") or w.get("edits_shared"):
        print(f"edits run {w['edits_run']} (+{w['edits_shared']} shared between configs), controller calls run "
              f"{w['vlm_calls_run']} (+{w['vlm_calls_shared']} shared), scores computed {w.get('scores_run', 0)} "
              f"(+{w.get('scores_shared', 0)} shared)")
    for key, err in summary.failed.items():
        print(f"  FAILED {key}: {err}  (traceback in {out / 'errors.jsonl'})", file=sys.stderr)
    if summary.interrupted:
        print(f"Interrupted: everything finished so far is in {summary.results}; run the same command to resume.")
    if settings.shard and not (summary.done or summary.skipped or summary.failed):
        print(f"shard {settings.shard} holds none of the selected scenarios: nothing to do")
        return 0
    rc = _finish(Path(summary.results), out)
    return 130 if summary.interrupted else (1 if summary.failed else rc)


def _f(v) -> str:
    return "NaN" if v is None else f"{v:.3f}"


def cmd_report(a) -> int:
    """`respec report`: the paper's tables and figure from a results file (or a run folder)."""
    from .bench.report import write_report
    src = Path(a.results)
    if src.is_dir():
        src = src / "results.jsonl"
    if not src.is_file():
        print(f"no results file at {src}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else src.parent / "report"
    paths = write_report(src, out)
    print(f"Report: {paths['report']}")
    print(f"Tables: {out}/*.csv   Figure 7: {paths['figure7']}")
    return 0


def cmd_merge(a) -> int:
    """`respec merge`: join shard folders' results into one run folder, then report."""
    from .bench.shards import merge_results
    summary = merge_results(a.folders, a.into)
    for folder, n in summary.per_source.items():
        print(f"  {folder}: {n} rows")
    print(f"merged {summary.rows} rows into {summary.into} ({summary.duplicates} duplicates dropped, "
          f"{summary.errors} errors without a row kept)")
    return _finish(Path(summary.into) / "results.jsonl", Path(summary.into))


def cmd_validate(a) -> int:
    """`respec validate`: check a scenario file and its images, and print what it holds."""
    from collections import Counter
    from .occur.scenario import TEMPLATES, confine_images, load_dataset, packaged_datasets
    from .images import clip_text
    ds = load_dataset(a.dataset)
    root = None if Path(ds.path) in packaged_datasets().values() else _images_root(a.images_root, Path(ds.path))
    if root is not None:
        confine_images(ds, root)
    templates = Counter(s.template for s in ds)
    types = Counter(s.revelation_type for s in ds)
    dists = Counter(s.reference_distance for s in ds)
    print(f"{clip_text(ds.path)}: {len(ds)} valid scenarios (dataset {clip_text(ds.name, 80)!r})")
    print("  templates:        " + ", ".join(f"{t} {templates.get(t, 0)}" for t in list(TEMPLATES) + ["custom"]
                                            if templates.get(t, 0) or t in TEMPLATES))
    print("  revelation types: " + ", ".join(f"{t} {n}" for t, n in sorted(types.items())))
    print("  reference distance: " + ", ".join(f"{d} turns: {n}" for d, n in sorted(dists.items())))
    missing = [t for t in TEMPLATES if not templates.get(t)]
    if missing:
        print(f"  (no scenario for template(s) {', '.join(missing)})")
    with_geometry = sum(s.has_geometry for s in ds)
    print(f"  with geometry (runs on the sim editor): {with_geometry} of {len(ds)}")
    from .sim.generate import cell_table
    print(cell_table(list(ds)))
    return 0


def _images_root(given: str | None, dataset: Path) -> Path | None:
    """Where `validate` requires the scenario images: --images-root, else input/respec_datasets for
    a file inside it (the Bench node's rule), else nowhere in particular (the CLI bench reads the
    images a local file names; every one must still be a readable image within the pixel limit)."""
    if given:
        return Path(given).expanduser()
    from . import paths
    datasets = paths.datasets_dir().resolve()
    return datasets if datasets in dataset.resolve().parents else None


def cmd_scenarios(a) -> int:
    """`respec scenarios generate`: write a sim scenario file from photos (figures 9-10)."""
    from .occur.scenario import load_dataset
    from .sim.generate import (cell_table, conversation_scenarios, generate_scenarios, photos_in, shipped_photo_refs,
                               write_dataset)
    out = Path(a.out).expanduser().resolve()
    if out.is_dir() or (os.path.lexists(out) and not out.is_file()):
        raise InputError(f"--out {a.out} is {'a folder' if out.is_dir() else 'not a regular file'}; give the path "
                         f"of the dataset file to write (e.g. {Path(a.out) / 'my_scenarios.json'})")
    out.parent.mkdir(parents=True, exist_ok=True)
    refs = photos_in(a.photos) if a.photos else shipped_photo_refs()
    # Paths are written relative to the dataset file when they can be, so the folder can move.
    refs = [r if ":" in r and not Path(r).is_absolute() else _relative(r, out.parent) for r in refs]
    backend = None
    if a.controller:
        from .controller import load_backend
        opts = {"base_url": a.controller_url} if a.controller_url else {}
        backend = load_backend(a.controller, a.controller_model, **opts)
    if a.kind == "conversation":
        if backend is not None:
            raise InputError("--kind conversation writes its turns from word lists; leave --controller out")
        data = conversation_scenarios(refs, a.count, seed=a.seed, name=a.name or out.stem, base_dir=out.parent)
    else:
        data = generate_scenarios(refs, a.count, seed=a.seed, backend=backend, name=a.name or out.stem,
                                  base_dir=out.parent)
    write_dataset(data, out)
    ds = load_dataset(out)
    print(f"{out}: {len(ds)} valid scenarios")
    if a.kind == "occur":
        print(cell_table(data["scenarios"]))
    return 0


def _relative(path: str, folder: Path) -> str:
    import os
    try:
        return os.path.relpath(path, folder)
    except ValueError:   # another drive (Windows)
        return str(path)


def cmd_gc(a) -> int:
    """`respec gc`: delete (or with --dry-run list) session-store images no turn uses any more."""
    import math
    from .store import SessionStore
    if not (math.isfinite(a.min_age) and a.min_age >= 0):
        raise InputError(f"--min-age must be a number of seconds >= 0, got {a.min_age:g}")
    store = SessionStore(a.store)
    if not store.db_path.is_file():
        print(f"no session store in {store.root} (no {store.db_path.name}): nothing to do")
        return 0
    freed = 0

    def seen(path: Path, size: int) -> None:
        nonlocal freed
        freed += size
        print(f"  {'would remove' if a.dry_run else 'removed'} {path.relative_to(store.root)} ({_size(size)})")
    n = store.gc(a.min_age, dry_run=a.dry_run, seen=seen)
    kept = f" (files changed in the last {a.min_age:g} s are kept)" if a.min_age else ""
    print(f"{store.root}: {n} unused file{'s' if n != 1 else ''} {'would be removed' if a.dry_run else 'removed'}, "
          f"{_size(freed)} {'would be freed' if a.dry_run else 'freed'}{kept}")
    return 0


def _size(n: float) -> str:
    """A byte count for people: 1536 -> '1.5 KiB'."""
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


def _printable_anywhere() -> None:
    """A character the console's encoding lacks (Windows' cp1252, output redirected to a file, has no
    Greek capital delta and no arrow) is printed as "?" instead of ending the run with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    """The `python -m respec` command line; returns the exit status (a ReSpecError is one line, not a traceback)."""
    _printable_anywhere()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    a = _parser().parse_args(argv)
    try:
        return {"bench": cmd_bench, "report": cmd_report, "merge": cmd_merge, "validate": cmd_validate,
                "scenarios": cmd_scenarios, "gc": cmd_gc}[a.command](a)
    except ReSpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
