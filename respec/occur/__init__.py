"""The OCCUR data model: what a scenario is, independent of how it is run.

Modules: scenario (the dataset format, its validation, loading a scenario's source image) and
geometry (a scenario's optional boxes and per-turn actions, which the simulated editor reads).
The benchmark machinery (respec/bench/), the simulated world (respec/sim/) and the nodes stand on
this folder; it imports nothing of them. Import the module you need; this file stays light.
"""
