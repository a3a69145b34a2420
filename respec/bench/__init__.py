"""OCCUR-Bench in the pack: scenario files, the in-process runner, results, reports, remote queueing.

Modules: scenario (format + validation), results (append-only results file), runner (the
benchmark loop in-process), report (the paper's tables and figure 7), remote (queueing the API
workflow to ComfyUI servers). Import the one you need; this file stays light.
"""
