"""What a benchmark run is set to (BenchSettings, recorded in <out>/run.json) and what it has
loaded (BenchModels): plain values that every way of running the benchmark shares (the
in-process runner, Ray, the remote runner, the simulated world's loader), kept apart from the
runner so that the loaders import them without importing the runner."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable

from ..errors import InputError
from .configs import EDITORS, MASKS, parse_configs


@dataclass
class BenchSettings:
    """Everything that decides a run's numbers (recorded in <out>/run.json)."""
    dataset: str = "occur_sample"
    out: str = ""
    configs: list[str] = field(default_factory=lambda: ["baseline", "respec"])
    editor: str = "flux2"
    smoke: bool = False
    masks: str = ""                  # "detect" | "oracle" ("": oracle with the sim editor, else detect)
    sim_defects: str = "default"     # none | default | realistic | subject-warp (--editor sim; respec.sim.drift)
    size: int = 1024                 # longer side of I_0 (multiples of 16); 0 keeps the source size
    seed: int = 0
    steps: int | None = None         # None: the editor's paper default (klein 30, OmniGen2 50)
    guidance: float | None = None
    limit: int | None = None
    scenario_ids: list[str] | None = None
    judge: bool = False
    judge_max_new_tokens: int | None = None   # None: the judge's default (48 in smoke runs)
    save_images: bool = True
    # models (real mode)
    controller: str = "qwen3-vl"
    controller_model: str | None = None     # None: the backend's default (Qwen3-VL-8B-Instruct)
    controller_options: dict = field(default_factory=dict)
    judge_controller: str | None = None     # None: the controller backend judges
    judge_model: str | None = None
    editor_model: str | None = None
    editor_options: dict = field(default_factory=dict)
    masker_options: dict = field(default_factory=dict)
    scorer_options: dict = field(default_factory=dict)
    # how the work is split and shared (rows do not depend on these)
    shard: str | None = None         # "i/N": this job's share of the scenarios (respec.bench.shards)
    share_prefix: bool = True        # configs of a scenario compute their common turns once
    controller_history: str = "paper"   # the controller sees every image (paper) or a bounded few (plan.meta says)

    # Fields whose change makes old rows incomparable with new ones.
    IDENTITY = ("dataset_name", "smoke", "size", "seed", "steps", "guidance", "controller", "controller_model",
                "editor_model", "masker_options", "scorer_options", "masks", "sim_defects")

    def masks_mode(self) -> str:
        """The masks this run uses (see MASKS)."""
        mode = self.masks or ("oracle" if self.editor == "sim" else "detect")
        if mode not in MASKS:
            raise InputError(f"unknown --masks {mode!r}; use {' or '.join(MASKS)}")
        if mode == "oracle" and self.editor != "sim":
            raise InputError("--masks oracle needs --editor sim: only the simulated editor records its layers; "
                             "real editors' masks come from YOLO-World + SAM (--masks detect)")
        return mode

    def identity(self, dataset_name: str, keys: Iterable[str] = IDENTITY) -> dict:
        """The values of the settings that decide the numbers (IDENTITY, or the subset `keys`), the
        dataset named by `dataset_name`: what run.json records and a resume must match."""
        d = asdict(self)
        d["dataset_name"] = dataset_name
        return {k: d[k] for k in keys}

    def checked(self) -> "BenchSettings":
        """A copy with the configs parsed and the masks mode resolved, after the checks that need
        no file and no model (editor, configs, masks, a smoke run's editor): an InputError saying
        the fix comes before anything is loaded or written."""
        if self.editor not in EDITORS:
            raise InputError(f"unknown editor {self.editor!r}; use one of {', '.join(EDITORS)}")
        if self.smoke and self.editor not in ("flux2", "sim"):
            raise InputError(f"--smoke runs the tiny FLUX.2 [klein]; there is no tiny {self.editor} "
                             f"(use --editor flux2 with --smoke, or run {self.editor} with real weights)")
        return replace(self, configs=parse_configs(self.configs), masks=self.masks_mode())


@dataclass
class BenchModels:
    """The loaded models of a run. `describe` names them in the rows."""
    editor: Any
    backend: Any = None
    masker: Any = None
    scorer: Any = None
    judge_backend: Any = None
    describe: dict = field(default_factory=dict)
    masks: str = "detect"            # see MASKS
