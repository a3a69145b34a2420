"""EditScope: what the turn's request asks to change, as the Drift Guard reads it (beyond the paper).

The guard's pixel rules do not read language. The post-edit step (respec/post_edit/guard_step.py
`edit_scope`) reads the request and the plan once, with the keyword rule of
respec/controller/request_language.py, and hands the guard this plain value.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import InputError

GLOBAL = "global"           # the whole picture (style, light, season): the guard steps aside
BACKGROUND = "background"   # a new background for the subject: the guard keeps the subject (background_route)
LOCAL = "local"             # objects: the guard keeps I_{t-1} outside the edit region
KINDS = (GLOBAL, BACKGROUND, LOCAL)


@dataclass(frozen=True)
class EditScope:
    """The request's scope: `kind` (GLOBAL, BACKGROUND or LOCAL, by the keyword rule on the user's
    words and the plan's instructions), the `words` that made it global or a background, how many
    `places` a local request names (None: none the words can count), and whether the plan itself
    says the edit is global. The default is a request that says nothing: local, nothing named."""

    kind: str = LOCAL
    words: str = ""
    places: int | None = None
    plan_global: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"unknown edit scope {self.kind!r}; use one of {', '.join(KINDS)}")

    @property
    def named(self) -> bool:
        """Whether the request names what it changes (the places it changes can be counted)."""
        return self.places is not None
