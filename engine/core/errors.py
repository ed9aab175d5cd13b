"""The errors a user can meet. Each message is one clear line, shown without a traceback."""
from __future__ import annotations


class NeurokError(Exception):
    """A user-facing error: its message is one clear line, shown without a traceback."""


class FormatError(NeurokError):
    """A file or value that does not follow its format."""


class Cancelled(NeurokError):
    """The user cancelled a run."""


class SimulationFault(NeurokError):
    """A run that could not continue; `positions` holds the good frames before `frame`."""

    def __init__(self, message: str, frame: int, positions=None):
        super().__init__(message)
        self.frame = frame
        self.positions = positions
