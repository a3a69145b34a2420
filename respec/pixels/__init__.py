"""The pixel steps: what acts on a turn's images, side by side (beyond the paper).

In the order a turn uses them (the numbered steps of respec/turn.py's run_turn):

    Steps 2-3, plan and select (the provenance selector, respec/controller/covering.py):
      provenance        pixel provenance: which turns changed which pixels; `provenance_of(history)`
                        reads every turn's change mask C_t (what each turn added, and which later
                        turn took it away: respec/controller/object_turns.py)
      provenance_index  what those masks say, kept incrementally per history (shares, block grids,
                        the last turn that changed each pixel), so a long conversation costs O(H·W)
    History first, before the edit (TurnSwitches.history_first; the step: respec/post_edit/undo_step.py):
      undo              a request that removes what turn k added: I_{t-1} with turn k's region taken
                        from I_{k-1}, exact where the frames agree; the editor is not run
    Step 6, post-edit steps on the editor's image (the steps that read the request and the plan
    are in respec/post_edit/; the pixel rules they apply are here):
      reveal            Reveal Composite: I_{k-1}'s own pixels back where the edit revealed them
                        (a removed object's whole region; inside a guarded chain exactly)
      guard             Drift Guard: I_{t-1}'s pixels outside the edit region, in I_{t-1}'s frame
      flow              the dense local motion field after the global alignment both of them warp by
      blend             the multi-band blend and push-pull membrane both of them paste with
    Step 7, append (History Append too):
      alignment         translation + uniform scale from I_{t-1} to I_t, sub-pixel, kept with the turn
      change_mask       `change_for`: C_t of I_{t-1} -> I_t on aligned images, robust to global drift,
                        and whether the editor kept the scene (the stability grid)

Shared by all of them (one home for each rule):
      masks             the one mask coercion (`mask_at`), the history's mask size, square morphology,
                        the clean-up of a thresholded mask
      colour_fit        the robust colour fit I_t ~ gain · I_{t-1} + bias and its one application
                        (`ColourFit.apply`, `ColourFit.from_info` for a stored record), robust scale
      work_images       a turn's images as float RGB at the working size (above 4 MP: scaled down)
      analysis_cache    what the steps keep between them, in one object (`AnalysisCache`, passed in;
                        `CACHE` by default): alignments, change records, working-size images, the
                        stability figures, the provenance index, object turns, controller images
      change_record     C_t as a typed value (`ChangeRecord.of`): the one reader of its JSON
"""
