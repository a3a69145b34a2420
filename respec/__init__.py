"""ReSpec core: usable without ComfyUI (python -m respec ...)."""
