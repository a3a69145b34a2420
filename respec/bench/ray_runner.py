"""The benchmark on a Ray cluster: one worker per GPU, the results file kept by the driver.

    python -m respec bench --ray local ...         # a Ray instance on this machine
    python -m respec bench --ray auto ...          # the cluster this machine belongs to (`ray start`)
    python -m respec bench --ray HOST:6379 ...     # or a ray:// address

Work is scheduled per scenario: a worker runs all the scenario's configs in a row, so their
shared prefix turns are computed once (`respec.bench.prefix`). Each worker is a Ray actor that
loads the editor, controller, masker and scorer once in its constructor and keeps them for the
whole run (one GPU each where the cluster has GPUs, else `cpus_per_worker` CPUs).

Faults: a worker process that dies is restarted by Ray (the constructor reloads the weights)
and its scenario is tried again; a scenario that runs past `scenario_timeout` has its worker
killed and restarted, and is tried again; after `max_attempts` tries a scenario's keys go to
errors.jsonl with the reason. The driver alone writes results.jsonl (the pack's lock + fsync
append): keys already there are skipped at start, so a restarted driver resumes where the last
one stopped. Rows equal the in-process runner's for the same settings.

`--out` must be a folder every worker can write (a local path for `--ray local`, a shared
file system such as NFS on a cluster): workers save the images there, the driver the rows.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from ..occur.scenario import load_dataset
from . import runner
from .settings import BenchSettings

log = logging.getLogger("respec.bench.ray")


@dataclass
class RayOptions:
    """How the run uses the cluster."""
    address: str = "local"            # local | auto | HOST:PORT | ray://HOST:PORT
    workers: int | None = None        # None: one per GPU, else one per `cpus_per_worker` CPUs
    cpus_per_worker: float = 1.0
    max_attempts: int = 3             # tries per scenario (first run included)
    scenario_timeout: float | None = None   # seconds; None: no limit
    num_cpus: int | None = None       # for address="local": CPUs Ray may use (None: all)


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'respec-occur[cluster]' (or pip install ray)") from None
    return ray


def _status_path(out: Path, worker: int) -> Path:
    return out / "workers" / f"worker-{worker}.json"


class BenchWorker:
    """One Ray actor: the models of a run, loaded once, and the scenarios given to it."""

    def __init__(self, settings: dict, out: str, worker: int, sim_world: runner.ModelLoader | None = None):
        self.settings = BenchSettings(**settings)
        self.out = Path(out)
        self.worker = worker
        self._write_status(None)
        self.models = runner.load_models(self.settings, sim_world)

    def ready(self) -> int:
        """Answers once the constructor (model loading) has finished; the worker's process id."""
        return os.getpid()

    def _write_status(self, scenario_id: str | None) -> None:
        # Where an operator (or a test) sees which process runs what, and since when.
        path = _status_path(self.out, self.worker)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"worker": self.worker, "pid": os.getpid(), "host": socket.gethostname(),
                                   "scenario": scenario_id, "since": time.time()}), encoding="utf-8")
        os.replace(tmp, path)

    def run(self, dataset_path: str, scenario_id: str, configs: list[str]) -> tuple[list[dict], dict]:
        """Every given config of one scenario (runner.run_scenario): rows or error records, and
        the counts of work run / shared."""
        dataset = load_dataset(dataset_path)
        scenario = next(s for s in dataset if s.id == scenario_id)
        self._write_status(scenario_id)
        try:
            return runner.run_scenario(scenario, configs, self.models, self.settings, self.out,
                                       dataset_name=dataset.name)
        finally:
            self._write_status(None)


@dataclass
class _Task:
    scenario_id: str
    configs: list[str]
    keys: list[str]
    attempts: int = 0
    reasons: list[str] = field(default_factory=list)


def _start_ray(ray, opts: RayOptions) -> None:
    if ray.is_initialized():
        return
    # Workers must import this pack from its folder: ship the folder's parent on their path.
    pack_root = str(Path(__file__).resolve().parents[2])
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (pack_root, os.environ.get("PYTHONPATH")) if p),
                        "RESPEC_PROGRESS": "0"}}
    for name in ("RESPEC_HOME", "RESPEC_MODELS_DIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "YOLO_OFFLINE",
                 "YOLO_CONFIG_DIR", "OMP_NUM_THREADS"):
        if name in os.environ:
            env["env_vars"][name] = os.environ[name]
    kwargs: dict[str, Any] = {"runtime_env": env, "logging_level": logging.WARNING,
                              "include_dashboard": False}
    # "local" always starts a new Ray on this machine (never joins one found running).
    kwargs["address"] = opts.address
    if opts.address == "local" and opts.num_cpus:
        kwargs["num_cpus"] = int(opts.num_cpus)
    ray.init(**kwargs)


def _worker_count(ray, opts: RayOptions) -> tuple[int, dict]:
    res = ray.cluster_resources()
    gpus = int(res.get("GPU", 0))
    if gpus:
        return (opts.workers or gpus), {"num_gpus": 1}
    cpus = float(res.get("CPU", 1))
    n = opts.workers or max(1, int(cpus // max(opts.cpus_per_worker, 0.01)))
    return n, {"num_cpus": opts.cpus_per_worker}


class _Scheduler:
    """The driver's bookkeeping while a Ray run goes: which scenarios wait, which workers run what.

    run_ray calls its steps in a loop: hand out work (`dispatch`), wake workers whose restart pause is
    over (`wake_due`), take in what finished (`collect`), restart workers past the timeout
    (`kill_timed_out`)."""

    def __init__(self, ray, plan, opts: RayOptions, on_row: Callable[[dict], None] | None):
        self.ray, self.plan, self.opts, self.on_row = ray, plan, opts, on_row
        self.summary = plan.summary
        self.pending = [_Task(s.id, cfgs, keys) for s, cfgs, keys in plan.todo]
        self.busy: dict[Any, tuple[_Task, Any, float]] = {}   # run ref -> (task, actor, started)
        self.waking: dict[Any, Any] = {}                      # ready ref -> an actor (re)starting
        self.restarting: list[tuple[float, Any]] = []         # (when to ask again, actor) still unavailable
        self.idle: list = []

    def wake(self, actor, delay: float = 0.0) -> None:
        # A worker takes work only once it answers ready(): its constructor has loaded the models.
        if delay:
            self.restarting.append((time.monotonic() + delay, actor))
        else:
            self.waking[actor.ready.remote()] = actor

    def give_up(self, task: _Task) -> None:
        reason, plan = "; ".join(task.reasons), self.plan
        for key, cname in zip(task.keys, task.configs):
            runner.record_result(plan, key, {
                "dataset": plan.dataset.name, "scenario_id": task.scenario_id, "config": cname,
                "editor": plan.settings.editor, "key": f"{key}|{time.time():.0f}", "status": "error",
                "error": f"gave up after {task.attempts} attempts: {reason}", "attempts": task.attempts})

    def retry_or_fail(self, task: _Task, reason: str) -> None:
        task.reasons.append(reason)
        self.summary.retried.setdefault(task.scenario_id, []).append(reason)
        log.warning("scenario %s attempt %d failed: %s", task.scenario_id, task.attempts, reason)
        if task.attempts < self.opts.max_attempts:
            self.pending.insert(0, task)
        else:
            self.give_up(task)

    def all_gone(self) -> bool:
        """True (and the waiting scenarios recorded as errors) when work waits but no worker is left."""
        if not self.pending or self.idle or self.busy or self.waking or self.restarting:
            return False
        for task in self.pending:
            task.reasons.append("every worker is gone")
            self.give_up(task)
        return True

    def dispatch(self) -> None:
        while self.pending and self.idle:
            task, actor = self.pending.pop(0), self.idle.pop(0)
            task.attempts += 1
            ref = actor.run.remote(self.plan.dataset.path, task.scenario_id, task.configs)
            self.busy[ref] = (task, actor, time.monotonic())

    def wake_due(self) -> None:
        now = time.monotonic()
        for item in [r for r in self.restarting if r[0] <= now]:
            self.restarting.remove(item)
            self.wake(item[1])

    def collect(self, ref) -> None:
        """Take in one finished ref: a worker that answered ready(), or a scenario's rows (or its failure)."""
        ray = self.ray
        if ref in self.waking:
            actor = self.waking.pop(ref)
            try:
                ray.get(ref)
                self.idle.append(actor)
            except ray.exceptions.ActorUnavailableError:
                self.wake(actor, delay=0.5)            # Ray is restarting it: ask again shortly
            except ray.exceptions.RayActorError as e:
                log.warning("a worker is gone for good: %s", e)
            return
        task, actor, _ = self.busy.pop(ref)
        try:
            results, counts = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self.wake(actor)                           # Ray restarts it (max_restarts=-1)
            self.retry_or_fail(task, f"worker died ({type(e).__name__})")
            return
        except ray.exceptions.RayTaskError as e:
            self.idle.append(actor)
            self.retry_or_fail(task, f"{type(e.cause).__name__ if e.cause else 'error'}: {e.cause or e}")
            return
        self.idle.append(actor)
        self.summary.add_work(counts)
        for key, result in zip(task.keys, results):
            runner.record_result(self.plan, key, result, self.on_row)

    def kill_timed_out(self) -> None:
        limit = self.opts.scenario_timeout
        if not limit:
            return
        now = time.monotonic()
        for ref, (task, actor, started) in list(self.busy.items()):
            if now - started > limit:
                self.busy.pop(ref)
                # A restart gives the worker a fresh process; its weights load again.
                self.ray.kill(actor, no_restart=False)
                self.wake(actor)
                self.retry_or_fail(task, f"timed out after {limit:g} s")


def run_ray(settings: BenchSettings, opts: RayOptions, on_row: Callable[[dict], None] | None = None,
            sim_world: runner.ModelLoader | None = None) -> "runner.RunSummary":
    """Run the benchmark on Ray (see the module docstring); rows go to <out>/results.jsonl.
    `sim_world`: the simulated world's loader for --editor sim (runner.load_models)."""
    ray = _ray()
    plan = runner.prepare_run(settings)
    settings, summary = plan.settings, plan.summary
    if not plan.todo:
        return summary
    t0 = time.perf_counter()
    _start_ray(ray, opts)
    n_workers, resources = _worker_count(ray, opts)
    n_workers = max(1, min(n_workers, len(plan.todo)))
    Actor = ray.remote(max_restarts=-1, max_task_retries=0, **resources)(BenchWorker)
    settings_dict = asdict(settings)
    actors = [Actor.remote(settings_dict, str(plan.out), i, sim_world) for i in range(n_workers)]
    s = _Scheduler(ray, plan, opts, on_row)
    for actor in actors:
        s.wake(actor)
    try:
        while s.pending or s.busy:
            if s.all_gone():
                break
            s.dispatch()
            s.wake_due()
            done, _ = ray.wait(list(s.busy) + list(s.waking), num_returns=1, timeout=0.5)
            for ref in done:
                s.collect(ref)
            s.kill_timed_out()
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
    summary.seconds = time.perf_counter() - t0
    return summary


__all__ = ["RayOptions", "run_ray", "BenchWorker"]
