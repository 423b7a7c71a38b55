"""Progress on stderr through tqdm: a live bar on a terminal (rows done of total, elapsed and
remaining time, the current row); elsewhere (a log file, CI) one line per row with the same figures."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, label: str = "", stream=None):
        self.stream = stream or sys.stderr
        self.total, self.label, self.done = max(int(total), 1), label, 0
        self.t0 = time.time()
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.bar = tqdm(total=self.total, desc=label, file=self.stream, dynamic_ncols=True, leave=True) \
            if self.tty else None

    def update(self, text: str = "", advance: int = 1):
        self.done += advance
        if self.bar is not None:
            self.bar.set_postfix_str(text[:80], refresh=False)
            self.bar.update(advance)
            return
        meter = tqdm.format_meter(self.done, self.total, time.time() - self.t0, prefix=self.label, ncols=0)
        self.stream.write(f"{meter} {text}\n")
        self.stream.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
