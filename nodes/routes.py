"""(being written) Read-only HTTP routes for the frontend extension."""


def register() -> None:
    """Add the pack's routes to ComfyUI's server when one is running (no-op otherwise)."""
