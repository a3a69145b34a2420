"""Queue the benchmark's API workflow to running ComfyUI servers (headless, one or many).

For every scenario the API-format workflow is filled in (respec/bench/workflow.py: scenario
index, dataset path, seed, config switches) and sent to a server's `POST /prompt`; progress is
followed on that server's websocket (`/ws?clientId=...`), the outputs are read from `GET /history/<prompt_id>`, and the
results row the workflow's results-writer node reported is written locally as soon as the
scenario finishes, so a crash or Ctrl-C loses nothing and a re-run resumes.

Scenarios are spread over the servers (one prompt in flight per server: ComfyUI executes its
queue one prompt at a time anyway). A server that cannot be reached, answers 5xx, drops its
websocket or stops answering is a *server failure*: the scenario goes back to the pool, is
preferably given to another server, and a server with `max_server_failures` failures in a row
is not used again. A prompt the server rejects (validation, HTTP 400) or whose execution fails
is a *scenario failure on that server*: it is tried on another server that has not failed it
(servers may differ in installed models or nodes), never twice on the same one. Every scenario
gets at most `max_attempts` attempts; scenarios that still fail are reported together in one
RemoteBenchError after everything else has finished.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import InputError, ReSpecError
from .settings import BenchSettings
from .workflow import (RESULTS_WRITER, ROUTES, default_workflow, load_api_workflow, row_editor, rows_from_history,
                       scenario_prompt)

log = logging.getLogger("respec.bench.remote")

DEFAULT_PROMPT_TIMEOUT = 3600.0   # seconds from queueing to a scenario's result (then: withdrawn, queued again)
DEFAULT_SERVER_GRACE = 1800.0     # seconds a retired server is re-probed before it is given up


class RemoteBenchError(ReSpecError):
    """Some scenarios could not be run on any server; `.summary` says which and why."""

    def __init__(self, summary: "RemoteSummary"):
        self.summary = summary
        lines = [f"{len(summary.failed)} scenario(s) failed on every server they were tried on "
                 f"({len(summary.done)} done, {len(summary.skipped)} already in the results file):"]
        for sid, attempts in summary.failed.items():
            lines.append(f"  {sid}:")
            lines.extend(f"    - {a.server} [{a.kind}] {a.message}" for a in attempts)
            if not attempts:
                lines.append("    - never sent: no usable server was left")
        retired = [f"  {url}: {why}" for url, why in summary.retired.items()]
        if retired:
            lines.append("Servers taken out of the run:")
            lines.extend(retired)
        lines.append("Fix the cause and run the same command again: finished scenarios are kept "
                     "and only the missing ones are queued.")
        super().__init__("\n".join(lines))


class _ServerFailure(Exception):
    """The server is unusable right now (unreachable, 5xx, websocket dropped, silent)."""


class _ScenarioFailure(Exception):
    """The server worked but refused or failed this prompt (400 validation, execution error)."""


@dataclass
class Attempt:
    """One try of one scenario on one server."""
    server: str
    kind: str      # "unreachable" | "server_error" | "timeout" | "rejected" | "execution_error" | "interrupted" | "no_row"
    message: str

    @property
    def server_fault(self) -> bool:
        """Whether the attempt failed because of the server (retry elsewhere), not the job."""
        return self.kind in ("unreachable", "server_error", "timeout")


@dataclass
class _Job:
    index: int
    scenario_id: str
    prompt: dict
    group: str = ""    # jobs of one group (a scenario's configs) go to one server when possible
    attempts: list[Attempt] = field(default_factory=list)

    def tried(self, url: str) -> bool:
        return any(a.server == url for a in self.attempts)

    def refused_by(self, url: str) -> bool:
        # A scenario failure is deterministic for that server: never send it there again.
        return any(a.server == url and not a.server_fault for a in self.attempts)


@dataclass
class _Server:
    url: str
    client_id: str
    failures_in_row: int = 0
    retired: str | None = None   # why it was taken out of the run (for now: it is re-probed)
    retired_at: float = 0.0
    gave_up: bool = False        # re-probed for the whole grace period without coming back
    returns: int = 0             # how often it came back after being retired
    answered: bool = False       # passed its pre-flight at least once in this run
    done: int = 0

    def retire(self, reason: str) -> None:
        self.retired, self.retired_at = reason, time.monotonic()


@dataclass
class RemoteSummary:
    """What a remote run did: scenario ids done now, skipped (already done), failed (+ why)."""
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, list[Attempt]] = field(default_factory=dict)
    per_server: dict[str, int] = field(default_factory=dict)
    retired: dict[str, str] = field(default_factory=dict)
    returned: dict[str, int] = field(default_factory=dict)   # servers that came back after retiring
    seconds: float = 0.0
    interrupted: bool = False


# --------------------------------------------------------------------------- replies


def _execution_message(entry_or_event: dict) -> str:
    """A one-line reason from an execution_error / execution_interrupted payload."""
    d = entry_or_event
    where = f"node {d.get('node_id')} ({d.get('node_type')})" if d.get("node_id") else "a node"
    if "exception_message" in d:
        return f"{where} raised {d.get('exception_type', 'an exception')}: {str(d['exception_message']).strip()}"
    return f"interrupted at {where}"


def _rejection_message(status: int, body: Any) -> str:
    """ComfyUI's 400 body {"error": {...}, "node_errors": {...}} as one readable line."""
    if not isinstance(body, dict):
        return f"HTTP {status}: {str(body)[:500]}"
    err = body.get("error")
    parts = []
    if isinstance(err, dict):
        parts.append(f"{err.get('message', '')} {err.get('details', '')}".strip())
    elif err:
        parts.append(str(err))
    for node_id, ne in (body.get("node_errors") or {}).items():
        for e in ne.get("errors", []):
            parts.append(f"node {node_id} ({ne.get('class_type')}): {e.get('message')}: {e.get('details')}")
    return f"HTTP {status}: " + "; ".join(p for p in parts if p)


# --------------------------------------------------------------------------- one prompt

async def _json_or_text(resp) -> Any:
    try:
        return await resp.json(content_type=None)
    except Exception:
        return await resp.text()


MODEL_FILE_SUFFIXES = (".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf")


def model_files(prompts: Iterable[dict]) -> dict[str, list[str]]:
    """The model files the prompts' loader widgets name: {"ClassType.input": sorted file names}."""
    out: dict[str, set[str]] = {}
    for prompt in prompts:
        for node in prompt.values():
            for name, value in node["inputs"].items():
                if isinstance(value, str) and value.lower().endswith(MODEL_FILE_SUFFIXES):
                    out.setdefault(f"{node['class_type']}.{name}", set()).add(value)
    return {k: sorted(v) for k, v in sorted(out.items())}


async def _check_nodes(session, server: _Server, class_types: set[str], timeout: float,
                       files: dict[str, list[str]] | None = None) -> None:
    """Pre-flight: the server answers, knows every node type of the workflow and lists every model
    file the workflow's loaders name among that loader's choices."""
    import aiohttp
    missing, absent = [], []
    for ct in sorted(class_types):
        try:
            async with session.get(f"{server.url}/object_info/{ct}",
                                   timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status >= 400:
                    raise _ServerFailure(f"GET /object_info/{ct} answered HTTP {resp.status}")
                info = await _json_or_text(resp)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise _ServerFailure(f"unreachable: {type(e).__name__}: {e}") from e
        if not isinstance(info, dict) or ct not in info:
            missing.append(ct)
            continue
        declared = info[ct].get("input") or {}
        inputs = {**(declared.get("required") or {}), **(declared.get("optional") or {})}
        for key, names in (files or {}).items():
            node, _, name = key.rpartition(".")
            spec = inputs.get(name) if node == ct else None
            choices = combo_choices(spec)
            if choices is not None:
                absent += [f"{n} ({key})" for n in names if n not in choices]
    if missing:
        raise _ScenarioFailure(f"the server has no node type(s) {', '.join(missing)}: install the "
                               f"ReSpec pack (and restart ComfyUI) there, or leave this server out")
    if absent:
        raise _ScenarioFailure(f"the server lacks the model file(s) {', '.join(absent)} the workflow uses: put "
                               f"the same files in its model folders, or leave this server out")


def combo_choices(spec) -> list | None:
    """A drop-down's choices in an /object_info input spec: a V1 node lists them first
    ([choices, options]), a V3 node in its options (["COMBO", {"options": choices}]); None otherwise."""
    if not isinstance(spec, list) or not spec:
        return None
    if isinstance(spec[0], list):
        return spec[0]
    options = spec[1] if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict) else {}
    return options.get("options") if isinstance(options.get("options"), list) else None


async def _run_prompt(session, server: _Server, prompt: dict, *, timeout: float | None,
                      poll_interval: float, on_event: Callable | None, label: str) -> tuple[dict, str]:
    """Queue one prompt, follow it on the websocket; return its /history entry and prompt id.
    Cancelled (Ctrl-C) while it runs: the prompt is taken off the server's queue / interrupted."""
    started = time.monotonic()
    ws = await _open_socket(session, server)   # first, so that no event of this prompt is missed
    prompt_id = None
    try:
        prompt_id = await _queue_prompt(session, server, prompt)
        _emit(on_event, server.url, label, "queued", {"prompt_id": prompt_id})
        watch = _Watch(server, prompt_id, label, started, timeout, poll_interval, on_event)
        return await _follow(session, ws, watch), prompt_id
    except asyncio.CancelledError:
        if prompt_id is not None:
            await _cancel_on_server(session, server.url, prompt_id)
        raise
    finally:
        await ws.close()


async def _open_socket(session, server: _Server):
    """The server's websocket for this run's client id."""
    import aiohttp
    base = server.url
    ws_url = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + f"/ws?clientId={server.client_id}"
    try:
        return await session.ws_connect(ws_url, heartbeat=None, timeout=aiohttp.ClientWSTimeout(ws_close=5))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise _ServerFailure(f"unreachable: websocket {ws_url}: {type(e).__name__}: {e}") from e


async def _queue_prompt(session, server: _Server, prompt: dict) -> str:
    """POST /prompt; the prompt id the server gave it."""
    import aiohttp
    payload = {"prompt": prompt, "client_id": server.client_id, "prompt_id": str(uuid.uuid4())}
    try:
        async with session.post(f"{server.url}/prompt", json=payload,
                                timeout=aiohttp.ClientTimeout(total=120)) as resp:
            body = await _json_or_text(resp)
            if resp.status >= 500:
                raise _ServerFailure(f"POST /prompt answered HTTP {resp.status}: {str(body)[:300]}")
            if resp.status >= 400:
                raise _ScenarioFailure("rejected: " + _rejection_message(resp.status, body))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise _ServerFailure(f"POST /prompt failed: {type(e).__name__}: {e}") from e
    if not isinstance(body, dict) or "prompt_id" not in body:
        raise _ServerFailure(f"POST /prompt gave no prompt_id: {str(body)[:300]}")
    return body["prompt_id"]


@dataclass(frozen=True)
class _Watch:
    """One queued prompt being followed (what _follow needs besides the session and the socket)."""
    server: _Server
    prompt_id: str
    label: str
    started: float                  # time.monotonic() before the socket opened
    timeout: float | None           # seconds from then to the result
    poll_interval: float            # seconds of websocket silence before /history is asked
    on_event: Callable | None


# Websocket events that report progress (passed to on_event), and those that end a prompt.
_PROGRESS_EVENTS = ("execution_start", "executing", "progress", "executed", "execution_cached")
_END_EVENTS = {"execution_success": "success", "execution_error": "error", "execution_interrupted": "interrupted"}


async def _follow(session, ws, w: _Watch) -> dict:
    """Read the prompt's websocket events until it ends; its /history entry (or the failure raised)."""
    import aiohttp
    base, prompt_id = w.server.url, w.prompt_id
    finished: str | None = None   # "success" | "error" | "interrupted"
    failure: dict = {}
    while finished is None:
        if w.timeout is not None and time.monotonic() - w.started > w.timeout:
            # A hung server may still answer HTTP: take the prompt back so it can run elsewhere.
            await _cancel_on_server(session, base, prompt_id)
            raise _ServerFailure(f"timeout: no result {w.timeout:g} s after queueing prompt {prompt_id}; "
                                 "withdrawn from that server")
        try:
            msg = await ws.receive(timeout=w.poll_interval)
        except asyncio.TimeoutError:
            # A long node (model load, a VLM call) may send nothing for minutes: ask /history
            # directly; this also notices a server that died without closing the socket.
            entry = await _history(session, base, prompt_id)
            if entry is not None and (entry.get("status") or {}).get("completed") is not None:
                return _finish_from_history(entry, prompt_id)
            continue
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                        aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
            # The prompt may still have finished just before the drop: /history decides.
            entry = await _history(session, base, prompt_id)
            if entry is not None and entry.get("status") is not None:
                return _finish_from_history(entry, prompt_id)
            raise _ServerFailure(f"websocket closed while prompt {prompt_id} was running")
        event = _event_of(msg, prompt_id)
        if event is None:
            continue
        kind, data = event
        if kind == "executing" and data.get("node") is None and data.get("prompt_id") == prompt_id:
            finished = "success"   # ComfyUI's "queue item done" marker
        elif kind in _PROGRESS_EVENTS:
            _emit(w.on_event, base, w.label, kind, data)
        elif kind in _END_EVENTS:
            finished, failure = _END_EVENTS[kind], data
    if finished == "error":
        raise _ScenarioFailure("execution_error: " + _execution_message(failure))
    if finished == "interrupted":
        raise _ScenarioFailure("interrupted: " + _execution_message(failure))
    return await _stored_entry(session, base, prompt_id)


def _event_of(msg, prompt_id: str) -> tuple[str, dict] | None:
    """A text frame's (type, data) when it is about this prompt (or no prompt); None otherwise."""
    import aiohttp
    if msg.type != aiohttp.WSMsgType.TEXT:
        return None   # binary preview frames
    try:
        event = json.loads(msg.data)
    except json.JSONDecodeError:
        return None
    data = event.get("data") or {}
    if data.get("prompt_id") not in (None, prompt_id):
        return None
    return event.get("type"), data


async def _stored_entry(session, base: str, prompt_id: str) -> dict:
    """The /history entry of a prompt that just succeeded."""
    # execution_success comes just before the server stores the history entry: wait for it.
    for _ in range(50):
        entry = await _history(session, base, prompt_id)
        if entry is not None and entry.get("status") is not None:
            return _finish_from_history(entry, prompt_id)
        await asyncio.sleep(0.1)
    raise _ServerFailure(f"prompt {prompt_id} finished but /history/{prompt_id} never listed it")


async def _cancel_on_server(session, base: str, prompt_id: str) -> None:
    """Best effort, a few seconds at most: drop the prompt from the queue, stop it if running."""
    import aiohttp
    t = aiohttp.ClientTimeout(total=3)
    for path, body in (("/queue", {"delete": [prompt_id]}), ("/interrupt", {"prompt_id": prompt_id})):
        try:
            async with session.post(base + path, json=body, timeout=t):
                pass
        except Exception:   # the run is being cancelled anyway; the server may be gone
            pass


def _finish_from_history(entry: dict, prompt_id: str) -> dict:
    status = entry.get("status") or {}
    if status.get("status_str") == "error" or status.get("completed") is False:
        for name, data in status.get("messages") or []:
            if name in ("execution_error", "execution_interrupted"):
                kind = "execution_error" if name == "execution_error" else "interrupted"
                raise _ScenarioFailure(f"{kind}: " + _execution_message(data))
        raise _ScenarioFailure(f"execution_error: prompt {prompt_id} did not complete")
    return entry


async def _history(session, base: str, prompt_id: str) -> dict | None:
    import aiohttp
    try:
        async with session.get(f"{base}/history/{prompt_id}", timeout=aiohttp.ClientTimeout(total=30)) as resp:
            if resp.status >= 400:
                raise _ServerFailure(f"GET /history/{prompt_id} answered HTTP {resp.status}")
            body = await _json_or_text(resp)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise _ServerFailure(f"GET /history failed: {type(e).__name__}: {e}") from e
    return body.get(prompt_id) if isinstance(body, dict) else None


def _emit(on_event: Callable | None, server: str, label: str, kind: str, data: dict) -> None:
    if on_event is not None:
        on_event(server, label, kind, data)
    else:
        log.debug("%s %s %s %s", server, label, kind, data)


# --------------------------------------------------------------------------- scheduling

class _Pool:
    """Pending scenarios, shared by one worker per server.

    A retired server stays a candidate while it is being re-probed (it may come back); only a
    server given up counts as gone. Jobs of one group (a scenario's configs) go to the server
    that took the group's first job, so they run one after another there (ComfyUI reuses the
    cached outputs of the nodes they share); another server takes them only when that one is
    out of the run or has failed them."""

    def __init__(self, jobs: list[_Job], servers: list[_Server], max_attempts: int):
        self.pending = list(jobs)
        self.in_flight = 0
        self.servers = servers
        self.max_attempts = max_attempts
        self.failed: list[_Job] = []
        self.owner: dict[str, _Server] = {}
        self.cond = asyncio.Condition()

    @property
    def finished(self) -> bool:
        return not self.pending and not self.in_flight

    def _candidates(self, job: _Job, live_only: bool = False) -> list[_Server]:
        return [s for s in self.servers if not s.gave_up and not (live_only and s.retired is not None)
                and not job.refused_by(s.url)]

    def _sweep(self) -> None:
        """Give up on pending jobs no server (live or being re-probed) may take."""
        keep = []
        for job in self.pending:
            if len(job.attempts) >= self.max_attempts or not self._candidates(job):
                self.failed.append(job)
            else:
                keep.append(job)
        self.pending = keep

    def _free_for(self, job: _Job, server: _Server) -> bool:
        """Whether `server` may take `job` as far as grouping goes."""
        owner = self.owner.get(job.group)
        return owner is None or owner is server or owner.retired is not None or owner.gave_up or job.tried(owner.url)

    async def take(self, server: _Server) -> _Job | None:
        async with self.cond:
            while True:
                self._sweep()
                if server.retired is not None or self.finished:
                    self.cond.notify_all()
                    return None
                mine = [j for j in self.pending if not j.refused_by(server.url) and self._free_for(j, server)]
                # Prefer this server's own groups, then a new group; a job this server failed for
                # transport reasons only when no other live server could take it.
                fresh = [j for j in mine if not j.tried(server.url)]
                pick = next((j for j in fresh if self.owner.get(j.group) is server), None) or \
                    next(iter(fresh), None)
                if pick is None:
                    pick = next((j for j in mine if all(
                        s is server or j.tried(s.url) for s in self._candidates(j, live_only=True))), None)
                if pick is not None:
                    self.pending.remove(pick)
                    self.in_flight += 1
                    self.owner[pick.group] = server
                    return pick
                await self.cond.wait()

    async def settle(self, job: _Job, ok: bool) -> None:
        async with self.cond:
            self.in_flight -= 1
            if not ok:
                self.pending.append(job)
            self._sweep()
            self.cond.notify_all()

    async def wake(self) -> None:
        async with self.cond:
            self._sweep()
            self.cond.notify_all()

    async def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, or less when the pool changes (a job settles, a server returns)."""
        async with self.cond:
            try:
                await asyncio.wait_for(self.cond.wait(), timeout=max(0.0, seconds))
            except asyncio.TimeoutError:
                pass


@dataclass(frozen=True)
class QueueSettings:
    """How run_jobs uses the servers (run_remote takes them from RemoteOptions)."""
    timeout: float | None = None      # seconds from queueing to a prompt's result; then withdrawn, queued again
    poll_interval: float = 5.0        # seconds of websocket silence before /history is asked
    max_attempts: int = 3             # tries per job, over all servers
    max_server_failures: int = 2      # server failures in a row that retire a server
    server_grace: float = 0.0         # seconds a retired server is re-probed before it is given up
    reprobe_backoff: tuple[float, float] = (5.0, 300.0)   # re-probe pauses: first, longest (doubling)


@dataclass(frozen=True)
class _Run:
    """What every server's worker shares in one run_jobs call."""
    session: Any
    pool: _Pool
    summary: RemoteSummary
    class_types: set[str]                      # node types the prompts use (pre-flight)
    files: dict[str, list[str]]                # model files their loaders name (pre-flight)
    queue: QueueSettings
    on_event: Callable | None
    write_row: Callable[[_Job, dict, dict], None]
    check_rows: Callable[[_Job, list[dict]], str | None]


async def _reprobe(run: _Run, server: _Server) -> bool:
    """Probe a retired server with growing pauses until it answers and knows the workflow's nodes
    (True: it is back in the run), the run ends, or the grace period passes (False: given up)."""
    pool, on_event = run.pool, run.on_event
    delay, cap = run.queue.reprobe_backoff
    while True:
        left = server.retired_at + run.queue.server_grace - time.monotonic()
        # One that never answered in this run (a wrong URL, a server not started) is waited for
        # only while another server works.
        hopeless = not server.answered and all(s.retired is not None for s in pool.servers)
        if pool.finished or left <= 0 or hopeless:
            if not pool.finished:
                server.gave_up = True
                _emit(on_event, server.url, "", "server_given_up", {"reason": server.retired})
                await pool.wake()
            return False
        await pool.wait(min(delay, left))
        if pool.finished:
            return False
        delay = min(delay * 2, cap)
        try:
            await _check_nodes(run.session, server, run.class_types, timeout=30, files=run.files)
        except (_ServerFailure, _ScenarioFailure) as e:
            log.info("server %s still out: %s", server.url, e)
            continue
        server.retired, server.failures_in_row, server.answered = None, 0, True
        server.returns += 1
        _emit(on_event, server.url, "", "server_back", {"returns": server.returns})
        await pool.wake()
        return True


async def _worker(run: _Run, server: _Server) -> None:
    """One server's loop: pre-flight, then take jobs from the pool until none is left for it
    (re-probing the server while it is retired)."""
    await _preflight(run, server)
    while True:
        if server.retired is not None:
            if await _reprobe(run, server):
                continue
            return
        job = await run.pool.take(server)
        if job is None:
            if server.retired is not None:
                continue
            return
        _emit(run.on_event, server.url, job.scenario_id, "start", {"attempt": len(job.attempts) + 1})
        try:
            rows, prompt_id = await _attempt(run, server, job)
        except _ServerFailure as e:
            _server_failed(run, server, job, str(e))
            await run.pool.settle(job, ok=False)
            continue
        except _ScenarioFailure as e:
            msg = str(e)
            kind = msg.split(":", 1)[0] if msg.split(":", 1)[0] in (
                "rejected", "execution_error", "interrupted", "no_row") else "rejected"
            job.attempts.append(Attempt(server.url, kind, msg))
            server.failures_in_row = 0   # the server itself answered properly
            _emit(run.on_event, server.url, job.scenario_id, "retry", {"reason": msg})
            await run.pool.settle(job, ok=False)
            continue
        server.failures_in_row = 0
        info = {"server": server.url, "prompt_id": prompt_id, "attempt": len(job.attempts) + 1}
        for row in rows:
            run.write_row(job, row, info)
        server.done += 1
        run.summary.done.append(job.scenario_id)
        _emit(run.on_event, server.url, job.scenario_id, "done", {"rows": rows, "prompt_id": prompt_id})
        await run.pool.settle(job, ok=True)


async def _preflight(run: _Run, server: _Server) -> None:
    """Check the server before its first job; a server that fails is retired (and re-probed)."""
    try:
        await _check_nodes(run.session, server, run.class_types, timeout=30, files=run.files)
        server.answered = True
    except (_ServerFailure, _ScenarioFailure) as e:
        server.retire(str(e))
        log.warning("server %s left out: %s", server.url, e)
        _emit(run.on_event, server.url, "", "server_retired", {"reason": str(e)})
        await run.pool.wake()


async def _attempt(run: _Run, server: _Server, job: _Job) -> tuple[list[dict], str]:
    """Run one job on one server: the rows its results writer reported (checked), and the prompt id."""
    q = run.queue
    entry, prompt_id = await _run_prompt(run.session, server, job.prompt, timeout=q.timeout,
                                         poll_interval=q.poll_interval, on_event=run.on_event,
                                         label=job.scenario_id)
    rows = rows_from_history(entry, job.prompt)
    if not rows:
        raise _ScenarioFailure(f"no_row: the workflow finished but its {RESULTS_WRITER} node "
                               f"reported no row (outputs of nodes {sorted(entry.get('outputs') or {})})")
    problem = run.check_rows(job, rows)
    if problem:
        raise _ScenarioFailure(f"no_row: {problem}")
    return rows, prompt_id


def _server_failed(run: _Run, server: _Server, job: _Job, msg: str) -> None:
    """Record a server failure of `job`; retire the server after too many in a row."""
    kind = next((k for k in ("unreachable", "timeout") if msg.startswith(k)), "server_error")
    job.attempts.append(Attempt(server.url, kind, msg))
    server.failures_in_row += 1
    if server.failures_in_row >= run.queue.max_server_failures:
        server.retire(f"{server.failures_in_row} failure(s) in a row, last: {msg}")
        log.warning("server %s left out: %s", server.url, server.retired)
        _emit(run.on_event, server.url, job.scenario_id, "server_retired", {"reason": server.retired})
    _emit(run.on_event, server.url, job.scenario_id, "retry", {"reason": msg})


async def run_jobs(jobs: Iterable[tuple], servers: list[str],
                   write_row: Callable[[int, str, dict, dict], None], queue: QueueSettings = QueueSettings(), *,
                   on_event: Callable | None = None,
                   check_rows: Callable[[int, str, list[dict]], str | None] | None = None) -> RemoteSummary:
    """Run filled prompts `(index, label, prompt[, group])` on `servers`.

    `write_row(index, label, row, info)` is called once per reported row as each prompt finishes
    (info: server, prompt_id, attempt); `check_rows(index, label, rows)` may refuse the rows
    (return the reason) before anything is written, which counts as a failed attempt.
    `queue.timeout`: seconds a prompt may take from queueing to its result; then it is withdrawn from
    that server and queued again (a server failure). A server retired after `queue.max_server_failures`
    failures in a row is re-probed for `queue.server_grace` seconds (pauses growing from
    `queue.reprobe_backoff[0]` to `[1]`) and used again when it answers. Jobs sharing a
    `group` run on one server when possible.
    `on_event(server, label, kind, data)` sees every step (queued, execution_start, executing,
    progress, executed, done, retry, server_retired, server_back, server_given_up)."""
    import aiohttp
    urls = [_normalise_url(u) for u in servers]
    if not urls:
        raise InputError("no server given: pass at least one ComfyUI URL (--server http://host:8188)")
    if len(set(urls)) != len(urls):
        raise InputError(f"a server is listed twice: {urls}")
    if queue.max_attempts < 1:
        raise InputError("max_attempts must be at least 1")
    job_list = [_Job(j[0], j[1], j[2], group=str(j[3]) if len(j) > 3 else j[1]) for j in jobs]
    state = [_Server(u, client_id=uuid.uuid4().hex) for u in urls]
    pool = _Pool(job_list, state, queue.max_attempts)
    summary = RemoteSummary()
    started = time.monotonic()

    def _write(job: _Job, row: dict, info: dict) -> None:
        write_row(job.index, job.scenario_id, row, info)

    def _check(job: _Job, rows: list[dict]) -> str | None:
        return check_rows(job.index, job.scenario_id, rows) if check_rows is not None else None

    async with aiohttp.ClientSession() as session:
        run = _Run(session, pool, summary, {n["class_type"] for j in job_list for n in j.prompt.values()},
                   model_files(j.prompt for j in job_list), queue, on_event, _write, _check)
        await asyncio.gather(*(_worker(run, s) for s in state))
    pool._sweep()
    for job in pool.failed + pool.pending:
        summary.failed[job.scenario_id] = list(job.attempts)
    summary.per_server = {s.url: s.done for s in state}
    summary.retired = {s.url: s.retired for s in state if s.retired}
    summary.returned = {s.url: s.returns for s in state if s.returns}
    summary.seconds = time.monotonic() - started
    return summary


def _normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url


# --------------------------------------------------------------------------- the benchmark, remotely


def _print_event(server: str, label: str, kind: str, data: dict) -> None:
    if kind == "start":
        print(f"  [{server}] {label}: started (attempt {data.get('attempt')})", flush=True)
    elif kind == "done":
        row = (data.get("rows") or [{}])[0]
        s_tc = row.get("S_TC")
        print(f"  [{server}] {label}: done  S_TC={'NaN' if s_tc is None else f'{s_tc:.3f}'}  "
              f"VLM calls={row.get('vlm_calls')}", flush=True)
    elif kind == "retry":
        print(f"  [{server}] {label}: failed, will retry elsewhere if possible: {data.get('reason')}", flush=True)
    elif kind == "server_retired":
        print(f"  [{server}] server left out of the run: {data.get('reason')}", flush=True)


@dataclass
class RemoteOptions:
    """How a remote run queues: the workflow (`route`'s shipped one per config, else `workflow` for
    every config, with `config`'s widget overrides, see workflow.fill_workflow) and how servers
    are used (see run_remote and run_jobs)."""
    route: str = "native"
    workflow: str | Path | dict | None = None
    config: dict[str, Any] | None = None
    timeout: float | None = DEFAULT_PROMPT_TIMEOUT
    poll_interval: float = 5.0
    max_attempts: int = 3
    max_server_failures: int = 2
    server_grace: float = DEFAULT_SERVER_GRACE

    def queue_settings(self) -> QueueSettings:
        """The server-use part, for run_jobs."""
        return QueueSettings(timeout=self.timeout, poll_interval=self.poll_interval, max_attempts=self.max_attempts,
                             max_server_failures=self.max_server_failures, server_grace=self.server_grace)


# The settings of BenchSettings.IDENTITY that a queued workflow takes from the run (scenario_prompt
# fills them in); the others are the workflow's own widgets, recorded by its digest.
WORKFLOW_SETTINGS = ("dataset_name", "seed", "size", "steps")


def remote_identity(settings: BenchSettings, dataset_name: str, reference: dict[str, dict], route: str) -> dict:
    """What decides a remote run's numbers: the settings the in-process runner records too
    (BenchSettings.identity, those a workflow takes), the rows' editor label and route, a digest of
    the prompt each config queues (on a reference scenario) and the model files the loaders name.
    One key per config and per loader input, so a resume may add configs."""
    ident = {**settings.identity(dataset_name, WORKFLOW_SETTINGS), "editor": row_editor(settings.editor, route),
             "route": route}
    for c, p in reference.items():
        ident[f"workflow:{c}"] = hashlib.sha256(json.dumps(p, sort_keys=True, default=str).encode()).hexdigest()[:16]
    for c, p in reference.items():
        for key, names in model_files([p]).items():
            ident[f"model:{key}"] = sorted(set(ident.get(f"model:{key}", [])) | set(names))
    return ident


def run_remote(settings: BenchSettings, servers: list[str], opts: RemoteOptions | None = None, *,
               on_event: Callable | None = None, quiet: bool = False) -> RemoteSummary:
    """Run the OCCUR benchmark of `settings` (dataset, out, configs, editor, seed, size, steps,
    limit, scenario ids) by queueing its API workflow to running ComfyUI servers.

    One prompt per scenario x config: the shipped benchmark workflow of the editor on `opts.route`
    ("native": ComfyUI's own loaders, rows labelled "<editor>-native"; "diffusers": the pack's
    paper-exact editors) (the baseline graph for the baseline config), or `opts.workflow` for every
    config. Rows go to `<out>/results.jsonl` (the in-process runner's file and layout) as each
    prompt finishes; rows already there are skipped, so re-running resumes. Seeds follow the
    in-process runner (`configs.turn_seed`), so both give the same editor seeds. `opts.config` adds
    widget overrides (see workflow.fill_workflow). Scenarios that fail everywhere go to
    `<out>/errors.jsonl` and end the run with a RemoteBenchError once everything else is done;
    Ctrl-C stops at once, keeping the rows written so far (`summary.interrupted`).

    A prompt without a result `opts.timeout` seconds after queueing is withdrawn and queued again
    (elsewhere when possible); a server taken out after failures is re-probed for
    `opts.server_grace` seconds. What decides the numbers (remote_identity) is recorded in
    <out>/run.json and a resume with other values is refused; every server must list the model
    files the workflows name. Jobs go scenario by scenario, and a scenario's configs run on one server.
    """
    from .results import ResultsFile, check_run_identity
    from .runner import default_out_dir, select_scenarios
    from ..occur.scenario import load_dataset

    opts = opts or RemoteOptions()
    settings = _checked_for_remote(settings, opts)
    label = row_editor(settings.editor, opts.route)
    ds = load_dataset(settings.dataset)
    scenarios = select_scenarios(ds, settings)
    out_dir = Path(settings.out or default_out_dir(ds.name, settings.smoke, settings.editor))
    out_dir.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out_dir / "results.jsonl")
    prompt_for = _Prompts(settings, opts, ds, label)
    # What each config queues, shown on the dataset's first scenario: recorded, compared on resume.
    reference = {c: prompt_for(c, next(iter(ds)).id) for c in settings.configs}
    check_run_identity(out_dir, remote_identity(settings, ds.name, reference, opts.route),
                       {"dataset_path": ds.path, "servers": list(servers), "mode": "remote"})
    jobs, expected, skipped = _remote_jobs(ds, scenarios, settings.configs, label,
                                           results.done_keys(), prompt_for)
    if not quiet:
        print(f"OCCUR bench on {len(servers)} server(s): {len(jobs)} prompt(s) to run, "
              f"{len(skipped)} already in {results.path}", flush=True)
    events = on_event if on_event is not None else (None if quiet else _print_event)
    try:
        summary = asyncio.run(run_jobs(jobs, servers, _row_writer(results), opts.queue_settings(), on_event=events,
                                       check_rows=_check_remote_rows))
    except KeyboardInterrupt:
        # Rows are written as prompts finish; nothing else to save. Running prompts were withdrawn.
        summary = RemoteSummary(interrupted=True)
        summary.done = [k for k in (r.get("key") for r in results.rows()) if k in expected]
        if not quiet:
            print(f"Interrupted: finished scenarios are in {results.path}; run the same command to resume.")
    summary.skipped = skipped
    _record_failed(summary, expected, ResultsFile(out_dir / "errors.jsonl"), ds.name, label)
    if summary.failed:
        raise RemoteBenchError(summary)
    return summary


def _record_failed(summary: RemoteSummary, expected: dict, errors, dataset_name: str, label: str) -> None:
    """One errors.jsonl entry per key that failed everywhere, with every attempt's server, kind and message."""
    for key, attempts in summary.failed.items():
        errors.append({"dataset": dataset_name, "scenario_id": expected[key].id, "config": key.split("|")[2],
                       "editor": label, "key": f"{key}|{time.time():.0f}", "status": "error", "source": "remote",
                       "error": "; ".join(f"{a.server} [{a.kind}] {a.message}" for a in attempts)
                       or "never sent: no usable server was left"})


def _checked_for_remote(settings: BenchSettings, opts: RemoteOptions) -> BenchSettings:
    """The checked settings; refuses what a queued workflow cannot do (smoke models, the judge, a route)."""
    if settings.smoke:
        raise InputError("--smoke runs tiny random-weight models in-process; a ComfyUI server runs the "
                         "workflow's real models. Drop --server for a smoke run, or drop --smoke.")
    if settings.judge:
        raise InputError("the shipped benchmark workflows have no S_IF judge; run the judge in-process "
                         "(without --server), or pass a workflow of your own with the judge wired in")
    settings = settings.checked()
    if opts.route not in ROUTES:
        raise InputError(f"unknown route {opts.route!r}; use one of {', '.join(ROUTES)}")
    return settings


class _Prompts:
    """`prompts(config, scenario_id)`: the filled API prompt one job queues (each workflow file read once)."""

    def __init__(self, settings: BenchSettings, opts: RemoteOptions, ds, label: str):
        self.settings, self.opts, self.ds, self.label = settings, opts, ds, label
        self.templates: dict[str, dict] = {}
        self.strict = opts.workflow is None or bool(opts.config)

    def __call__(self, c: str, sid: str) -> dict:
        opts, settings = self.opts, self.settings
        source = opts.workflow if opts.workflow is not None else default_workflow(c, settings.editor, opts.route)
        key_src = "given" if opts.workflow is not None else str(source)
        if key_src not in self.templates:
            self.templates[key_src] = load_api_workflow(source)
        return scenario_prompt(self.templates[key_src], self.ds, sid, c, self.label, seed=settings.seed,
                               size=settings.size, steps=settings.steps, overrides=opts.config, strict=self.strict)


def _remote_jobs(ds, scenarios, configs, label: str, done: set, prompt_for: _Prompts) -> tuple[list, dict, list]:
    """The jobs to queue (index, key, prompt, scenario id), the scenario each key expects, and the keys
    already done. Scenario by scenario, so a scenario's configs are queued together (and go to one server)."""
    from .results import row_key
    jobs, expected, skipped = [], {}, []
    for s in scenarios:
        index = next(i for i, x in enumerate(ds) if x.id == s.id)
        for c in configs:
            key = row_key({"dataset": ds.name, "scenario_id": s.id, "config": c, "editor": label})
            if key in done:
                skipped.append(key)
                continue
            expected[key] = s
            jobs.append((index, key, prompt_for(c, s.id), s.id))
    return jobs, expected, skipped


def _check_remote_rows(index: int, key: str, rows: list[dict]) -> str | None:
    """run_jobs' row check: the workflow must report the row of the key it was queued for."""
    from .results import row_key
    keys = [r.get("key") or row_key(r) for r in rows]
    if key not in keys:
        return (f"the workflow reported {keys}, expected {key}: is its {RESULTS_WRITER} set to this "
                f"config/editor, and does the server's dataset match?")
    return None


def _row_writer(results) -> Callable[[int, str, dict, dict], None]:
    """run_jobs' write_row: the job's own row, with where it ran, appended to `results`."""
    from ..records import json_safe
    from .results import row_key

    def write_row(index: int, key: str, row: dict, info: dict) -> None:
        if (row.get("key") or row_key(row)) != key:
            return
        row = {k: v for k, v in row.items() if k != "written"}
        row["remote"] = {"server": info["server"], "prompt_id": info["prompt_id"], "attempt": info["attempt"]}
        results.append(json_safe(row))
    return write_row
