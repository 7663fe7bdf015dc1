"""Agreement across the ranks of a ``torch.distributed`` job: one config per key on every rank.

Inside ``with distributed(group):`` every rank's first lookup of a key is one
collective of the whole group. The ranks first check that they all ask about the
same key; then rank 0's own answer wins everywhere: its stored or shipped winner
(broadcast, and checked by every rank), or its decision to run the default. Only
where rank 0 would search do the ranks split the candidates round-robin, time
their share and gather every timing (given a reference, every rank times it
too, and each rank's timings are read against its own timing of it, so the
ranks' devices need not be equally fast); then every rank re-times the default
and the best challengers side by side on its own device, the ranks gather each
one's verdicts, and every rank applies one deterministic decision. Every
collective is bounded by ``timeout_s``: a failure or a timeout gives
``Agreement.failed`` (the caller runs the default), with one warning, and the
group is not used for agreement again.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import logging
import math
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator, Optional, Sequence

import attrs

log = logging.getLogger("flyautotune.scale")


@attrs.frozen
class DistributedSettings:
    """What ``distributed(...)`` set for this thread: the group (None: the default
    group) and the bound on every collective, in seconds."""

    group: Any = None
    timeout_s: float = 60.0
    #: what plans agreed in this block are marked with (:func:`_token`), taken at the block's entry
    token: int = attrs.field(default=0, eq=False, repr=False)


@attrs.frozen
class Agreement:
    """The group's answer for one key.

    :param winner: the chosen candidate index (None when rank 0's answer was
        broadcast, or on failure).
    :param config: rank 0's stored winner (``Config.to_dict()`` form), broadcast to all.
    :param source: where rank 0 found ``config`` (``store`` or ``pack``).
    :param default: every rank runs the default: rank 0 would (a miss, not forced),
        or a rank could not use rank 0's winner.
    :param writer: True on the one rank that writes the store (rank 0 of the group).
    :param failed: why agreement failed; then every rank runs the default.
    :param margin: where the ranks re-timed the finalists: the winner's gain over
        the default on the group's evidence (``0.0`` when the default was kept),
        else None.
    :param noise: where the ranks re-timed the finalists: the band the decision
        used, else None.
    """

    winner: Optional[int] = None
    config: Optional[dict] = None
    source: Optional[str] = None
    default: bool = False
    writer: bool = False
    failed: Optional[str] = None
    margin: Optional[float] = None
    noise: Optional[float] = None


class AgreementError(RuntimeError):
    """A collective failed or timed out."""


_local = threading.local()
_broken: dict = {}  # _token(group) -> why: a group whose collective failed is not used again
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

    Every rank's first lookup of a key inside the block is one collective (a
    config this process chose outside a block of this group is chosen again:
    entering the block drops it from memory), and every rank runs rank 0's answer.

    :param group: a ``torch.distributed`` process group; None: all ranks, through a
        gloo group of flyautotune's own, made on the first entry (so a tuning
        collective that times out never leaves the job's own group out of step).
        Making it is a collective of every rank, as entering the block is anyway.
    :param timeout_s: the most any tuning collective may wait; past it every rank
        falls back to the default config, with one warning.
    :yields: the :class:`DistributedSettings` in force.
    """
    _positive_timeout(None, None, timeout_s)
    _check_member(group)
    if group is None:
        tuning_group(None)  # made here, where every rank is, not at a later lookup one rank may skip
    settings = DistributedSettings(group, float(timeout_s), _token(group))
    _forget_unagreed(settings)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(settings)
    try:
        yield settings
    finally:
        stack.pop()
        if stack and stack[-1].token != settings.token:
            _forget_unagreed(stack[-1])  # back in the enclosing block: its group's plans, not this one's


def _check_member(group: Any) -> None:
    """A rank outside ``group`` cannot take part in its agreement: say so where the block is entered."""
    if group is None:
        return
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        rank = dist.get_rank(group)
    except Exception:  # not a process group torch knows: the first collective says what is wrong with it
        return
    if rank < 0:
        raise ValueError(f"fat.distributed: this process (rank {dist.get_rank()} of the job) is not a member of "
                         f"the group it was given; enter a subgroup's block on its members only (where "
                         f"torch.distributed.get_rank(group) >= 0)")


_own: dict = {}  # "group": (weak WORLD, weak gloo group over every rank or None), made once per WORLD


def tuning_group(group: Any) -> Any:
    """The group tuning collectives of ``distributed(group)`` run on: ``group`` itself, or for None a gloo group
    over every rank of the default group, made once (a collective: every rank calls it, at its first block).
    Falls back to the default group (None) where one cannot be made (not initialized, no gloo)."""
    if group is not None:
        return group
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.group.WORLD
    with _broken_lock:
        own = _own.get("group")
        if own is not None and own[0]() is world:
            made = own[1]() if own[1] is not None else None
            if made is not None or own[1] is None:
                return made
    try:
        made = dist.new_group(backend="gloo")
    except Exception as exc:  # no gloo in this build: the default group carries the collectives
        log.warning("flyautotune: could not make a gloo group for tuning (%s: %s); tuning collectives use the "
                    "default group", type(exc).__name__, exc)
        made = None
    with _broken_lock:
        # Held weakly: torch holds its groups until destroy_process_group; a group kept alive past that is
        # torn down at interpreter exit, where gloo's threads abort the process.
        _own["group"] = (weakref.ref(world), weakref.ref(made) if made is not None else None)
    return made


def _forget_unagreed(settings: DistributedSettings) -> None:
    """Drop from every tuner's memory the configs not agreed in this group, so each key's first lookup in the
    block is a collective on every rank (a rank that chose a key alone would skip it, and the others wait)."""
    from ..tuning.decorator import forget_unagreed

    forget_unagreed(settings.token)


_serials: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # group -> its token
_serials_kept: dict = {}  # the same, for a group that takes no weak reference
_next_serial = itertools.count(1)
_serial_lock = threading.Lock()


def _token(group: Any) -> int:
    """What marks a group in this process: the plans agreed in it, its failure, its warning, its lock. A
    number of its own for each group object (None: the job's default group, as it is now; 0 where there is
    none), never reused: after ``destroy_process_group`` and ``init_process_group`` again, the new job's
    group is another group, and nothing agreed or failed in the old one counts for it (an ``id()`` could
    be the old object's, once it is freed)."""
    if group is None:
        group = _world()
        if group is None:
            return 0
    with _serial_lock:
        try:
            token = _serials.get(group)
            table: Any = _serials
        except TypeError:  # no weak reference to it (a name in a test, a sentinel): kept
            token = _serials_kept.get(group)
            table = _serials_kept
        if token is None:
            token = table[group] = next(_next_serial)
        return token


def _world() -> Any:
    """The job's default group now, or None outside an initialized job."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.group.WORLD


def agreed_token() -> Optional[int]:
    """The token of the group this thread's cold lookups agree in (None outside ``distributed``)."""
    stack = getattr(_local, "stack", None)
    return stack[-1].token if stack else None


def active() -> Optional[DistributedSettings]:
    """The innermost ``distributed(...)`` settings of this thread, or None outside any."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def _fail(group: Any, why: str, remember: bool = True) -> Agreement:
    token = _token(group)
    with _broken_lock:
        first = token not in _broken
        if remember:
            _broken.setdefault(token, why)
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

    def wait(self, work: Any, what: str, hint: str = "") -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise AgreementError(f"{what}: no time left of the {self.timeout_s:g} s bound{hint}")
        try:
            ok = work.wait(timeout=datetime.timedelta(seconds=left))
        except Exception as exc:
            from ..progress import first_line

            raise AgreementError(f"{what} failed or timed out after {self.timeout_s:g} s: "
                                 f"{first_line(exc) or type(exc).__name__}{hint}") from exc
        if ok is False:
            raise AgreementError(f"{what} timed out after {self.timeout_s:g} s{hint}")

    def broadcast(self, tensor: Any, src: int, what: str) -> None:
        self.wait(self.dist.broadcast(tensor, src=src, group=self.group, async_op=True), what)
        _released([tensor])

    def all_gather(self, tensor: Any, size: int, what: str, hint: str = "") -> list:
        out = [tensor.new_empty(tensor.shape) for _ in range(size)]
        self.wait(self.dist.all_gather(out, tensor, group=self.group, async_op=True), what, hint)
        _released([tensor, *out])
        return out


def _released(tensors: list) -> None:
    """After a collective completed: wait (yielding the GIL, 0.1 s at most) until its worker thread has let
    go of its tensors. A gloo worker that drops the last C++ reference to a tensor Python made must take the
    GIL to release it; one that does so while the interpreter shuts down (a job that exits right after its
    last tuning call) aborts the process: ``terminate called without an active exception``. Usually the
    worker is done before the wait returns, and this costs one check."""
    for _ in range(200):
        try:
            if all(t._use_count() <= 1 for t in tensors):
                return
        except AttributeError:  # a torch without the count: nothing to wait for
            return
        time.sleep(0.0005)


def _key_words(key: str) -> list:
    """The key's SHA-256 as four signed 64-bit words (what the ranks compare)."""
    digest = hashlib.sha256(key.encode()).digest()
    return [int.from_bytes(digest[i:i + 8], "little", signed=True) for i in range(0, 32, 8)]


def _brief(key: str) -> str:
    return key if len(key) <= 160 else key[:160] + "..."


_mismatch_warned: set = set()


def _mismatch(group: Any, why: str) -> Agreement:
    """The ranks asked about different things (keys, candidate lists): every rank knows it (what they asked
    was gathered), so every rank runs the default for the key it asked about. Warned once per group; the
    group stays in use (the ranks are still in step: each joined the same collective)."""
    token = _token(group)
    with _broken_lock:
        first = token not in _mismatch_warned
        _mismatch_warned.add(token)
    if first:
        warnings.warn(f"flyautotune: {why}; every rank runs the default config for such keys",
                      RuntimeWarning, stacklevel=4)
    return Agreement(failed=why, default=True)


_locks: dict = {}  # _token(group) -> the lock its agreements take in this process


def _group_lock(group: Any) -> threading.RLock:
    """Two threads in blocks of one group would interleave their agreements' collectives (a broadcast of one
    meeting a gather of the other: a time-out, or gloo aborting the process on the size mismatch). Each
    agreement takes the group's lock, so its collectives run in a row; the threads' agreements still come
    in no set order, so where the ranks' orders differ, the key comparison tells (every rank runs the
    default). Reentrant: a launch timed in a search may itself make a tuned call in the block."""
    token = _token(group)
    with _broken_lock:
        lock = _locks.get(token)
        if lock is None:
            lock = _locks[token] = threading.RLock()
        return lock


def _confirm(io: _Bounded, size: int, what: str, hint: str = "") -> None:
    """One more collective after a gather that followed each rank's own work (its share of the timing, its
    check of rank 0's winner). A rank whose bound ran out in that gather has given up and runs the default,
    but its share of the gather was sent: the later ranks still complete it. Here they find it gone and
    time out too, so no rank runs a config the others do not. (Every rank leaves the gather together, so
    this step waits for no one's work.)"""
    import torch

    io.restart()
    io.all_gather(torch.ones(1, dtype=torch.int64, device=io.device), size, what, hint)


def agree(*, key: str, time_some: Callable[[list], dict], decide: Callable[[dict], int],
          stored: Optional[dict], n_candidates: Optional[int] = None,
          candidates: Optional[Callable[[], Sequence[str]]] = None, group: Any = None, timeout_s: float = 60.0,
          source: str = "store", use_default: bool = False,
          accept: Optional[Callable[[dict], bool]] = None,
          finalists: Optional[Callable[[dict], list]] = None,
          retime: Optional[Callable[[list], dict]] = None, reference: Optional[int] = None) -> Agreement:
    """Agree on one config for ``key`` across ``group``'s ranks; call it on every rank.

    :param key: the canonical key. Every rank must ask about the same one: the ranks
        compare it first, and where any differs every rank runs the default
        (``failed`` says which rank asked about another key), with one warning.
    :param time_some: ``time_some(indices) -> {index: ms or None}`` times this rank's
        share of the candidates (None: the candidate failed).
    :param decide: ``decide({index: ms}) -> index``, deterministic: every rank applies
        it to the same gathered timings.
    :param stored: this rank's stored winner (``Config.to_dict()`` form) or None; only
        rank 0's counts, and it is broadcast.
    :param n_candidates: how many candidates the search has; or
    :param candidates: ``candidates() -> [name, ...]``: the search's candidates, in
        order, each named alike on every rank; called only where the group searches.
        The ranks compare the lists: where any differs from rank 0's, every rank runs
        the default (one warning), as where a rank's ``candidates()`` raised, which is
        raised again on that rank once the others know.
    :param group: the process group (None: the default group).
    :param timeout_s: the bound on each phase: the key check and rank 0's answer, and
        the gather after this rank timed its share (which includes waiting for slower
        ranks to finish timing theirs).
    :param source: where this rank found ``stored`` (``store`` or ``pack``); rank 0's
        is broadcast with it.
    :param use_default: with no ``stored``, this rank would run its default (a miss,
        not forced); only rank 0's counts: then every rank runs the default, no search.
    :param accept: ``accept(config) -> bool``: whether this rank can run rank 0's
        broadcast winner. Every rank's answer is gathered; if any rank cannot, every
        rank runs the default.
    :param finalists: ``finalists({index: ms}) -> [index, ...]``, deterministic: from
        the gathered timings, the candidates every rank re-times, the default first
        (fewer than two: no re-timing, on every rank alike, and ``decide`` decides).
    :param retime: ``retime(finalists) -> {index: (gain, noise[, least])}``: this
        rank's side-by-side re-timing of the finalists on its own device, each one's
        gain over the default, the band it must beat and the part of that band the
        ranks' average must not narrow (0 where not given; the default's own entry,
        any tuple); a finalist missing failed on this rank and cannot win, and where the
        default is missing it failed (a challenger that stood there may have an
        infinite band: it is no failure). Every rank's verdicts are gathered; a
        challenger wins only where it beats the default on the group's evidence
        (:func:`flyautotune.tuning.search.group_verdict`), else the default wins;
        where the default failed, ``decide`` picks from the rest. A rank whose
        ``retime`` raises still joins the gather: no challenger wins there.
    :param reference: the index of a candidate every rank times (the default, first
        in the order): each rank with a share times it first, in its share (so
        ``time_some`` gets it on every such rank), and each rank's timings are read
        against its own timing of it before ``finalists`` picks and ``decide``
        decides: rank ``r``'s ``ms`` becomes ``ms * ref[owner] / ref[r]``, in the ms
        of the rank whose share holds the reference (rank 0 for index 0), so a
        slower or faster device neither hides a challenger it timed nor flatters
        one. A rank whose timing of the reference failed keeps its timings as
        measured (one log line names such ranks); where the owner's failed, the
        lowest rank whose timing stood sets the units. The cost: one more timing
        (the reference's) on every other rank with a share; where the finalists
        are re-timed, none in all, as a rank re-times the default anyway, and its
        timing here is the one it took first there. The gathered timings carry each
        rank's timing of it (no extra collective). None: every timing is compared
        as measured, each candidate timed by one rank only.
    :returns: an :class:`Agreement`; ``failed`` set (and one warning issued per
        group) when a collective failed or timed out.
    """
    _positive_timeout(None, None, timeout_s)
    if (n_candidates is None) == (candidates is None):
        raise TypeError("agree: give n_candidates or candidates, one of them")
    if reference is not None and (not isinstance(reference, int) or isinstance(reference, bool) or reference < 0):
        raise TypeError(f"agree: reference={reference!r}: expected the index of a candidate (an int >= 0), or None")
    if reference is not None and n_candidates is not None and reference >= n_candidates:
        raise ValueError(f"agree: reference={reference!r}: expected the index of a candidate, 0 to "
                         f"{n_candidates - 1} (n_candidates={n_candidates}), or None")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return _fail(group, "torch.distributed is not available", remember=False)
    if not (dist.is_available() and dist.is_initialized()):
        return _fail(group, "torch.distributed is not initialized (call init_process_group first)", remember=False)
    token = _token(group)
    with _broken_lock:
        broken = _broken.get(token)
    if broken is not None:
        return Agreement(failed=f"agreement is off after an earlier failure: {broken}")
    raised: list = []  # what this rank's candidates() raised: raised again once the other ranks know
    try:
        with _group_lock(group):  # one agreement at a time on a group in this process: its collectives in a row
            result = _agree(torch, dist, key, time_some, stored, n_candidates, candidates, group, timeout_s,
                            source, use_default, accept, raised, finalists, retime, reference)
    except AgreementError as exc:
        result = _fail(group, str(exc))
    except RuntimeError as exc:  # a collective that raised outright (a peer left, a closed connection)
        from ..progress import first_line

        result = _fail(group, f"{type(exc).__name__}: {first_line(exc)}")
    if raised:
        raise raised[0]
    if isinstance(result, Agreement):
        return result
    gathered, writer, judged = result
    if judged is not None:
        winner, margin, noise, failed = judged
        if winner is not None:
            return Agreement(winner=winner, writer=writer, margin=margin, noise=noise)
        gathered = {i: ms for i, ms in gathered.items() if i not in failed}  # the default failed: as alone
    if not gathered:
        return Agreement(failed=f"every candidate failed on every rank for {key}", writer=False)
    return Agreement(winner=decide(gathered), writer=writer)


def _agree(torch: Any, dist: Any, key: str, time_some: Callable[[list], dict], stored: Optional[dict],
           n_candidates: Optional[int], candidates: Optional[Callable[[], Sequence[str]]], group: Any,
           timeout_s: float, source: str, use_default: bool, accept: Optional[Callable[[dict], bool]],
           raised: list, finalists: Optional[Callable[[dict], list]] = None,
           retime: Optional[Callable[[list], dict]] = None, reference: Optional[int] = None) -> Any:
    """:func:`agree`'s collectives: an :class:`Agreement`, or ``(gathered timings, writer, judged)`` of a
    search (``judged``: None, or what the re-timing decided, :func:`_retimed`)."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    root = dist.get_global_rank(group, 0) if group is not None else 0
    io = _Bounded(dist, group, timeout_s)
    # 1. the key every rank asks about, and the length of rank 0's answer (0: search together)
    answer = None
    if rank == 0 and stored is not None:
        answer = {"config": stored, "source": source}
    elif rank == 0 and use_default:
        answer = {"default": True}
    blob = json.dumps(answer, sort_keys=True).encode() if answer is not None else b""
    head = torch.tensor(_key_words(key) + [len(blob)], dtype=torch.int64, device=io.device)
    heads = [h.cpu().tolist() for h in io.all_gather(head, size, f"comparing the key of {_brief(key)}")]
    strays = [r for r in range(size) if heads[r][:-1] != heads[0][:-1]]
    if strays:
        return _mismatch(group, f"rank(s) {strays} asked about another key than rank 0 ({_brief(key)} here); "
                                f"agreement needs the same calls in the same order on every rank (threads that "
                                f"tune in blocks of one group call in no set order: give each its own group)")
    n = int(heads[0][-1])
    if n:
        # 2. rank 0's answer wins everywhere: its winner (which every rank must be able to run), or the default
        data = torch.tensor(list(blob) if rank == 0 else [0] * n, dtype=torch.uint8, device=io.device)
        io.broadcast(data, root, f"broadcasting rank 0's answer for {_brief(key)}")
        answer = json.loads(bytes(data.cpu().tolist()).decode())
        if answer.get("default"):
            return Agreement(default=True)
        config = answer["config"]
        try:
            ok = bool(accept(config)) if accept is not None else True
        except Exception as exc:  # this rank cannot run it: every rank runs the default
            log.warning("%s: rank 0's winner %s cannot run here: %s: %s", _brief(key), config,
                        type(exc).__name__, exc)
            ok = False
        io.restart()  # this rank's own check does not eat the bound; waiting for slower ranks does
        flag = torch.tensor([int(ok)], dtype=torch.int64, device=io.device)
        flags = [int(f.cpu()[0]) for f in io.all_gather(flag, size, f"checking rank 0's winner for {_brief(key)}")]
        _confirm(io, size, f"confirming rank 0's winner for {_brief(key)}")
        refused = [r for r in range(size) if not flags[r]]
        if refused:
            log.warning("%s: rank(s) %s cannot run rank 0's winner %s; every rank runs the default",
                        _brief(key), refused, config)
            return Agreement(default=True)
        return Agreement(config=config, source=str(answer.get("source", "store")), writer=False)
    # 2. the group searches: every rank must search the same candidates, in the same order (a space a rank
    # computes from its own state, or lists from a set, would map one winning index to different configs)
    if candidates is not None:
        try:
            names = [str(c) for c in candidates()]
        except Exception as exc:
            raised.append(exc)
            names = None
    else:
        names = [str(i) for i in range(int(n_candidates or 0))]
    listing = (_key_words(json.dumps(names)) + [len(names)]) if names is not None else [0, 0, 0, 0, -1]
    io.restart()  # computing the space does not eat the bound
    mine = torch.tensor(listing, dtype=torch.int64, device=io.device)
    lists = [h.cpu().tolist() for h in io.all_gather(mine, size, f"comparing the candidates of {_brief(key)}")]
    failed = [r for r in range(size) if lists[r][-1] < 0]
    differ = [r for r in range(size) if lists[r] != lists[0] and r not in failed]
    if failed or differ:
        why = []
        if failed:
            why.append(f"the candidates of rank(s) {failed} could not be listed (the error is raised there)")
        if differ:
            why.append(f"rank(s) {differ} list other candidates (or another order) than rank 0")
        return _mismatch(group, f"{'; '.join(why)} for {_brief(key)}; a search across ranks needs configs= and "
                                f"prune_configs_by= to give every rank the same list, in the same order, for "
                                f"the same call")
    n_candidates = len(names)
    # 3. each rank times its round-robin share, the reference first where there is one (each rank's timing of
    # it fills its slot of the row: the gather carries them all); NaN marks a failed candidate.
    mine_ix = [i for i in range(n_candidates) if i % size == rank]
    if reference is not None and reference >= n_candidates:  # the same list on every rank: every rank raises
        raise ValueError(f"agree: reference={reference!r}: expected the index of a candidate, 0 to "
                         f"{n_candidates - 1} ({n_candidates} candidates), or None")
    ref = reference
    if ref is not None and mine_ix and ref not in mine_ix:
        mine_ix.insert(0, ref)
    try:
        timed = time_some(mine_ix) if mine_ix else {}
    except Exception as exc:  # this rank's share counts as failed; the others still gather
        log.warning("%s: timing candidates %s failed: %s: %s", key, mine_ix, type(exc).__name__, exc)
        timed = {}
    io.restart()  # this rank's own timing does not eat the bound; waiting for slower ranks does
    row = torch.full((n_candidates,), math.nan, dtype=torch.float64, device=io.device)
    for i in mine_ix:
        ms = timed.get(i)
        if ms is not None and math.isfinite(ms):
            row[i] = float(ms)
    slow = " (a rank's share of the timing may take longer than timeout_s: raise it above that)"
    rows = [r.cpu() for r in io.all_gather(row, size, f"gathering the timings for {_brief(key)}", slow)]
    _confirm(io, size, f"confirming the timings for {_brief(key)}",
             " (another rank gave up waiting for them: a rank's share of the timing may take longer than "
             "timeout_s: raise it above that)")
    gathered = {i: float(rows[i % size][i]) for i in range(n_candidates) if not math.isnan(rows[i % size][i])}
    if ref is not None and size > 1:
        gathered = _relative(key, gathered, [[float(v) for v in r.tolist()] for r in rows], ref, size)
    # 4. every rank re-times the same finalists (chosen from the gathered timings: no rank skips this step alone)
    order = [int(i) for i in finalists(gathered)] if finalists is not None and retime is not None else []
    if len(order) < 2:
        return gathered, rank == 0, None
    return gathered, rank == 0, _retimed(torch, io, key, order, retime, size)


def _relative(key: str, gathered: dict, rows: list, ref: int, size: int) -> dict:
    """The gathered first-pass timings, each rank's read against its own timing of the reference ``ref``
    (``rows[r][ref]``), in the ms of the rank whose share holds it: ``ms * ref[owner] / ref[r]``. The same on
    every rank (every rank has every row). A rank whose timing of the reference failed keeps its timings as
    measured, said in one log line; where the owner's failed, the lowest rank whose timing stood sets the
    units."""
    n = len(rows[0]) if rows else 0
    refs = [r[ref] for r in rows]
    stood = [math.isfinite(ms) and ms > 0 for ms in refs]
    sharing = range(min(size, n))  # the ranks with a share (rank r's first index is r)
    owner = ref % size
    unit = owner if stood[owner] else next((r for r in sharing if stood[r]), None)
    raw = [r for r in sharing if not stood[r] and any(i % size == r for i in gathered)]  # timings, no reference
    if raw:
        if unit is None:
            log.warning("%s: no rank could time the reference (candidate %d): every rank's timings are compared as "
                        "measured (devices of different speeds may rank them unfairly)", _brief(key), ref)
        else:
            log.warning("%s: rank(s) %s could not time the reference (candidate %d): their timings are compared as "
                        "measured, the other ranks' in rank %d's units", _brief(key), raw, ref, unit)
    if unit is None:
        return gathered
    scale = [refs[unit] / refs[r] if stood[r] and r != unit else 1.0 for r in range(size)]
    if any(f != 1.0 for f in scale):
        log.info("%s: first-pass timings in rank %d's units, each rank's against its own timing of the reference "
                 "(candidate %d): %s", _brief(key), unit, ref,
                 ", ".join(f"rank {r} x{scale[r]:.4f}" for r in sharing if r != unit and stood[r]))
    return {i: ms if scale[i % size] == 1.0 else ms / refs[i % size] * refs[unit] for i, ms in gathered.items()}


def _retimed(torch: Any, io: _Bounded, key: str, order: list, retime: Callable[[list], dict], size: int) -> tuple:
    """The re-timing step of a group's search: this rank re-times the finalists ``order`` (the default first)
    on its own device, the ranks gather every rank's ``(gain, noise, least)`` of each (NaN: it failed there) and
    each applies the same decision. Returns ``(winner or None, margin, noise, failed)``: the winner None
    where the default failed on some rank; ``failed``, the finalists that failed on some rank."""
    from ..tuning.search import group_verdict

    verdicts = [math.nan] * (3 * len(order))
    try:
        mine = retime(order)
        for j, i in enumerate(order):
            got = tuple(float(v) for v in mine[i]) if mine.get(i) is not None else (math.nan, math.nan)
            gain, noise, least = got[0], got[1], got[2] if len(got) > 2 else 0.0
            if math.isfinite(gain) and not math.isnan(noise):  # an infinite band: it stood, with no verdict
                verdicts[3 * j:3 * j + 3] = gain, noise, least
    except Exception as exc:  # no evidence from this rank: no challenger may win, the default stands
        log.warning("%s: re-timing the finalists %s failed: %s: %s", _brief(key), order, type(exc).__name__, exc)
        verdicts = [0.0, 0.0, 0.0] + [math.nan] * (3 * len(order) - 3)
    io.restart()  # this rank's own re-timing does not eat the bound; waiting for slower ranks does
    row = torch.tensor(verdicts, dtype=torch.float64, device=io.device)
    slow = " (a rank's re-timing of the finalists may take longer than timeout_s: raise it above that)"
    rows = [r.cpu().tolist() for r in io.all_gather(row, size, f"gathering the re-timings for {_brief(key)}", slow)]
    _confirm(io, size, f"confirming the re-timings for {_brief(key)}",
             " (another rank gave up waiting for them: a rank's re-timing may take longer than timeout_s: raise "
             "it above that)")
    ranks = [{i: tuple(r[3 * j:3 * j + 3]) for j, i in enumerate(order) if not math.isnan(r[3 * j])} for r in rows]
    failed = {i for i in order if any(i not in seen for seen in ranks)}
    winner, margin, noise = group_verdict(order, ranks)
    return winner, margin, noise, failed
