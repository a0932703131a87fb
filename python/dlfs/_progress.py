"""Progress display for progress=True (dlfs.pack, dlfs.Writer).

A tqdm bar when tqdm is importable (Debian: python3-tqdm), else one line on
stderr rewritten in place (a terminal) or printed every few seconds (a log).
"""
import sys
import time

try:
    import tqdm as _tqdm
except ImportError:  # optional: the plain line below does the same job
    _tqdm = None


def _duration(seconds):
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Progress:
    """Counts done out of total (None: unknown); unit names what is counted
    (plural: "samples"; "B" with unit_scale for bytes).

    update_to(n, **info) sets the count; info (e.g. bytes=...) is shown
    beside it. close() ends the display. use_tqdm=None picks tqdm when
    installed; False forces the plain line (tests use it)."""

    def __init__(self, desc, unit="samples", total=None, unit_scale=False, use_tqdm=None,
                 file=None):
        self.desc, self.unit, self.total = desc, unit, total
        self.unit_scale = unit_scale
        self.file = file or sys.stderr
        self.n = 0
        self._info = {}
        self._start = self._last = time.monotonic()
        self._bar = None
        if use_tqdm is None:
            use_tqdm = _tqdm is not None
        if use_tqdm:
            if _tqdm is None:
                raise ImportError("tqdm is not installed (Debian: python3-tqdm)")
            self._bar = _tqdm.tqdm(total=total, desc=desc, unit=unit if unit_scale else " " + unit,
                                   unit_scale=unit_scale,
                                   file=self.file, dynamic_ncols=True)
        self._tty = self._bar is None and getattr(self.file, "isatty", lambda: False)()

    def set_total(self, total):
        if total == self.total:
            return
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def update_to(self, n, **info):
        self.n, self._info = n, info
        if self._bar is not None:
            if info:
                self._bar.set_postfix({k: _human(v) if k == "bytes" else v
                                       for k, v in info.items()}, refresh=False)
            self._bar.update(n - self._bar.n)
            return
        now = time.monotonic()
        # A terminal gets ~10 updates a second, a log file a line every 5 s.
        if now - self._last >= (0.1 if self._tty else 5.0):
            self._last = now
            self._print(now, end="\r" if self._tty else "\n")

    def line(self, now=None):
        """The plain progress line, e.g. 'packing: 1200/7000 samples (17.1%),
        300 samples/s, ETA 0:19'."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        if self.unit_scale:  # bytes: "1.2 MB/4.0 GB"
            text = f"{self.desc}: {_human(self.n)}"
            if self.total:
                text += f"/{_human(self.total)} ({100 * min(self.n / self.total, 1):.1f}%)"
        else:
            text = f"{self.desc}: {self.n}"
            if self.total:
                text += f"/{self.total} {self.unit} ({100 * min(self.n / self.total, 1):.1f}%)"
            else:
                text += f" {self.unit}"
        for key, value in self._info.items():
            text += f", {key} {_human(value) if key == 'bytes' else value}"
        rate = self.n / elapsed
        text += f", {_human(rate)}/s" if self.unit_scale else f", {rate:.0f} {self.unit}/s"
        if self.total and 0 < self.n < self.total:
            text += f", ETA {_duration((self.total - self.n) / rate)}"
        return text

    def _print(self, now, end):
        self.file.write(("\r\033[K" if self._tty else "") + self.line(now) + end)
        self.file.flush()

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.file is not None:
            self._print(time.monotonic(), end="\n")
        self.file = None
