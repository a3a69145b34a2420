"""OCCUR-Bench in the pack: scenario files, the in-process runner, results, reports, remote queueing.

Modules: scenario (format + validation), configs (table 2's configurations, editors, per-turn
seeds), settings (what a run is set to, and the models it loaded), rows (a results row from a
generated history, for the runner and the Results Writer), results (append-only results file),
runner (the benchmark loop in-process, a loop over respec.turn.run_turn), report (the paper's
tables and figure 7), workflow (the shipped API workflow filled in for a scenario and config),
remote (queueing it to ComfyUI servers).
Import the one you need; this file stays light.
"""
