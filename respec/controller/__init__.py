"""The ReSpec controller (paper §4, appendix C): backends, prompts, parsing, plan, selection.

    backend = load_backend("qwen3-vl", "Qwen/Qwen3-VL-8B-Instruct")
    plan = plan_turn(history, "remove the box", backend, is_restoration=True)
    chosen = select_references(history, plan, use_history_reference=True)
    text = rewrite_instruction(plan, use_pti=True)
"""
from .backends import DEFAULT_MODELS, KINDS, VLMBackend, load_backend, unload_backend
from .parsing import extract_json, parse_midturn, parse_restoration
from .planner import DEFAULT_MAX_NEW_TOKENS, PlanOptions, count_vlm_calls, plan_turn, skips_controller
from .prompts import DEFAULT_MAX_PIXELS, Templates, build_parts, load_templates
from .restoration import MODES as RESTORATION_MODES, decide_restoration, detect_restoration
from .rewriting import rewrite_instruction
from .selection import Selection, select_references

__all__ = [
    "DEFAULT_MODELS", "KINDS", "VLMBackend", "load_backend", "unload_backend",
    "extract_json", "parse_midturn", "parse_restoration",
    "DEFAULT_MAX_NEW_TOKENS", "PlanOptions", "count_vlm_calls", "plan_turn", "skips_controller",
    "DEFAULT_MAX_PIXELS", "Templates", "build_parts", "load_templates",
    "RESTORATION_MODES", "decide_restoration", "detect_restoration",
    "rewrite_instruction", "Selection", "select_references",
]
