"""The evaluation stage (paper §3.3, appendices A.5, B.1, D.4/D.5): what the `[eval]` extra is for.

    masks          occluder / new-object masks: YOLO-World v2 + SAM (B.1)
    metrics        the region algebra and the masked PSNR / LPIPS / CLIP scores, S_TC (A.5)
    metric_models  where the LPIPS and CLIP networks come from and how they are built
    scoring        which image is Î_N and which I_ref, for the OCCUR Score node
    judge          instruction faithfulness S_IF, graded by a controller backend (§3.3)

The extra's packages (ultralytics, segment-anything, lpips, open_clip; requirements-eval.txt) are
imported inside the functions that use them, so these modules import without the extra (the pack
then leaves the evaluation nodes out, respec/extras.py). The judge needs only a controller backend.
Nothing is imported here: importing one module does not import the others.
"""
