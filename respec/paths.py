"""The folders a workflow may name files in, and the one check that keeps it inside them.

A ComfyUI server may be reachable by others, and anyone who can queue a prompt chooses every
widget value; `/upload/image` even lets them write files under `input/`. So a path that comes
from a workflow is never used as given: it is resolved (symlinks and `..` included) against the
registered folder for its kind and refused when it lands outside. The CLI and Python callers are
the machine's owner and may still pass any path to the core functions directly.

Registered folders (inside ComfyUI; standalone they sit under RESPEC_HOME):

    templates  user/respec/templates      prompt-template overrides (Preservation Target)
    datasets   input/respec_datasets      scenario files and their images (Scenario Loader)
    sessions   user/respec/sessions       session stores (History Store; RESPEC_SESSIONS_DIR)
    results    output/respec              results files (Results Writer)
"""
from __future__ import annotations

import os
from pathlib import Path

from . import comfy
from .errors import InputError


def templates_dir() -> Path:
    """Where prompt-template overrides a workflow may choose live."""
    return comfy.user_dir() / "templates"


def datasets_dir() -> Path:
    """Where scenario files a workflow may choose live (besides the packaged sets)."""
    return comfy.input_dir() / "respec_datasets"


def sessions_dir() -> Path:
    """The folder that holds every session store a workflow may name (the default store is here)."""
    env = os.environ.get("RESPEC_SESSIONS_DIR")
    return Path(env).expanduser() if env else comfy.user_dir() / "sessions"


def results_dir() -> Path:
    """Where results files a workflow writes go."""
    return comfy.output_dir()


def confine(value: str, root: Path, what: str) -> Path:
    """`value` (relative to `root`, or absolute) resolved; InputError unless it stays inside `root`.

    `what` names the input in the message (e.g. "the History Store's store_dir").
    """
    text = (value or "").strip()
    if not text:
        raise InputError(f"{what} is empty")
    if "\x00" in text:
        raise InputError(f"{what} contains a NUL character")
    base = root.expanduser().resolve()
    p = Path(text).expanduser()
    resolved = (p if p.is_absolute() else base / p).resolve()
    if resolved != base and base not in resolved.parents:
        raise InputError(
            f"{what} {text!r} is outside {base}: a workflow may only name files in that folder "
            f"(give a name relative to it). To use another file, copy it into {base}.")
    return resolved


def list_files(root: Path, suffixes: tuple[str, ...]) -> list[str]:
    """Files under `root` ending in one of `suffixes`, as sorted POSIX paths relative to it
    (the choices of a drop-down); [] when the folder does not exist."""
    if not root.is_dir():
        return []
    base = root.resolve()
    names = []
    for p in root.rglob("*"):
        if p.is_file() and p.name.lower().endswith(suffixes) and not p.name.startswith("."):
            try:  # a symlink that leaves the folder is not offered
                p.resolve().relative_to(base)
            except ValueError:
                continue
            names.append(p.relative_to(root).as_posix())
    return sorted(names)
