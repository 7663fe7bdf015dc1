"""Tuning progress for people: a receiver of the ``flyautotune_tuning_event``
hook that prints candidate n of m and the elapsed time — plain lines on a pipe
or file, one updating line on a terminal — and the text helpers it shares with
the command line."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional, TextIO

from ._markers import hookimpl
from .config import Config

_BAR = 20


def config_text(config: Any) -> str:
    """``BLOCK=64, num_warps=4`` for a ``Config.to_dict()`` form (or its repr)."""
    if isinstance(config, dict):
        try:
            text = str(Config.from_dict(config))
        except (TypeError, ValueError):
            return repr(config)
        return text or "(no kwargs)"
    return str(config)


def is_skipped(error: Any) -> bool:
    """Whether a candidate's error says it was not run (the search's budget, a build timed already, a crash
    in an earlier search) rather than that it failed."""
    return str(error or "").startswith("skipped:")


def first_line(text: Any) -> str:
    """The first line of ``text`` (stripped), or ``""``."""
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{int(s // 60)} min {int(s % 60):02d} s"


class Progress:
    """Reports the ``search_start``, ``candidate``, ``retime`` and ``search_end`` events of one
    tune. Register it on the plugin manager (``pm.register(progress)``): its
    ``flyautotune_tuning_event`` method is a hook implementation.

    :param label: what is being tuned (``"rmsnorm 4x256 bf16"``), printed first.
    :param stream: where to write (default ``sys.stderr``).
    :param tty: force the terminal (one updating line) or plain-line mode;
        default: ``stream.isatty()``.
    :param every_s: in plain-line mode, write a candidate's or a re-timing round's line only when this many
        seconds have passed since the last line (0: every one, as ``flyautotune tune``); the start and end of
        the search are always written.
    """

    def __init__(self, label: str, stream: Optional[TextIO] = None, tty: Optional[bool] = None,
                 tick_s: float = 0.5, every_s: float = 0.0) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.tick_s = tick_s
        self.every_s = every_s
        self._last_line = time.perf_counter()
        self.total = 0
        self.done = 0
        self.failed = self.skipped = 0
        self.phase = ""  # what runs after the first pass (the re-timing rounds), for the live line
        self.started: Optional[float] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None
        self._line_open = False
        self._last_event: Any = None

    # -- the receiver ----------------------------------------------------------------
    @hookimpl
    def flyautotune_tuning_event(self, event: dict) -> None:
        if event is self._last_event:  # one event delivered twice (hook and a listener bridge)
            return
        self._last_event = event
        kind = event.get("event")
        if kind == "search_start":
            self._start(int(event.get("candidates") or 0))
        elif kind == "candidate":
            self._candidate(event)
        elif kind == "retime":
            self._retime(event)
        elif kind == "search_end":
            self._end(event)

    def __call__(self, event: dict) -> None:
        """The same, as a plain listener callback."""
        self.flyautotune_tuning_event(event)

    def begin(self, what: str) -> None:
        """Say what is starting before any event arrives (building inputs, picking a config)."""
        with self._lock:
            if self.tty:
                self._write(f"\r\x1b[K{self.label}: {what}")
                self._line_open = True
            else:
                self._write(f"{self.label}: {what}\n")

    def _start(self, total: int) -> None:
        with self._lock:
            self.total, self.done, self.failed, self.skipped = total, 0, 0, 0
            self.phase = ""
            self.started = time.perf_counter()
            if self.tty:
                self._draw(f"candidate 1 of {total}")
            else:
                self._write(f"{self.label}: searching {total} candidates\n")
        if self.tty and self._ticker is None:
            self._stop.clear()
            # A candidate can take many seconds (interpreter, first compile): keep the clock moving.
            self._ticker = threading.Thread(target=self._tick, name="flyautotune-progress", daemon=True)
            self._ticker.start()

    def _candidate(self, event: dict) -> None:
        with self._lock:
            self.done = int(event.get("index") or self.done + 1)
            self.total = int(event.get("total") or self.total)
            error = event.get("error")
            skipped = is_skipped(error)
            if skipped:
                self.skipped += 1
            elif error:
                self.failed += 1
            if self.tty:
                nxt = min(self.done + 1, self.total)
                self._draw(f"candidate {nxt} of {self.total}" if self.done < self.total else "finishing")
                return
            if not self._due():
                return
            ms = event.get("ms")
            result = _one_line(error) if skipped else f"failed: {_one_line(error)}" if error else f"{ms:.4f} ms"
            if event.get("reused") and not error:
                result += " (stored timing)"
            self._write(f"{self.label}: candidate {self.done} of {self.total} "
                        f"[{config_text(event.get('config'))}] {result} "
                        f"(elapsed {seconds(self._elapsed())})\n")

    def _retime(self, event: dict) -> None:
        with self._lock:
            finalists = event.get("finalists") or []
            self.phase = (f"re-timing the default and the best {max(len(finalists) - 1, 1)} side by side, "
                          f"round {event.get('round')} of at most {event.get('most')}")
            if self.tty:
                self._draw(self.phase)
            elif self._due():
                self._write(f"{self.label}: {self.phase} (elapsed {seconds(self._elapsed())})\n")

    def _end(self, event: dict) -> None:
        self.close()
        with self._lock:
            duration = event.get("duration_s")
            took = seconds(duration if isinstance(duration, (int, float)) else self._elapsed())
            failed = f", {self.failed} failed" if self.failed else ""
            skipped = f", {self.skipped} skipped" if self.skipped else ""
            self._write(f"{self.label}: searched {self.total} candidates in {took}{failed}{skipped}\n")

    # -- drawing -----------------------------------------------------------------------
    def _due(self) -> bool:
        """Whether a plain line may be written now (``every_s`` since the last one)."""
        return not self.every_s or time.perf_counter() - self._last_line >= self.every_s

    def _elapsed(self) -> float:
        return 0.0 if self.started is None else time.perf_counter() - self.started

    def _draw(self, what: str) -> None:
        total = max(self.total, 1)
        filled = int(_BAR * self.done / total)
        bar = "#" * filled + "-" * (_BAR - filled)
        self._write(f"\r\x1b[K{self.label}: [{bar}] {what} ({seconds(self._elapsed())})")
        self._line_open = True

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self._lock:
                if self.done < self.total:
                    self._draw(f"candidate {self.done + 1} of {self.total}")
                elif self.phase:
                    self._draw(self.phase)

    def _write(self, text: str) -> None:
        if self._line_open and not text.startswith("\r"):
            text = "\r\x1b[K" + text  # replace the live line instead of appending to it
            self._line_open = False
        if text.endswith("\n"):
            self._last_line = time.perf_counter()
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe must not fail the tune
            pass

    def close(self) -> None:
        """Stop the terminal ticker (idempotent)."""
        self._stop.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join()


def _one_line(text: Any) -> str:
    line = first_line(text)
    return line if len(line) <= 160 else line[:157] + "..."
