"""The simulated OCCUR world: a TEST INSTRUMENT with exact ground truth, not an image editor.

It executes scenarios that carry geometry (respec/occur/geometry.py) on real photos with sprite
objects and exact layer bookkeeping, with an editor whose defects are named knobs (colour drift,
blur, noise, re-invention of revealed pixels, reference copying with fidelity < 1). Its numbers
measure the pipeline around an editor (reference selection, masks, metrics, restoration steps);
they say nothing about how good a real editor is. See docs/sim.md.

    editor = SimEditor(SimDefects())            # respec.editors.base.Editor
    editor.begin_turn(scenario, t)              # the runner's context before each edit
    image = editor.edit(images, instruction, output_size=size, seed=seed)
    editor.truth(scenario, image)               # masks, hidden / revealed pixels, true I_ref
    editor.oracle_masks(scenario, images_1_to_N)   # A.5 trajectory masks without a detector
"""
from .editor import NOT_REVEALED, REINVENTED, Frame, FrameTruth, SimDefects, SimEditor
from .world import SimObject, WorldState, apply_actions, layer_map, scenario_states, true_reference_turn

__all__ = ["NOT_REVEALED", "REINVENTED", "Frame", "FrameTruth", "SimDefects", "SimEditor", "SimObject",
           "WorldState", "apply_actions", "layer_map", "scenario_states", "true_reference_turn"]
