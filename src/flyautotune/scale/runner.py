"""Running a plan one key after another, progress across the plan, the summary and the pack."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, TextIO

import attrs

from ..devices import restore_triton_interpret, use_triton_interpreter
from .plan import Plan, PlanKey, plugin_manager_for

log = logging.getLogger("flyautotune.scale")


@attrs.frozen
class KeyResult:
    """What one key of a plan gave.

    :param key: the plan key.
    :param source: ``search`` (tuned now), ``store`` (a winner stored earlier),
        ``single`` (one candidate fits: nothing to time), ``skipped`` (budget spent)
        or ``error``.
    :param config: the winner, ``Config.to_dict()`` form (None on error/skip).
    :param ms: the winner's time where one was measured.
    :param seconds: wall time spent on the key.
    :param entry: the winner as a pack entry (``StoreEntry.to_pack_dict()``), when stored.
    :param error: why the key failed.
    :param worker: which process tuned it (pid, or a Ray node/worker id).
    """

    key: PlanKey
    source: str
    config: Optional[dict] = None
    ms: Optional[float] = None
    seconds: float = 0.0
    entry: Optional[dict] = None
    error: Optional[str] = None
    worker: str = ""

    def to_dict(self) -> dict:
        return {**attrs.asdict(self, recurse=False), "key": self.key.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "KeyResult":
        return cls(**{**d, "key": PlanKey.from_dict(d["key"])})


@attrs.frozen
class PlanResult:
    """Every key's result, in plan order, and the plan's wall time."""

    results: tuple = attrs.field(converter=tuple)
    seconds: float = 0.0
    engine: str = "serial"

    def failed(self) -> list:
        return [r for r in self.results if r.source == "error"]

    def entries(self) -> list:
        """The winners as ``StoreEntry`` objects (one per stored key)."""
        from ..store import PACK_FORMAT, PACK_VERSION, load_pack

        docs = [r.entry for r in self.results if r.entry is not None]
        if not docs:
            return []
        # Through the pack parser: entries that crossed a process boundary are validated like a pack.
        return load_pack(json.dumps({"format": PACK_FORMAT, "version": PACK_VERSION, "entries": docs}))


class PlanInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a plan. A ``KeyboardInterrupt``, so callers that catch that still see one.

    :param result: the keys that finished before it, in plan order; their winners are in this process's store.
    :param total: how many keys the plan has.
    """

    def __init__(self, result: PlanResult, total: int) -> None:
        super().__init__(f"interrupted after {len(result.results)} of {total} keys")
        self.result = result
        self.total = total


def _best_ms(timings: Iterable[dict], config: dict) -> Optional[float]:
    for t in timings:
        if t.get("config") == config and t.get("ms") is not None:
            return float(t["ms"])
    return None


def tune_key(adopter: Any, key: PlanKey, device: str, force: bool = False) -> KeyResult:
    """Tune one key in this process: build inputs with ``adopter.example``, map them
    with ``adopter.bind`` and call ``adopter.tuner.select``. A key without a stored
    winner (default, pack or a remembered default) is searched; failures are returned, not raised."""
    t0 = time.perf_counter()
    try:
        args, kwargs = adopter.example(key.shape, key.dtype, device)
        targs, tkw = adopter.bind(*args, **kwargs)
        tuner = adopter.tuner
        sel = tuner.select(*targs, force=force, **tkw)
        entry = tuner.store().get(tuner.name, sel.key)
        if entry is None and not force:  # a default or a shipped pack answered: tuning means searching here
            sel = tuner.select(*targs, force=True, **tkw)
            entry = tuner.store().get(tuner.name, sel.key)
    except Exception as exc:  # one bad key must not stop the plan
        log.warning("%s: %s: %s", key.label(), type(exc).__name__, exc)
        return KeyResult(key, "error", seconds=time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}",
                         worker=str(os.getpid()))
    config = sel.config.to_dict() if sel.config.pre_hook is None else None
    timings = sel.timings or (entry.timings if entry is not None else ())
    if sel.source == "search" and entry is not None and timings:
        source = "search"
    elif sel.source == "search" or entry is None:
        source = "single"  # one candidate fits: nothing was timed (a forced selection stores it untimed)
    else:
        source = "store"
    return KeyResult(key, source, config, _best_ms(timings, config), time.perf_counter() - t0,
                     entry.to_pack_dict() if entry is not None else None, worker=str(os.getpid()))


def look_up_key(adopter: Any, key: PlanKey, device: str, why: str) -> KeyResult:
    """A key that may not search (``why``: the plan's budget is spent): its stored winner, looked up as a
    search would look it up first, else ``skipped``. Nothing is timed; a stored key still reaches the pack."""
    t0 = time.perf_counter()
    from ..tuning.lookup import without_search

    try:
        args, kwargs = adopter.example(key.shape, key.dtype, device)
        targs, tkw = adopter.bind(*args, **kwargs)
        tuner = adopter.tuner
        sel, entry = without_search(tuner, targs, tkw)  # the stored row comes with it: one read
    except Exception as exc:  # as tune_key: one bad key must not stop the plan
        return KeyResult(key, "skipped", seconds=time.perf_counter() - t0,
                         error=f"{why} (its stored winner could not be looked up: {type(exc).__name__}: {exc})",
                         worker=str(os.getpid()))
    if entry is None:  # only a search could answer
        return KeyResult(key, "skipped", seconds=time.perf_counter() - t0, error=why, worker=str(os.getpid()))
    config = sel.config.to_dict() if sel.config.pre_hook is None else None
    return KeyResult(key, "store", config, _best_ms(entry.timings, config), time.perf_counter() - t0,
                     entry.to_pack_dict(), worker=str(os.getpid()))


#: On a pipe or a file (CI), the longest a plan stays silent while its keys are searched, where a line can say
#: anything new: a search's candidate lines, and the keys a Ray run has in flight, come at most this often.
EVERY_S = 30.0


class PlanProgress:
    """A plan's progress: a line per finished key (keys done, keys left, the time to go), and while a key runs,
    which key it is and how its search goes (serial: the core's search progress; Ray: the keys in flight).

    :param stream: where to write (default ``sys.stderr``).
    :param tty: one updating line for the key in flight (a terminal) or plain lines (a pipe, a file, CI);
        default: ``stream.isatty()``.
    :param every_s: in plain-line mode, the shortest time between two lines about the keys in flight.
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None, tty: Optional[bool] = None,
                 every_s: float = EVERY_S) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self.every_s = every_s
        self.done = 0
        self.t0 = time.perf_counter()
        self.running: dict = {}  # PlanKey -> when it started (keys on Ray workers)
        self.searches: dict = {}  # PlanKey -> how its search on a Ray worker goes: a Progress, or the live text
        self._last_line = self.t0

    def eta(self) -> Optional[float]:
        """Seconds to go: elapsed time per finished key times the keys left (with many
        workers, keys finish faster, so the rate already counts them)."""
        if not self.done:
            return None
        return (time.perf_counter() - self.t0) / self.done * (self.total - self.done)

    def key_progress(self, key: PlanKey, where: str) -> Any:
        """The key about to be tuned in this process: says so, and returns the core's search progress for it
        (a ``flyautotune_tuning_event`` receiver, as ``flyautotune tune`` shows). Close it when the key ends."""
        from ..progress import Progress

        progress = Progress(f"[{self.done + 1}/{self.total}] {key.label()}", self.stream, self.tty,
                            every_s=0.0 if self.tty else self.every_s)
        progress.begin(f"tuning on {where}")
        return progress

    def started(self, key: PlanKey) -> None:
        """A key handed to a Ray worker."""
        self.running[key] = time.perf_counter()
        self._line(f"started {key.label()} on a Ray worker ({len(self.running)} running, {self.done} of "
                   f"{self.total} done)")

    def key_event(self, key: PlanKey, event: dict) -> None:
        """A tuning event of ``key``'s search on a Ray worker. On a plain stream, the search's lines as
        ``flyautotune tune`` writes them, each prefixed by the key (a candidate's line at most every ``every_s``
        per key); on a terminal, the key's part of the live line of :meth:`tick`. A ``retry`` event (Ray runs
        the key again: its worker died) is a line of its own, and the key's search starts over."""
        from ..progress import Progress

        if key not in self.running:  # late news of a key already reported
            return
        if event.get("event") == "retry":
            search = self.searches.pop(key, None)
            if search is not None and not isinstance(search, str):
                search.close()
            self._line(f"{key.label()}: its worker died; retrying (attempt {event.get('attempt')})")
            if self.tty:
                self.searches[key] = f"retrying (attempt {event.get('attempt')})"
            return
        if not self.tty:
            search = self.searches.get(key)
            if search is None:
                search = self.searches[key] = Progress(key.label(), self.stream, False, every_s=self.every_s)
            search(event)
            return
        kind = event.get("event")
        if kind == "search_start":
            self.searches[key] = f"candidate 1 of {event.get('candidates')}"
        elif kind == "candidate":
            index, total = int(event.get("index") or 0), int(event.get("total") or 0)
            self.searches[key] = f"candidate {index + 1} of {total}" if index < total else "finishing"
        elif kind == "retime":
            self.searches[key] = f"re-timing the finalists, round {event.get('round')} of at most {event.get('most')}"
        elif kind == "search_end":
            self.searches[key] = "searched"

    def tick(self) -> None:
        """Call while waiting for Ray's keys: a terminal's live line shows the keys in flight, how their search
        goes and their time; a plain stream gets a line about them every ``every_s``."""
        from ..progress import seconds

        if not self.running:
            return
        now = time.perf_counter()
        keys = sorted(self.running.items(), key=lambda kv: kv[1])

        def state(key: PlanKey) -> str:
            search = self.searches.get(key)
            return f"{search}, " if isinstance(search, str) else ""

        what = ", ".join(f"{k.label()} ({state(k)}{seconds(now - t)})" for k, t in keys[:3])
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        text = f"running {what}{more}; {self.done} of {self.total} done"
        if self.tty:
            self._write(f"\r\x1b[K{text}")
        elif now - self._last_line >= self.every_s:
            self._line(text)

    def __call__(self, result: KeyResult) -> None:
        from ..progress import seconds

        self.running.pop(result.key, None)
        search = self.searches.pop(result.key, None)
        if search is not None and not isinstance(search, str):
            search.close()
        self.done += 1
        eta = self.eta()
        what = f"{result.source}" + (f" {result.ms:.4g} ms" if result.ms is not None else "")
        if result.error:
            what += f" ({result.error.splitlines()[0][:80]})"
        self._line(f"[{self.done}/{self.total}] {result.key.label()}: {what}; {self.total - self.done} left"
                   + (f", ETA {seconds(eta)}" if eta is not None and self.done < self.total else ""))

    def _line(self, text: str) -> None:
        # On a terminal a live line may be open (a key's search, the keys in flight): replace it.
        self._write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self._last_line = time.perf_counter()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe must not stop the plan
            pass


def summary_table(result: PlanResult) -> str:
    """A text table: one row per key with its source, winner, time and seconds spent."""
    from ..progress import config_text, seconds

    rows = [("key", "source", "winner", "ms", "took")]
    for r in result.results:
        rows.append((r.key.label(), r.source, config_text(r.config) if r.config is not None else (r.error or "-"),
                     f"{r.ms:.4g}" if r.ms is not None else "-", f"{r.seconds:.1f} s"))
    widths = [max(len(str(row[c])) for row in rows) for c in range(5)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    counts = {}
    for r in result.results:
        counts[r.source] = counts.get(r.source, 0) + 1
    n = len(result.results)
    lines.append(f"{n} key{'' if n == 1 else 's'} in {seconds(result.seconds)} ({result.engine}): "
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def pick_device(requested: Optional[str]) -> str:
    """``requested``, else the first accelerator device when torch sees one, else ``cpu``."""
    if requested:
        return requested
    from ..devices import default_device

    return default_device()


@contextlib.contextmanager
def _receiving(pm: Any, receiver: Any) -> Iterator[None]:
    """``receiver`` (None: nothing) gets the tuning events of ``pm`` inside the block, and is closed after."""
    if receiver is None:
        yield
        return
    name = f"flyautotune.scale.progress.{id(receiver)}"
    pm.register(receiver, name=name)
    try:
        yield
    finally:
        pm.unregister(name=name)
        receiver.close()


def run_serial(plan: Plan, *, device: Optional[str] = None, force: Optional[bool] = None,
               progress: Any = None, pm: Any = None) -> PlanResult:
    """Tune every key of ``plan`` in this process, one after another; winners land
    in this process's store (``FLYAUTOTUNE_CACHE_DIR``).

    :param device: overrides ``options.device``.
    :param force: overrides ``options.force``.
    :param progress: called with each :class:`KeyResult` as it finishes; where it has ``key_progress(key,
        device)`` (as :class:`PlanProgress` has), the receiver that returns gets each key's tuning events.
    :raises PlanInterrupted: on Ctrl-C, with the keys that finished (their winners are stored already).
    """
    opts = plan.options
    device = pick_device(device or opts.device)
    force = opts.force if force is None else force
    with restore_triton_interpret():  # the interpreter for this run only
        if device == "cpu":  # before the plugins import their kernels: @triton.jit reads it when it decorates
            use_triton_interpreter()
        pm = pm if pm is not None else plugin_manager_for(opts.plugins)
        key_progress = getattr(progress, "key_progress", None)
        t0 = time.perf_counter()
        out = []
        try:
            for key in plan.keys:
                adopter = pm.get_adopter(key.adopter)
                if out and opts.budget_s is not None and time.perf_counter() - t0 > opts.budget_s:
                    # The budget stops searches; a stored winner costs a lookup and still ships in the pack.
                    why = f"budget of {opts.budget_s:g} s spent"
                    r = KeyResult(key, "skipped", error=why) if force else look_up_key(adopter, key, device, why)
                else:
                    with _receiving(adopter.tuner.pm, key_progress(key, device) if key_progress else None):
                        r = tune_key(adopter, key, device, force)
                out.append(r)
                if progress is not None:
                    progress(r)
        except KeyboardInterrupt:
            raise PlanInterrupted(PlanResult(out, time.perf_counter() - t0, "serial"), len(plan.keys)) from None
    return PlanResult(out, time.perf_counter() - t0, "serial")


def pack_problem(path: Any) -> str:
    """Why the pack cannot be written to ``path``, or ``""``: checked before any key is tuned, by creating (and
    removing) a file in its folder, or in the nearest folder above it that exists (``write_pack`` makes the rest).
    Nothing is left behind."""
    path = Path(path)
    if path.is_dir():
        return "it is a folder"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder, so the pack's folder cannot be made"
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".probe")
    except OSError as exc:
        what = "its folder" if folder == path.parent else f"{folder}, where its folder would be made,"
        return f"{what} is not writable ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return ""


def write_pack(result: PlanResult, path: Any) -> int:
    """Write the plan's winners to ``path`` as one canonical pack (atomically); returns the entry count."""
    from ..store import dump_pack

    entries = result.entries()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump_pack(entries))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(entries)


def merge_into_store(result: PlanResult, store: Any = None) -> int:
    """Write the winners tuned elsewhere (source ``search``, or ``single`` where the only candidate was
    stored) into ``store`` (default: this process's); returns how many were written."""
    from ..plugins import plugin_manager

    store = store if store is not None else plugin_manager().hook.flyautotune_store()
    searched = {(r.entry["tuner"], r.entry["key"]) for r in result.results
                if r.source in ("search", "single") and r.entry}
    n = 0
    for e in result.entries():
        if (e.tuner, e.key) in searched:
            n += bool(store.put(e.tuner, e.key, e.timing_key or e.key, e.config, list(e.timings), e.provenance))
    return n
