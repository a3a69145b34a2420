"""In-context editors (paper section 5.1): FLUX.2 [klein] and OmniGen2 behind one `Editor`
interface. (The ComfyUI-native route, reference latents on a CONDITIONING, is nodes/conditioning.py.)

    editor = load_flux2("black-forest-labs/FLUX.2-klein-base-9B")
    image = editor.edit(selection_images, instruction, output_size=current.size, seed=0)
"""
from .base import Editor, check_size, prepare_references, snap_size
from .flux2 import DEFAULT_SOURCE as FLUX2_DEFAULT_SOURCE, Flux2Editor, KLEIN_VARIANTS, OFFLOAD_MODES, load_flux2
from .omnigen2 import OmniGen2Editor, OmniGen2NotInstalled, load_omnigen2

__all__ = ["Editor", "Flux2Editor", "OmniGen2Editor", "OmniGen2NotInstalled", "load_flux2", "load_omnigen2",
           "check_size", "prepare_references", "snap_size", "KLEIN_VARIANTS",
           "OFFLOAD_MODES", "FLUX2_DEFAULT_SOURCE"]
