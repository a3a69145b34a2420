"""OCCUR-Bench in the pack: the in-process runner, results, reports, remote queueing.

The scenario format and geometry are the OCCUR data model, one floor down (respec/occur/).
Modules: configs (table 2's configurations, editors, per-turn seeds), settings (what a run is
set to, and the models it loaded), rows (a results row from a generated history, for the runner and the Results Writer), results (append-only results file),
runner (the benchmark loop in-process, a loop over respec.turn.run_turn), report (the paper's
tables and figure 7), workflow (the shipped API workflow filled in for a scenario and config),
remote (queueing it to ComfyUI servers), sim_models (a run's models in the simulated world,
respec/sim/).
Import the one you need; this file stays light.
"""
