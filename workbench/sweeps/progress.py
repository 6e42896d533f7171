"""A sweep's progress line on stderr: runs done and failed of the total, and the time left
estimated from the pace so far."""

from __future__ import annotations

import sys
import time


def clock(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """`[#####.....] 120/200 done, 1 failed, 0:35 left`, redrawn as runs finish; silent
    unless `enabled`."""

    def __init__(self, total: int, enabled: bool, stream=None) -> None:
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.done = self.failed = 0
        self.start = time.perf_counter()
        self.drawn = 0.0
        if enabled:
            self.draw()

    def update(self, ok: bool) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        now = time.perf_counter()
        if self.enabled and (now - self.drawn > 0.1 or self.done + self.failed == self.total):
            self.draw()

    def draw(self) -> None:
        finished = self.done + self.failed
        elapsed = time.perf_counter() - self.start
        left = ("?" if not finished else
                clock(elapsed / finished * (self.total - finished)))
        width = 30
        bar = "#" * (width * finished // max(self.total, 1))
        self.stream.write(f"\r[{bar:<{width}}] {finished}/{self.total} runs: {self.done} done,"
                          f" {self.failed} failed, {left} left, {clock(elapsed)} so far ")
        self.stream.flush()
        self.drawn = time.perf_counter()

    def close(self) -> None:
        if self.enabled:
            self.draw()
            self.stream.write("\n")
