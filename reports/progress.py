"""A progress bar on stderr (one line per step where stderr is not a terminal)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str = "", stream=None, width: int = 28):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self.t0 = time.time()

    def update(self, text: str = "", advance: int = 1):
        self.done += advance
        filled = int(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"{self.label} [{bar}] {self.done}/{self.total} {time.time() - self.t0:5.0f}s {text}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
