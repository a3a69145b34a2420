"""The post-edit steps: step 6 of respec/turn.py's run_turn, and the Reveal Composite / Drift Guard nodes
(beyond the paper).

A post-edit step reads the turn (the request, the plan, the history) and applies a pixel rule of
respec/pixels/ to the editor's image. The steps live here, apart from the rules, so that the pixel
rules import nothing from the controller (respec/controller/ reads the request and the history's
provenance; respec/pixels/ measures and composes pictures): this folder is the one place that uses
both.

    reveal_step   Reveal Composite: on a restoration turn, the covering turn k (the plan's, else
                  provenance's) and whether the request removes what k added; then
                  pixels.reveal.reveal_for pastes I_{k-1}'s pixels (RevealStep, reveal_turn)
    guard_step    Drift Guard: the request read once into the guard's EditScope (edit_scope), then
                  respec/pixels/guard/ keeps I_{t-1} outside the edit region (GuardStep, guard_images)
    undo_step     history first (TurnSwitches.history_first), before the edit: a request that removes
                  what turn k added is answered by pixels.undo.undo_from_history, the editor not run
                  (UndoStep, undo_turn)
    record        what a step may read of the turn so far (TurnSoFar, a Protocol run_turn's record meets)
    result        one result for a step (StepResult: entry, image, masks) and keep_step, which keeps
                  it with the turn: run_turn and the History Append node both call it
"""
