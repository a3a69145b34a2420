"""The benchmark's definitions shared by every way of running it (in-process runner, ComfyUI
graphs queued by the remote runner, the Results Writer): the configurations of table 2, the
editors, and the per-turn editor seeds."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class BenchConfig:
    """One column of table 2."""
    name: str
    use_controller: bool
    use_pti: bool
    use_hrs: bool
    skip_non_restoration: bool = False
    label: str = ""


CONFIGS: dict[str, BenchConfig] = {
    "baseline": BenchConfig("baseline", False, False, False, label="no ReSpec"),
    "hrs": BenchConfig("hrs", True, False, True, skip_non_restoration=True, label="+ HRS"),
    "pti": BenchConfig("pti", True, True, False, label="+ PTI"),
    "respec": BenchConfig("respec", True, True, True, label="+ PTI + HRS (ReSpec)"),
}
EDITORS = ("flux2", "omnigen2", "sim")
# Where the A.5 masks come from: "detect" = YOLO-World + SAM on the generated images (the paper);
# "oracle" = the layers the simulated editor recorded (exact; only with --editor sim).
MASKS = ("detect", "oracle")


def parse_configs(spec: str | list[str] | None) -> list[str]:
    """'all' | 'baseline,respec' | ['pti', 'hrs'] -> config names in table-2 order."""
    if spec is None:
        return ["baseline", "respec"]
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in items:
        for name in (CONFIGS if item.strip() == "all" else [item.strip()]):
            if name not in CONFIGS:
                raise InputError(f"unknown benchmark config {name!r}; use baseline, hrs, pti, respec or all")
            if name not in names:
                names.append(name)
    return [c for c in CONFIGS if c in names]


def turn_seed(base: int, scenario_id: str, t: int) -> int:
    """The editor seed of turn t: the same in every config, so configs are compared pairwise."""
    return (int(base) + zlib.crc32(f"{scenario_id}:{t}".encode())) % (2 ** 31)
