"""The OCCUR benchmark loop, in-process (paper §5.1, appendix C.1).

For each scenario and each configuration, every turn t is one call of respec.turn.run_turn

    restoration flag (the scenario's ground truth, as the paper's runner) -> plan -> select
    references -> rewrite -> edit -> append

with the config's switches; then the final image is scored: occluder / new-object masks on
the generated images I_1..I_N, OCCUR scores of I_N against I_ref (the *generated* history's
image at the scenario's reference_turn), optionally the S_IF judge, and a results row is
appended to results.jsonl.

Configurations (paper table 2):

    baseline  no ReSpec: the user's instruction and the current image only (no VLM call)
    hrs       + HRS: the editor gets the plan's historical reference, with the user's instruction
              (non-restoration turns make no VLM call: nothing of theirs would be used)
    pti       + PTI: the rewritten instruction, with the current image only
    respec    + PTI + HRS: the full method

A re-run with the same output folder skips the scenario x config x editor rows already written.
"""
from __future__ import annotations

import logging
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from .. import comfy
from ..errors import DownloadNotAllowedError, InputError, Interrupted, MissingWeightsError
from ..history import History
from ..models import TINY
from ..occur.scenario import Dataset, Scenario, load_dataset
from ..timing import StageTimer
from ..turn import TimingHook, TurnParts, run_turn
from ..controller.provenance_selector import selector_parts
from ..post_edit.guard_step import GuardStep
from ..post_edit.reveal_step import RevealStep
from ..pixels.undo import UNDO_SOURCE
from ..store.files import save_png
from .configs import CONFIGS, BenchConfig, turn_seed
from .results import ResultsFile, check_run_identity, row_key
from .rows import RowRun, make_row, summarise_judgements
from .settings import BenchModels, BenchSettings
from .shards import parse_shard

log = logging.getLogger("respec.bench")
STAGE_KEYS = ("controller", "select", "rewrite", "editor", "masks", "score", "judge")


@dataclass
class RunSummary:
    """What a call to run_benchmark did."""
    out: str
    results: str
    done: list[str] = field(default_factory=list)      # keys written now
    skipped: list[str] = field(default_factory=list)   # keys already in the results file
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False
    retried: dict[str, list[str]] = field(default_factory=dict)   # scenario id -> why each try failed (Ray)
    # edits / controller calls actually run, and those answered from the shared prefix
    work: dict[str, int] = field(default_factory=lambda: {"edits_run": 0, "edits_shared": 0,
                                                          "vlm_calls_run": 0, "vlm_calls_shared": 0})

    def add_work(self, counts: dict[str, int]) -> None:
        """Add one row's work counts (edits run, controller calls, ...) to the run's totals."""
        for k, v in counts.items():
            self.work[k] = self.work.get(k, 0) + int(v)


# ------------------------------------------------------------------------------ models

def _stage_checks(settings: BenchSettings) -> list[tuple[str, Callable[[], Any]]]:
    """(stage, a function that finds that stage's files without loading them) in pipeline order:
    controller, editor, masks, scores. Stages that need no file here (the sim world's parts, the
    tiny models of a smoke run, a remote controller) have none."""
    from .. import models as mdl
    checks: list[tuple[str, Callable[[], Any]]] = []
    if settings.smoke:
        return checks
    sim = settings.editor == "sim"
    wants_vlm = any(CONFIGS[c].needs_vlm for c in settings.configs if c in CONFIGS) or (
        settings.judge and not settings.judge_controller)
    if wants_vlm and settings.controller != "openai" and (settings.controller_model or not sim):
        from ..controller import DEFAULT_MODELS
        from ..controller.backends.transformers_vlm import resolve_model_dir
        model = settings.controller_model or DEFAULT_MODELS.get(settings.controller, "")
        checks.append(("controller", lambda: resolve_model_dir(settings.controller, model, allow_download=False)))
    if settings.editor == "flux2":
        from ..editors import flux2
        checks.append(("editor", lambda: _flux2_files(flux2, settings.editor_model or flux2.DEFAULT_SOURCE)))
    elif settings.editor == "omnigen2":
        from ..editors import omnigen2
        checks.append(("editor", lambda: mdl.resolve_hf(settings.editor_model or omnigen2.DEFAULT_SOURCE, "diffusers",
                                                       False, omnigen2.HOW_TO_GET)))
    from ..eval import masks as mk
    from ..eval import metric_models as mm
    o = settings.masker_options
    if settings.masks_mode() == "detect":
        sam = o.get("sam_weights") or mk.SAM_FILES.get(o.get("sam_type", "vit_h"), "")
        checks.append(("masks", lambda: mdl.resolve_path("ultralytics", o.get("yolo_weights", mk.DEFAULT_YOLO),
                                                         mk.HOW_TO_GET_YOLO, want="file")))
        checks.append(("masks", lambda: mdl.resolve_path("sams", sam, mk.HOW_TO_GET_SAM.format(name=sam), want="file")))
        checks.append(("masks", lambda: mm.resolve_clip(o.get("clip_weights", mm.DEFAULT_CLIP), allow_download=False)))
    if not sim:   # the sim world scores with the tiny random LPIPS + CLIP when their files are absent
        so = settings.scorer_options
        checks.append(("scores", lambda: mm.resolve_lpips_trunk(so.get("lpips_trunk", mm.DEFAULT_LPIPS_TRUNK),
                                                                 allow_download=False)))
        checks.append(("scores", lambda: mm.resolve_clip(so.get("clip_weights", mm.DEFAULT_CLIP), allow_download=False)))
    return checks


def _flux2_files(flux2: Any, source: str) -> None:
    folder = flux2.resolve_source(source, False, configs_only=False)
    for part in ("transformer", "text_encoder", "vae"):
        if not flux2._weights_present(folder / part):
            raise MissingWeightsError(f"{part} weights of the FLUX.2 pipeline {source}", [str(folder / part)],
                                      flux2.HOW_TO_GET)


def missing_model_files(settings: BenchSettings) -> list[tuple[str, MissingWeightsError]]:
    """Every file the run's stages need that is not there, in pipeline order (controller, editor,
    masks, scores), found without loading anything; [] when all are there (or downloads are
    allowed: then the loaders fetch what is missing)."""
    from .. import models as mdl
    allow = any(o.get("allow_download") for o in (settings.controller_options, settings.editor_options,
                                                   settings.masker_options, settings.scorer_options))
    if mdl.downloads_allowed(True if allow else None):
        return []
    found: list[tuple[str, MissingWeightsError]] = []
    seen: set[str] = set()
    for stage, check in _stage_checks(settings):
        try:
            check()
        except (MissingWeightsError, DownloadNotAllowedError) as e:
            # "Downloads are off" wraps the MissingWeightsError that says what and where.
            err = e if isinstance(e, MissingWeightsError) else e.__context__
            if not isinstance(err, MissingWeightsError):
                err = MissingWeightsError(str(e).splitlines()[0], [], str(e))
            if err.what not in seen:     # one CLIP for masks and scores
                seen.add(err.what)
                found.append((stage, err))
    return found


def _where_hint(text: str) -> str:
    """A loader's how-to-get sentence with the folder this process reads (outside ComfyUI the
    standalone models folder, not ComfyUI/models)."""
    import re
    if comfy.in_comfyui():
        return text
    base = str(comfy.standalone_models_dir())
    text = re.sub(r"\s*\(or RESPEC_MODELS_DIR/[\w]+/\)", "", text)
    return re.sub(r"<?ComfyUI>?/models/", base.rstrip("/") + "/", text)


def check_model_files(settings: BenchSettings) -> None:
    """Raise one MissingWeightsError listing every missing file of the run (missing_model_files),
    with where to put them for this process: ComfyUI's models folder inside ComfyUI, else the
    standalone models folder and the variable that moves it."""
    missing = missing_model_files(settings)
    if not missing:
        return
    lines = []
    for i, (stage, err) in enumerate(missing, 1):
        lines.append(f"  {i}. {stage}: {err.what}\n     looked in: {', '.join(err.looked_in) or '(nowhere)'}\n"
                     f"     how to get it: {_where_hint(err.how_to_get)}")
    if comfy.in_comfyui():
        where = "Put each into ComfyUI's models folder (the subfolder named above), then run again"
    else:
        where = (f"Put each into {comfy.standalone_models_dir()} (the subfolder named above; set RESPEC_MODELS_DIR "
                 f"to use another folder holding LLM/, diffusers/, ultralytics/, sams/, respec_metrics/), or add "
                 f"--allow-download; then run again")
    raise MissingModelFiles(missing, f"Missing model files: {len(missing)} that this run needs are not there "
                                     f"(nothing was loaded):\n" + "\n".join(lines) + f"\n{where}.")


class MissingModelFiles(MissingWeightsError):
    """Every missing file of a run at once (check_model_files); `missing` holds (stage, error)."""

    def __init__(self, missing: list[tuple[str, MissingWeightsError]], message: str):
        Exception.__init__(self, message)
        self.missing = missing
        self.what = "; ".join(e.what for _, e in missing)
        self.looked_in = [p for _, e in missing for p in e.looked_in]
        self.how_to_get = message


ModelLoader = Callable[[BenchSettings], BenchModels]   # settings -> the run's models (the sim world's loader)


def load_models(settings: BenchSettings, sim_world: ModelLoader | None = None) -> BenchModels:
    """The run's models, each asked of its stage with the run's model source: the simulated world
    (--editor sim), the tiny random-weight models (--smoke: source "tiny:<seed>" for every stage)
    or the real ones (files, folders and hub ids from the settings). Smallest first, so that a
    missing file is reported before minutes go into loading the big ones; before any, the checks
    that need no file (BenchSettings.checked), then every missing file of every stage listed in
    one error (check_model_files).

    `sim_world`: the simulated world's loader (respec.bench.sim_models.load_sim_models), which a run with
    --editor sim needs. The caller hands it over so that the runner stays free of respec/sim: only
    that adapter reaches into the simulated world (respec/sim imports nothing of respec/bench; both
    stand on the OCCUR data model, respec/occur/)."""
    settings = settings.checked()
    check_model_files(settings)
    if settings.editor == "sim":
        if sim_world is None:
            raise TypeError("--editor sim needs the simulated world's loader: call load_models / run_benchmark / "
                            "run_ray with sim_world=respec.bench.sim_models.load_sim_models (python -m respec bench does)")
        return sim_world(settings)
    from ..controller import DEFAULT_MODELS, load_backend
    from ..editors import load_editor
    from ..eval.masks import DetectSettings, load_masker
    from ..eval.metric_models import load_scorer

    tiny = f"{TINY}:{settings.seed}" if settings.smoke else None
    scorer = load_scorer(source=tiny, **settings.scorer_options)
    masker_options = dict(settings.masker_options)
    detect = DetectSettings.take(masker_options)
    if tiny and "imgsz" not in settings.masker_options:
        # Detect at about the image's own size: ultralytics' default 640 px would dominate a smoke run.
        detect = replace(detect, imgsz=min(640, max(64, -(-int(settings.size or 640) // 32) * 32)))
    masker = load_masker(source=tiny, detect=detect, **masker_options)
    kind = "qwen3-vl" if tiny else settings.controller
    model = tiny or settings.controller_model
    # A smoke run checks the whole install: its tiny controller is loaded (and judges) whatever the configs.
    backend = judge = None
    own_judge = settings.judge and not settings.judge_controller
    if tiny or own_judge or any(CONFIGS[c].needs_vlm for c in settings.configs):
        backend = load_backend(kind, model, **({"max_new_tokens": 48} if tiny else {}), **settings.controller_options)
    if tiny or own_judge:
        judge = backend
    elif settings.judge:
        judge = load_backend(settings.judge_controller, settings.judge_model)
    editor = load_editor(settings.editor, tiny or settings.editor_model, **settings.editor_options)
    if tiny:
        describe = {"controller": "qwen3-vl (tiny)", "editor_model": "flux2-klein (tiny)",
                    "masker": "yolo-world+sam (tiny)", "scorer": "lpips+clip (tiny)"}
    else:
        model = settings.controller_model or DEFAULT_MODELS.get(settings.controller, "")
        describe = {"controller": f"{settings.controller}:{Path(model).name or model}",
                    "editor_model": getattr(editor, "name", settings.editor),
                    "masker": getattr(masker, "name", type(masker).__name__),
                    "scorer": getattr(scorer, "name", type(scorer).__name__)}
    return BenchModels(editor=editor, backend=backend, masker=masker, scorer=scorer, judge_backend=judge,
                       describe=describe)


# ------------------------------------------------------------------------------ one scenario


def run_turns(scenario: Scenario, config: BenchConfig, models: BenchModels, settings: BenchSettings,
              image=None, timing: TimingHook | None = None) -> History:
    """Run every turn of a scenario under one config (a loop over respec.turn.run_turn); return the
    generated history (each turn's meta holds its record: seed, stage, editor image ids, VLM
    calls, fallbacks and per-stage seconds)."""
    history = History.start(image if image is not None else scenario.load_image(settings.size or None),
                            meta={"scenario": scenario.id, "config": config.name})
    planner, selector = selector_parts(config.selector, history_mode=settings.controller_history)
    post_edit = ([RevealStep()] if config.reveal else []) + ([GuardStep()] if config.guard else [])
    fidelity_step = getattr(models.editor, "edit_fidelity_step", None)   # the sim editor's (docs/sim.md)
    if config.guard and fidelity_step is not None:
        post_edit.append(fidelity_step(scenario))   # a measurement: it leaves the image unchanged
    parts = TurnParts(editor=models.editor, backend=models.backend, planner=planner, selector=selector,
                      post_edit=post_edit, timing=timing)
    for t, turn in enumerate(scenario.turns, start=1):
        comfy.check_interrupted()
        tell_editor_the_turn(models.editor, scenario, t)
        record, history = run_turn(history, turn.instruction, parts, config.switches,
                                   is_restoration=scenario.is_restoration(t),
                                   seed=turn_seed(settings.seed, scenario.id, t), steps=settings.steps,
                                   guidance=settings.guidance, plan_meta={"restoration_flag": "ground_truth"},
                                   meta={"stage": turn.stage})
        if not record.editor_was_run:      # history first answered: no edit, the sim is told what was kept
            tell_editor_history_answered(models.editor, scenario, history, record)
        elif record.image is not record.edited:
            # The Drift Guard's output is in I_(t-1)'s frame, not the edit's (respec/pixels/guard/).
            guarded = any(e.get("step") == "drift_guard" and e.get("applied") for e in record.post_edit)
            tell_editor_the_derived_image(models.editor, scenario, history.current.image, record.edited,
                                          frame_of=history.turns[-2].image if guarded else None)
    return history


def tell_editor_the_derived_image(editor: Any, scenario: Scenario, image: Any, edited: Any,
                                  frame_of: Any = None) -> None:
    """A post-edit step (Reveal Composite, the Drift Guard) changed the simulated editor's output:
    the sim editor is told, so the new image keeps that output's ground truth (real editors have no
    such hook); `frame_of`: an image whose frame (zoom / shift) the new image is in, when not the
    edit's (the guard returns I_(t-1)'s frame)."""
    register = getattr(editor, "register_derived", None)
    if register is not None:
        if frame_of is None:
            register(scenario, image, edited)
        else:
            register(scenario, image, edited, frame_of=frame_of)


def tell_editor_history_answered(editor: Any, scenario: Scenario, history: History, record: Any) -> None:
    """History first answered the turn just appended to `history` (no edit ran): the sim editor is
    told which image was kept, from which images (I_(t-1), I_(k-1)) and where (the undo_source mask),
    so it keeps that image's ground truth; real editors have no such hook."""
    register = getattr(editor, "register_from_history", None)
    if register is None:
        return
    entry = next(e for e in record.post_edit if e.get("step") == "history_undo")
    region = history.current.masks[UNDO_SOURCE].mask
    register(scenario, history.current.image, history.turns[-2].image, history.image(int(entry["source_id"])), region)


def tell_editor_the_turn(editor: Any, scenario: Scenario, t: int) -> None:
    """The simulated editor executes scenario turns, so it is told which one comes next
    (docs/sim.md); real editors have no such hook and get only images and an instruction."""
    begin = getattr(editor, "begin_turn", None)
    if begin is not None:
        begin(scenario, t)


def trajectory_masks(masker: Any, scenario: Scenario, images: list):
    """Occluder and new-object masks of I_1..I_N (the masker looks, at turn t, for every object
    introduced at turns <= t). With several occluders (a 'multi' revelation) each is detected
    on its own (one query per label, as the paper does) and their masks are united per turn."""
    if len(images) != scenario.num_turns:
        raise InputError(f"scenario {scenario.id!r} has {scenario.num_turns} turns but {len(images)} edited "
                         f"images were given; the history must hold exactly the scenario's turns")
    per_turn_new = [list(t.new_objects) for t in scenario.turns]
    first = masker.trajectory_masks(images, scenario.occluders[0], per_turn_new)
    if len(scenario.occluders) == 1:
        return first
    occ = [m.copy() for m in first.occ]
    records = [dict(r) for r in first.records]
    for label in scenario.occluders[1:]:
        # New objects were already masked in the first pass; only the occluder is looked for.
        extra = masker.trajectory_masks(images, label, [[] for _ in images])
        for i, m in enumerate(extra.occ):
            occ[i] = occ[i] | m
            if i < len(records) and i < len(extra.records):
                records[i].setdefault("other_occluders", {})[label] = extra.records[i].get("occluder")
    return replace(first, occ=occ, records=records, occluder_label=scenario.occluder)


def score_scenario(scenario: Scenario, history: History, models: BenchModels,
                   seconds: dict[str, float] | None = None, shared: Any = None, config: str = "") -> dict:
    """Masks on the generated images, then the OCCUR score of I_N against the generated I_ref
    (each stage's seconds added to `seconds` when given). shared: a SharedPrefix whose configs'
    identical (I_N, I_ref, masks) share one score ("scores_shared_with": the config scored first)."""
    stage = StageTimer(seconds).measure
    generated = [im.rgb() for im in history.images[1:]]
    with stage("masks"):
        if models.masks == "oracle":   # the layers the sim editor recorded: the exact A.5 regions
            masks = models.editor.oracle_masks(scenario, generated)
        else:
            masks = trajectory_masks(models.masker, scenario, generated)
    ref = history.image(scenario.reference_turn).rgb()
    shared_with = None
    with stage("score"):
        if shared is None:
            score = models.scorer.occur_score(generated[-1], ref, masks)
        else:
            score, shared_with = shared.score(history.images[-1].digest, history.image(scenario.reference_turn).digest, masks,
                                              config, lambda: models.scorer.occur_score(generated[-1], ref, masks))
    truth = getattr(models.editor, "truth", None)
    true_reference = truth(scenario, generated[-1]).reference_turn if truth is not None else None
    untouched = None
    untouched_psnr = getattr(models.editor, "untouched_psnr", None)
    if untouched_psnr is not None:   # the sim's exact ground truth: I_0 where no turn's edit touched
        untouched = untouched_psnr(scenario, history.image(0).array, history.current.image.array)
    return {"score": score, "masks": masks, "true_reference": true_reference, "untouched_psnr": untouched,
            "scores_shared_with": shared_with}


def judge_turns(history: History, judge_backend: Any, seconds: dict[str, float] | None = None,
                max_new_tokens: int | None = None) -> dict:
    """S_IF of every turn (the judge's 0-3 grade / 3); the row's S_IF is the mean over turns
    (appendix B.2 uses the mean so that longer scenarios are not favoured)."""
    from ..eval.judge import judge_instruction
    stage = StageTimer(seconds).measure
    opts = {"max_new_tokens": int(max_new_tokens)} if max_new_tokens else {}
    per_turn, calls = [], 0
    for t in range(1, len(history)):
        comfy.check_interrupted()
        with stage("judge"):
            res = judge_instruction(judge_backend, history.image(t - 1).rgb(), history.image(t).rgb(),
                                    history.turns[t].instruction, **opts)
        calls += int(res.get("vlm_calls", 1))
        per_turn.append(res)
    return summarise_judgements(per_turn, calls)


def _save_images(out_dir: Path, scenario_id: str, history: History) -> list[str]:
    """Write I_0..I_N as <out>/images/<scenario>/<digest>.png and return their paths (one per
    turn). Named by content, so an image shared by several configs (I_0, a common prefix of turns)
    is written once per scenario, not once per config."""
    folder = out_dir / "images" / scenario_id
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for img in history.images:
        p = folder / f"{img.digest[:24]}.png"
        save_png(p, img, compress_level=6)   # zlib's default, as PIL's own: the files keep their bytes
        paths.append(str(p.relative_to(out_dir)))
    return paths


def run_one(scenario: Scenario, config: BenchConfig, models: BenchModels, settings: BenchSettings,
            out_dir: Path | None = None, image=None, shared: Any = None) -> dict:
    """Run and score one scenario under one config; return its results row (nothing written
    but the images, when an out_dir is given and settings.save_images)."""
    t_start = time.perf_counter()
    history = run_turns(scenario, config, models, settings, image=image)
    seconds = {k: 0.0 for k in STAGE_KEYS}
    for turn in history.turns[1:]:
        for k, v in (turn.meta.get("seconds") or {}).items():
            seconds[k] = seconds.get(k, 0.0) + float(v)
    scored = score_scenario(scenario, history, models, seconds, shared=shared, config=config.name)
    judge = None
    if settings.judge and models.judge_backend is not None:
        judge = judge_turns(history, models.judge_backend, seconds,
                            settings.judge_max_new_tokens or (48 if settings.smoke else None))
    row_run = RowRun(config=config.name, editor=settings.editor, controller=models.describe.get("controller", ""),
                 editor_model=models.describe.get("editor_model", ""), smoke=settings.smoke, seed=settings.seed,
                 masks_source=models.describe.get("masks", models.masks), scorer=models.describe.get("scorer", ""))
    row = make_row(scenario, history, scored["score"], row_run, judge=judge, masks=scored["masks"],
                   true_reference=scored["true_reference"],
                   seconds={**{k: round(v, 4) for k, v in seconds.items()},
                            "total": round(time.perf_counter() - t_start, 4)})
    if scored["scores_shared_with"]:
        row["scores_shared_with"] = scored["scores_shared_with"]
    row["untouched_psnr"] = scored.get("untouched_psnr")
    fidelity = [p["edit_region_psnr"] for t in history.turns[1:] for p in (t.meta.get("post_edit") or [])
                if p.get("step") == "sim_edit_fidelity" and p.get("edit_region_psnr") is not None]
    if fidelity:    # guard configs only: the worst turn's edit region PSNR, guard's output vs editor's
        row["edit_region_psnr"] = min(fidelity)
    if settings.editor == "sim":
        row["sim_defects"] = settings.sim_defects
    if out_dir is not None and settings.save_images:
        row["images"] = _save_images(out_dir, scenario.id, history)
    return row


# ------------------------------------------------------------------------------ the whole run

def _check_manifest(out_dir: Path, settings: BenchSettings, dataset: Dataset, write: bool = True) -> None:
    check_run_identity(out_dir, settings.identity(dataset.name),
                       {"dataset_path": dataset.path, "settings": asdict(settings)}, write=write)


def select_scenarios(dataset: Dataset, settings: BenchSettings) -> list[Scenario]:
    """The scenarios a run covers: the ids asked for (in file order), then --limit."""
    scenarios = list(dataset)
    if settings.scenario_ids:
        wanted = set(settings.scenario_ids)
        unknown = wanted - {s.id for s in scenarios}
        if unknown:
            raise InputError(f"{dataset.path}: no scenario with id {', '.join(sorted(unknown))} (its {len(scenarios)} "
                             f"ids run from {scenarios[0].id} to {scenarios[-1].id}; `python -m respec validate` "
                             f"summarises the file)" if scenarios else f"{dataset.path}: no scenarios")
        scenarios = [s for s in scenarios if s.id in wanted]
    if settings.limit is not None:
        if settings.limit < 1:
            raise InputError(f"--limit must be at least 1, got {settings.limit}")
        scenarios = scenarios[: settings.limit]
    return scenarios


@dataclass
class RunPlan:
    """A run ready to start: its folder and files, and the work left (resumed keys removed)."""
    dataset: Dataset
    out: Path
    results: ResultsFile
    errors: ResultsFile
    summary: RunSummary
    todo: list[tuple[Scenario, list[str], list[str]]]   # scenario, its configs left, their keys

    settings: BenchSettings          # the checked settings (BenchSettings.checked) the run uses
    started: bool = False

    @property
    def keys(self) -> int:
        """How many rows this run still has to make."""
        return sum(len(keys) for _, _, keys in self.todo)

    def start(self) -> None:
        """Record the run's settings in <out>/run.json, once, as the first row is about to be made
        (a run that fails before that leaves the folder as it was)."""
        if self.started:
            return
        _check_manifest(self.out, self.settings, self.dataset)
        self.started = True


def prepare_run(settings: BenchSettings, check_folder: bool = True) -> RunPlan:
    """Check the settings and the output folder (refusing other settings' results; with
    check_folder=False only the settings) and list the (scenario, configs) still to run: this job's
    shard, minus the keys already written. Nothing is written: RunPlan.start() records the run.
    The caller's settings are left as they are: the plan holds the checked copy (plan.settings)."""
    dataset = load_dataset(settings.dataset)
    settings = settings.checked()
    shard = parse_shard(settings.shard)
    out_dir = Path(settings.out or default_out_dir(dataset.name, settings.smoke, settings.editor))
    scenarios = select_scenarios(dataset, settings)
    if check_folder:
        _check_manifest(out_dir, settings, dataset, write=False)
    results = ResultsFile(out_dir / "results.jsonl")
    summary = RunSummary(out=str(out_dir), results=str(results.path))
    done = results.done_keys()
    todo = []
    for s in scenarios:
        if shard is not None and not shard.holds(dataset.name, s.id):
            continue
        left, keys = [], []
        for c in settings.configs:
            key = row_key({"dataset": dataset.name, "scenario_id": s.id, "config": c, "editor": settings.editor})
            if key in done:
                summary.skipped.append(key)
            else:
                left.append(c)
                keys.append(key)
        if left:
            todo.append((s, left, keys))
    return RunPlan(dataset, out_dir, results, ResultsFile(out_dir / "errors.jsonl"), summary, todo, settings)


def error_record(dataset: str, scenario_id: str, config: str, editor: str, exc: BaseException,
                 **extra: Any) -> dict:
    """The errors.jsonl entry of one failed scenario x config (call it while handling `exc`)."""
    key = row_key({"dataset": dataset, "scenario_id": scenario_id, "config": config, "editor": editor})
    return {"dataset": dataset, "scenario_id": scenario_id, "config": config, "editor": editor,
            "key": f"{key}|{time.time():.0f}", "status": "error", "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(), **extra}


def run_scenario(scenario: Scenario, configs: list[str], models: BenchModels, settings: BenchSettings,
                 out_dir: Path | None = None, *, dataset_name: str | None = None,
                 on_result: Callable[[str, dict], None] | None = None) -> tuple[list[dict], dict]:
    """Every given config of one scenario: a row per config, or an error record (status "error")
    where that config failed. With settings.share_prefix the configs share one memo of edits and
    controller calls (respec.bench.prefix), so their common turns are computed once; the rows
    are the same as with separate runs. on_result(config, row_or_error) is called as each ends.
    Returns the results in config order and the counts of work run / shared."""
    from dataclasses import replace
    from .prefix import SharedPrefix

    prefix = SharedPrefix() if settings.share_prefix else None
    parts = (replace(models, editor=prefix.editor(models.editor), backend=prefix.controller(models.backend))
             if prefix is not None else models)
    image = scenario.load_image(settings.size or None)      # once for all configs
    out: list[dict] = []
    for cname in configs:
        try:
            result = run_one(scenario, CONFIGS[cname], parts, settings, out_dir, image=image, shared=prefix)
        except (Interrupted, KeyboardInterrupt):
            raise
        except Exception as e:  # one broken scenario must not end a long run
            if _is_interrupt(e):
                raise
            log.exception("scenario %s (%s) failed", scenario.id, cname)
            result = error_record(dataset_name or scenario.dataset, scenario.id, cname, settings.editor, e)
        out.append(result)
        if on_result is not None:
            on_result(cname, result)
    counts = dict(prefix.counts) if prefix is not None else {}
    return out, counts


def run_benchmark(settings: BenchSettings, models: BenchModels | None = None,
                  on_row: Callable[[dict], None] | None = None, sim_world: ModelLoader | None = None) -> RunSummary:
    """Run the dataset under every config in settings.configs, appending rows as they finish.

    Rows already in <out>/results.jsonl are skipped (resume). A scenario that fails is written to
    <out>/errors.jsonl with its traceback and the run goes on; Ctrl-C / interruption stops it
    with everything finished so far saved. Without `models`, they are loaded once there is work
    (load_models; `sim_world` is its loader of the simulated world, for --editor sim)."""
    plan = prepare_run(settings)
    settings, summary = plan.settings, plan.summary
    t0 = time.perf_counter()
    if not plan.todo:
        summary.seconds = time.perf_counter() - t0
        return summary
    if models is None:
        models = load_models(settings, sim_world)
    plan.start()
    comfy.clear_interrupt()
    try:
        with comfy.progress(plan.keys, desc="OCCUR bench") as bar:
            for scenario, configs, keys in plan.todo:
                key_of = dict(zip(configs, keys))

                def write(cname: str, result: dict) -> None:
                    record_result(plan, key_of[cname], result, on_row)
                    bar.update()

                _, counts = run_scenario(scenario, configs, models, settings, plan.out,
                                         dataset_name=plan.dataset.name, on_result=write)
                summary.add_work(counts)
    except (Interrupted, KeyboardInterrupt):
        summary.interrupted = True
    summary.seconds = time.perf_counter() - t0
    return summary


def record_result(plan: RunPlan, key: str, result: dict, on_row: Callable[[dict], None] | None = None) -> None:
    """Write one config's result where it belongs: a row to results.jsonl (unless its key is
    already there), an error record to errors.jsonl; and note it in the run's summary."""
    summary = plan.summary
    plan.start()   # the Ray runner's first result (the in-process runner has started already)
    if result.get("status") == "error":
        summary.failed[key] = result["error"]
        plan.errors.append(result)
        return
    if plan.results.append(result):
        summary.done.append(key)
        if on_row is not None:
            on_row(result)
    else:
        summary.skipped.append(key)
    comfy.send_event("bench.row", {"key": key, "S_TC": result.get("S_TC")})


def _is_interrupt(e: BaseException) -> bool:
    # ComfyUI's own interruption exception, without importing ComfyUI.
    return type(e).__name__ in ("InterruptProcessingException",)


def default_out_dir(dataset_name: str, smoke: bool, editor: str = "flux2") -> Path:
    """<ComfyUI output or RESPEC_HOME/output>/bench/<dataset>-<editor>[-smoke]: re-running
    resumes there; each editor has its own folder (and results file) unless --out says otherwise."""
    return comfy.output_dir() / "bench" / f"{dataset_name}-{editor}{'-smoke' if smoke else ''}"
