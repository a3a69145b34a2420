"""Restoration-aware instruction realisation (paper §4.3): the text the editor receives."""
from __future__ import annotations

from ..plan import Plan


def rewrite_instruction(plan: Plan, use_pti: bool = True) -> str:
    """PTI on: the plan's synthesis_instruction, passed as is (C.2: never merged with P_t).
    PTI off: the user's own instruction P_t."""
    return plan.synthesis_instruction if use_pti else plan.user_instruction
