"""A small progress bar with rate and ETA for long command-line work (stderr, one line)."""
from __future__ import annotations

import sys
import time


def format_seconds(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class ProgressBar:
    def __init__(self, total: int, desc: str = "", stream=None, width: int = 24, min_interval: float = 0.25):
        self.total, self.desc, self.width = max(1, int(total)), desc, width
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.done = 0
        self.min_interval = min_interval
        self._last = 0.0
        self.postfix = ""

    def update(self, n: int = 1, postfix: str | None = None, done: int | None = None):
        self.done = done if done is not None else self.done + n
        if postfix is not None:
            self.postfix = postfix
        now = time.perf_counter()
        if now - self._last >= self.min_interval or self.done >= self.total:
            self._last = now
            self._draw(now)

    def _draw(self, now):
        elapsed = now - self.start
        frac = min(1.0, self.done / self.total)
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        bar = "#" * int(frac * self.width) + "-" * (self.width - int(frac * self.width))
        line = f"\r{self.desc} [{bar}] {_count(self.done)}/{self.total} {format_seconds(elapsed)}<{format_seconds(eta)} {self.postfix}"
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()

    def close(self):
        self._draw(time.perf_counter())
        self.stream.write("\n")
        self.stream.flush()


def _count(done) -> str:
    """Whole units as they are; a share of one (substeps within a frame) with one decimal."""
    return f"{done:.1f}" if done != int(done) else str(int(done))
