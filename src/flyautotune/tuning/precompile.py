"""Candidates compile ahead, in a thread pool, while earlier ones are timed: a cold search then costs
about the slowest compile plus the timing, not the sum of the compiles."""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional

from .. import context

log = logging.getLogger("flyautotune")


class Precompiler:
    """``precompile(config, **named)`` for every candidate, each with its own hints and target current
    (``named``: the call's arguments as ``callables.named_for`` gives them)."""

    def __init__(self, name: str, precompile: Callable[..., Any], named: dict) -> None:
        self.name = name
        self.precompile = precompile
        self.named = dict(named)
        self.pool: Optional[ThreadPoolExecutor] = None
        self.futures: dict = {}

    def start(self, jobs: Iterable[tuple]) -> None:
        """``jobs``: ``(candidate, plan)`` pairs; the plan's hint layers and launch target are installed
        in the worker thread around the call."""
        jobs = list(jobs)
        if len(jobs) < 2:
            return
        workers = max(1, min(8, os.cpu_count() or 1, len(jobs)))
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flyautotune-precompile")
        for cand, plan in jobs:
            self.futures[id(cand)] = self.pool.submit(context.launch_with, plan.layers, plan.launch,
                                                      self.precompile, (cand.config,), self.named)

    def wait(self, cand: Any) -> Optional[str]:
        """Block until ``cand`` is compiled; a failure here is left for the timed run to report.

        :returns: what ``precompile`` returned when it is a string (the build's identity: candidates
            whose builds are named alike run the same code), else None."""
        future: Optional[Future] = self.futures.get(id(cand))
        if future is None:
            return None
        try:
            built = future.result()
        except Exception as exc:
            log.debug("%s: precompile(...) of %s raised %s: %s", self.name, cand.config, type(exc).__name__, exc)
            return None
        return built if isinstance(built, str) and built else None

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
