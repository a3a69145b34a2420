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

Model sources typed into a loader (the VLM loader's `hf_model`, the Flux.2 loader's
`custom_model`) go through `model_source`: a Hugging Face id, or a folder inside ComfyUI's
model folders of that kind (models/LLM, models/diffusers and their extra_model_paths.yaml entries).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import comfy
from .errors import InputError
from .text import check_text, clip


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


MAX_PATH_BYTES = 4096   # a path a workflow names (the usual PATH_MAX)


def folder_name(root: Path) -> str:
    """How a message names a registered folder: its last two parts ('.../respec/sessions'), never
    the server's absolute path (a message reaches whoever queued the prompt)."""
    parts = Path(root).parts
    return ".../" + "/".join(parts[-2:]) if len(parts) > 2 else str(root)


def confine(value: str, root: Path, what: str) -> Path:
    """`value` (relative to `root`, or absolute) resolved; InputError unless it stays inside `root`.

    `what` names the input in the message (e.g. "the History Store's store_dir"). The value must
    pass the pack's text rule (respec/text.py) and be at most MAX_PATH_BYTES; the message echoes
    only its start and names the folder by its last parts.
    """
    text = check_text(value or "", what, MAX_PATH_BYTES, shorten="give a shorter name").strip()
    if not text:
        raise InputError(f"{what} is empty; give a name inside {folder_name(root)}")
    base = root.expanduser().resolve()
    p = Path(text).expanduser()
    try:
        resolved = (p if p.is_absolute() else base / p).resolve()
    except (OSError, RuntimeError, ValueError) as e:   # a symlink loop, a name too long for the system
        raise InputError(f"{what} {clip(text)} cannot be resolved ({type(e).__name__}); give another name") from None
    if resolved != base and base not in resolved.parents:
        raise InputError(
            f"{what} {clip(text)} is outside {folder_name(base)}: a workflow may only name files in that "
            f"folder (give a name relative to it); to use another file, copy it into that folder.")
    return resolved


# A Hugging Face repo id as the hub accepts it: owner/name, letters, digits, '-', '_' and '.', no "..".
_HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def is_hf_id(text: str) -> bool:
    """True when `text` is a plain Hugging Face repo id (owner/name), nothing that could be a path."""
    return bool(_HF_ID.fullmatch(text)) and ".." not in text


def model_source(value: str, kind: str, what: str) -> str:
    """A model source a workflow typed, made safe to hand to the core loaders.

    Returns the resolved folder when `value` names a file or folder inside a registered model
    folder of `kind` (comfy.model_search_dirs), else `value` itself when it is a strict Hugging Face
    id (which the loaders look up in the local Hugging Face cache, downloading only when allowed).
    Absolute paths outside those folders, `..` escapes and symlinks that leave them raise
    InputError naming the allowed folders. The core loaders themselves still take any path: this
    check belongs to the node boundary, where anyone who can queue a prompt chooses the value.
    """
    text = (value or "").strip()
    if not text:
        raise InputError(f"{what} is empty")
    if "\x00" in text:
        raise InputError(f"{what} contains a NUL character")
    roots = [d.expanduser().resolve() for d in comfy.model_search_dirs(kind)]
    allowed = ", ".join(str(r) for r in roots)
    refusal = (f"{what} {text!r} is outside the model folders for {kind} ({allowed}): a workflow may only "
               f"name a Hugging Face id (owner/name) or a model inside those folders. Move or link the model "
               f"into one of them, or add its folder under '{kind}' in ComfyUI's extra_model_paths.yaml.")
    p = Path(text)
    if p.is_absolute() or text.startswith("~"):
        resolved = p.expanduser().resolve()
        if any(r in resolved.parents for r in roots):
            return str(resolved)
        raise InputError(refusal)
    for root in roots:
        resolved = (root / p).resolve()
        if root not in resolved.parents:
            raise InputError(refusal)   # ".." or a symlink that leaves the folder (or the folder itself)
        if resolved.exists():
            return str(resolved)
    if is_hf_id(text):
        return text
    raise InputError(f"{what} {text!r} is neither a model in the model folders for {kind} ({allowed}) nor a "
                     f"Hugging Face id (owner/name: letters, digits, '-', '_', '.'). Put the model in one of "
                     f"those folders or give its Hugging Face id.")


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
