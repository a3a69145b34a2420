"""The benchmark's definitions shared by every way of running it (in-process runner, ComfyUI
graphs queued by the remote runner, the Results Writer): the configurations of table 2, the
editors, and the per-turn editor seeds."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..errors import InputError
from ..turn import TurnSwitches


@dataclass(frozen=True)
class BenchConfig:
    """One column of table 2: the turn's switches and the parts beyond the paper."""
    name: str
    switches: TurnSwitches           # use_controller, use_pti, use_hrs, skip_non_restoration (respec.turn)
    label: str = ""
    selector: str = "vlm"            # vlm | provenance | hybrid (respec.controller.provenance_selector)
    reveal: bool = False             # Reveal Composite after the edit (respec.post_edit.reveal_step.RevealStep)
    guard: bool = False              # Drift Guard after the edit and Reveal (respec.post_edit.guard_step.GuardStep)

    @property
    def needs_vlm(self) -> bool:
        """Whether this config calls the controller (the provenance selector does not)."""
        return self.switches.use_controller and self.selector != "provenance"


# The table's switch settings: no controller; HRS (non-restoration turns make no VLM call: nothing
# of theirs would be used); PTI; both (ReSpec).
BASELINE = TurnSwitches(use_controller=False, use_pti=False, use_hrs=False)
HRS = TurnSwitches(use_pti=False, skip_non_restoration=True)
PTI = TurnSwitches(use_hrs=False)
RESPEC = TurnSwitches()
RESPEC_HISTORY_FIRST = TurnSwitches(history_first=True)   # issue 43: take back from history, the editor not run
# The paper's four (table 2), then beyond the paper (docs/provenance.md): the provenance selector
# (0 VLM calls), the hybrid (provenance picks, the VLM writes) and Reveal Composite after the edit.
CONFIGS: dict[str, BenchConfig] = {
    "baseline": BenchConfig("baseline", BASELINE, label="no ReSpec"),
    "hrs": BenchConfig("hrs", HRS, label="+ HRS"),
    "pti": BenchConfig("pti", PTI, label="+ PTI"),
    "respec": BenchConfig("respec", RESPEC, label="+ PTI + HRS (ReSpec)"),
    "respec-prov": BenchConfig("respec-prov", RESPEC, selector="provenance",
                               label="ReSpec, provenance selector (0 VLM calls)"),
    "respec-prov+reveal": BenchConfig("respec-prov+reveal", RESPEC, selector="provenance", reveal=True,
                                      label="ReSpec, provenance selector + Reveal Composite"),
    "respec-hybrid": BenchConfig("respec-hybrid", RESPEC, selector="hybrid",
                                 label="ReSpec, hybrid (provenance picks, the VLM writes)"),
    "respec-hybrid+reveal": BenchConfig("respec-hybrid+reveal", RESPEC, selector="hybrid", reveal=True,
                                        label="ReSpec, hybrid + Reveal Composite"),
    "respec-prov+reveal+guard": BenchConfig("respec-prov+reveal+guard", RESPEC, selector="provenance", reveal=True,
                                            guard=True, label="ReSpec, provenance selector + Reveal Composite + "
                                                              "Drift Guard (the conversational_provenance graph)"),
    "respec-prov+undo+reveal+guard": BenchConfig("respec-prov+undo+reveal+guard", RESPEC_HISTORY_FIRST,
                                                 selector="provenance", reveal=True, guard=True,
                                                 label="ReSpec, provenance selector + history first (undo from "
                                                       "history, the editor not run) + Reveal Composite + "
                                                       "Drift Guard"),
    "hrs+reveal": BenchConfig("hrs+reveal", HRS, reveal=True, label="+ HRS + Reveal Composite"),
    "pti+reveal": BenchConfig("pti+reveal", PTI, reveal=True, label="+ PTI + Reveal Composite"),
    "respec+reveal": BenchConfig("respec+reveal", RESPEC, reveal=True, label="+ PTI + HRS (ReSpec) + Reveal Composite"),
    "respec+guard": BenchConfig("respec+guard", RESPEC, guard=True, label="+ PTI + HRS (ReSpec) + Drift Guard"),
    "baseline+guard": BenchConfig("baseline+guard", BASELINE, guard=True, label="no ReSpec + Drift Guard"),
    "respec+reveal+guard": BenchConfig("respec+reveal+guard", RESPEC, reveal=True, guard=True,
                                       label="+ PTI + HRS (ReSpec) + Reveal Composite + Drift Guard"),
}
# `--config all` is the paper's four; names and groups combine ("all,prov,reveal").
CONFIG_GROUPS = {
    "all": ("baseline", "hrs", "pti", "respec"),
    "prov": ("respec-prov", "respec-prov+reveal", "respec-hybrid", "respec-hybrid+reveal"),
    "reveal": ("hrs+reveal", "pti+reveal", "respec+reveal"),
    "guard": ("baseline+guard", "respec+guard"),
    # beyond the paper, the main job's own table (report.py): the conversational graph and history first
    "beyond": ("respec-prov+reveal+guard", "respec-prov+undo+reveal+guard"),
}
EDITORS = ("flux2", "omnigen2", "sim")
# Where the A.5 masks come from: "detect" = YOLO-World + SAM on the generated images (the paper);
# "oracle" = the layers the simulated editor recorded (exact; only with --editor sim).
MASKS = ("detect", "oracle")


def parse_configs(spec: str | list[str] | None) -> list[str]:
    """'all' | 'baseline,respec' | ['pti', 'hrs'] | 'all,prov' -> config names in table-2 order
    (the groups: CONFIG_GROUPS)."""
    if spec is None:
        return ["baseline", "respec"]
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in items:
        for name in CONFIG_GROUPS.get(item.strip(), [item.strip()]):
            if name not in CONFIGS:
                raise InputError(f"unknown benchmark config {name!r}; use one of {', '.join(CONFIGS)}, or a "
                                 f"group: {', '.join(f'{g} ({chr(44).join(v)})' for g, v in CONFIG_GROUPS.items())}")
            if name not in names:
                names.append(name)
    return [c for c in CONFIGS if c in names]


def config_variant(name: str, selector: str | None = None, reveal: bool = False) -> str:
    """The config that is `name` with another selector and/or Reveal Composite, e.g. ("respec",
    "provenance", True) -> "respec-prov+reveal". InputError when no such config exists."""
    base = CONFIGS[name]
    sel = (selector or base.selector).strip().lower()
    want = (base.switches, sel, base.reveal or reveal, base.guard)
    for cand in CONFIGS.values():
        if (cand.switches, cand.selector, cand.reveal, cand.guard) == want:
            return cand.name
    raise InputError(f"there is no config {name!r} with selector {sel!r}{' and Reveal Composite' if reveal else ''}: "
                     "the provenance and hybrid selectors are defined for 'respec' (PTI + HRS), Reveal Composite "
                     "for every config with a controller")


def turn_seed(base: int, scenario_id: str, t: int) -> int:
    """The editor seed of turn t: the same in every config, so configs are compared pairwise."""
    return (int(base) + zlib.crc32(f"{scenario_id}:{t}".encode())) % (2 ** 31)
