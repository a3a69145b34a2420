"""Tiny random-weight models built in code: the real classes and call signatures at toy sizes.

Used by the tests and by `python -m respec bench --smoke` to check an install without weights.
Nothing here downloads anything.
"""
