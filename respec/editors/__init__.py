"""In-context editors (paper section 5.1): FLUX.2 [klein] and OmniGen2 behind one `Editor`
interface. (The ComfyUI-native route, reference latents on a CONDITIONING, is nodes/conditioning.py.)

    editor = load_flux2("black-forest-labs/FLUX.2-klein-base-9B")     # or load_editor("flux2", "tiny")
    image = editor.edit(selection_images, instruction, output_size=current.size, seed=0)
"""
from ..errors import InputError
from .base import Editor, check_size, prepare_references, snap_size
from .flux2 import DEFAULT_SOURCE as FLUX2_DEFAULT_SOURCE, Flux2Editor, KLEIN_VARIANTS, OFFLOAD_MODES, load_flux2
from .omnigen2 import OmniGen2Editor, OmniGen2NotInstalled, load_omnigen2

FAMILIES = {"flux2": load_flux2, "omnigen2": load_omnigen2}


def load_editor(family: str, source: str | None = None, **options) -> Editor:
    """The editor of `family` ("flux2" | "omnigen2") from `source`: a diffusers folder, a Hugging
    Face id, or "tiny" / "tiny:<seed>" (None: the family's paper default); options go to its loader."""
    if family not in FAMILIES:
        raise InputError(f"unknown editor {family!r}; use one of {', '.join(FAMILIES)}")
    return FAMILIES[family](*([source] if source else []), **options)


__all__ = ["Editor", "Flux2Editor", "OmniGen2Editor", "OmniGen2NotInstalled", "load_editor", "load_flux2",
           "load_omnigen2", "FAMILIES",
           "check_size", "prepare_references", "snap_size", "KLEIN_VARIANTS",
           "OFFLOAD_MODES", "FLUX2_DEFAULT_SOURCE"]
