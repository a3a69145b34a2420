"""Exceptions the pack raises. Each message says what was wrong and what to do about it."""


class ReSpecError(Exception):
    """Base class for every error this pack raises on purpose."""


class InputError(ReSpecError, ValueError):
    """A value given by the user (image, id, scenario field, option) is not acceptable."""


class MissingWeightsError(ReSpecError, FileNotFoundError):
    """A model file or folder was not found where it was looked for."""

    def __init__(self, what: str, looked_in: list[str], how_to_get: str):
        self.what, self.looked_in, self.how_to_get = what, list(looked_in), how_to_get
        places = "\n  ".join(self.looked_in) or "(no folder configured)"
        super().__init__(f"Missing model weights: {what}\nLooked in:\n  {places}\nHow to get it: {how_to_get}")


class CorruptWeightsError(ReSpecError):
    """A weight file exists but is truncated, of the wrong format or for another architecture."""


class DownloadNotAllowedError(ReSpecError):
    """Weights would have to be downloaded but the user has not allowed downloads."""


class StoreError(ReSpecError):
    """The session store is unreadable, foreign, corrupt, or the session asked for does not exist."""


class SessionExists(StoreError, InputError):
    """A new session's id is taken in its store (the caller chooses another id)."""


class ControllerError(ReSpecError):
    """The VLM controller backend failed (not a parse problem: those use the paper's fallbacks)."""


class Interrupted(ReSpecError):
    """The user cancelled the run (outside ComfyUI; inside, ComfyUI's own exception is raised)."""
