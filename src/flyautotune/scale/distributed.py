"""Agreement across the ranks of a ``torch.distributed`` job: one winner per key on every rank.

Inside ``with distributed(group):`` a cold key is tuned once by the whole group:
rank 0's stored winner (if any) is broadcast and wins everywhere; otherwise the
ranks split the candidates round-robin, time their share, gather every timing and
apply one deterministic decision. Every collective is bounded by ``timeout_s``: a
failure or a timeout gives ``Agreement.failed`` on that rank (the caller runs the
default), with one warning, and the group is not used for agreement again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Optional

import attrs

log = logging.getLogger("flyautotune.scale")


@attrs.frozen
class DistributedSettings:
    """What ``distributed(...)`` set for this thread: the group (None: the default
    group) and the bound on every collective, in seconds."""

    group: Any = None
    timeout_s: float = 60.0


@attrs.frozen
class Agreement:
    """The group's answer for one key.

    :param winner: the chosen candidate index (None when a stored config was
        broadcast, or on failure).
    :param config: rank 0's stored winner (``Config.to_dict()`` form), broadcast to all.
    :param writer: True on the one rank that writes the store (rank 0 of the group).
    :param failed: why agreement failed; then every rank runs the default.
    """

    winner: Optional[int] = None
    config: Optional[dict] = None
    writer: bool = False
    failed: Optional[str] = None


class AgreementError(RuntimeError):
    """A collective failed or timed out."""


_local = threading.local()
_broken: dict = {}  # id(group) -> why: a group whose collective failed is not used again
_broken_lock = threading.Lock()


def _positive_timeout(instance: Any, attribute: Any, value: Any) -> None:
    # A zero, negative or NaN bound would fail every collective; an infinite one could hang the job.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {value!r}")


@contextlib.contextmanager
def distributed(group: Any = None, timeout_s: float = 60.0) -> Iterator[DistributedSettings]:
    """Make tuning inside the block agree across ``group``'s ranks (this thread only; nests).

    Enter it on every rank of the group, around the same calls: a cold key is
    timed by all ranks together and every rank runs the same winner.

    :param group: a ``torch.distributed`` process group; None: the default group.
    :param timeout_s: the most any tuning collective may wait; past it every rank
        falls back to the default config, with one warning.
    :yields: the :class:`DistributedSettings` in force.
    """
    _positive_timeout(None, None, timeout_s)
    settings = DistributedSettings(group, float(timeout_s))
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(settings)
    try:
        yield settings
    finally:
        stack.pop()


def active() -> Optional[DistributedSettings]:
    """The innermost ``distributed(...)`` settings of this thread, or None outside any."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def _fail(group: Any, why: str, remember: bool = True) -> Agreement:
    with _broken_lock:
        first = id(group) not in _broken
        if remember:
            _broken.setdefault(id(group), why)
    if first:
        warnings.warn(f"flyautotune: ranks could not agree on a config ({why}); every rank runs the default "
                      f"config, and tuning does not use this process group again", RuntimeWarning, stacklevel=3)
    return Agreement(failed=why)


class _Bounded:
    """Runs collectives on ``group`` against a deadline: each waits at most the time left."""

    def __init__(self, dist: Any, group: Any, timeout_s: float) -> None:
        self.dist, self.group = dist, group
        self.timeout_s = timeout_s
        self.restart()
        backend = str(dist.get_backend(group)).lower()
        if backend == "gloo":
            self.device = "cpu"
        else:  # NCCL and other device backends move device tensors
            from ..devices import current_device

            self.device = current_device()

    def restart(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    def wait(self, work: Any, what: str) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise AgreementError(f"{what}: no time left of the {self.timeout_s:g} s bound")
        try:
            ok = work.wait(timeout=datetime.timedelta(seconds=left))
        except Exception as exc:
            raise AgreementError(f"{what} failed or timed out after {self.timeout_s:g} s: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        if ok is False:
            raise AgreementError(f"{what} timed out after {self.timeout_s:g} s")

    def broadcast(self, tensor: Any, src: int, what: str) -> None:
        self.wait(self.dist.broadcast(tensor, src=src, group=self.group, async_op=True), what)

    def all_gather(self, tensor: Any, size: int, what: str) -> list:
        out = [tensor.new_empty(tensor.shape) for _ in range(size)]
        self.wait(self.dist.all_gather(out, tensor, group=self.group, async_op=True), what)
        return out


def agree(*, key: str, n_candidates: int, time_some: Callable[[list], dict], decide: Callable[[dict], int],
          stored: Optional[dict], group: Any = None, timeout_s: float = 60.0) -> Agreement:
    """Agree on one winner for ``key`` across ``group``'s ranks; call it on every rank.

    :param key: the canonical key (for messages; every rank must pass the same one).
    :param n_candidates: how many candidates the search has (the same on every rank).
    :param time_some: ``time_some(indices) -> {index: ms or None}`` times this rank's
        share of the candidates (None: the candidate failed).
    :param decide: ``decide({index: ms}) -> index``, deterministic: every rank applies
        it to the same gathered timings.
    :param stored: this rank's stored winner (``Config.to_dict()`` form) or None; only
        rank 0's counts, and it is broadcast.
    :param group: the process group (None: the default group).
    :param timeout_s: the bound on each phase: the stored-winner broadcast, and the
        gather after this rank timed its share (which includes waiting for slower
        ranks to finish timing theirs).
    :returns: an :class:`Agreement`; ``failed`` set (and one warning issued per
        group) when a collective failed or timed out.
    """
    _positive_timeout(None, None, timeout_s)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return _fail(group, "torch.distributed is not available", remember=False)
    if not (dist.is_available() and dist.is_initialized()):
        return _fail(group, "torch.distributed is not initialized (call init_process_group first)", remember=False)
    with _broken_lock:
        broken = _broken.get(id(group))
    if broken is not None:
        return Agreement(failed=f"agreement is off after an earlier failure: {broken}")
    try:
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        root = dist.get_global_rank(group, 0) if group is not None else 0
        io = _Bounded(dist, group, timeout_s)
        # 1. rank 0's stored winner wins everywhere.
        blob = json.dumps(stored, sort_keys=True).encode() if rank == 0 and stored is not None else b""
        length = torch.tensor([len(blob)], dtype=torch.int64, device=io.device)
        io.broadcast(length, root, f"broadcasting rank 0's stored winner for {key}")
        n = int(length.item())
        if n:
            data = torch.tensor(list(blob) if rank == 0 else [0] * n, dtype=torch.uint8, device=io.device)
            io.broadcast(data, root, f"broadcasting rank 0's stored winner for {key}")
            return Agreement(config=json.loads(bytes(data.cpu().tolist()).decode()), writer=False)
        # 2. each rank times its round-robin share; NaN marks a failed candidate.
        mine = [i for i in range(n_candidates) if i % size == rank]
        try:
            timed = time_some(mine) if mine else {}
        except Exception as exc:  # this rank's share counts as failed; the others still gather
            log.warning("%s: timing candidates %s failed: %s: %s", key, mine, type(exc).__name__, exc)
            timed = {}
        io.restart()  # this rank's own timing does not eat the bound; waiting for slower ranks does
        row = torch.full((n_candidates,), math.nan, dtype=torch.float64, device=io.device)
        for i in mine:
            ms = timed.get(i)
            if ms is not None and math.isfinite(ms):
                row[i] = float(ms)
        rows = [r.cpu() for r in io.all_gather(row, size, f"gathering the timings for {key}")]
        gathered = {i: float(rows[i % size][i]) for i in range(n_candidates) if not math.isnan(rows[i % size][i])}
    except AgreementError as exc:
        return _fail(group, str(exc))
    except RuntimeError as exc:  # a collective that raised outright (a peer left, a closed connection)
        return _fail(group, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if not gathered:
        return Agreement(failed=f"every candidate failed on every rank for {key}", writer=False)
    winner = decide(gathered)
    return Agreement(winner=winner, writer=rank == 0)
