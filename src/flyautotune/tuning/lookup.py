"""Where a key's config comes from on a memory miss: store -> pack -> default -> search."""

from __future__ import annotations

import logging
import platform
import sys
import time
from typing import Any, Mapping, Optional

from .. import events, keys, streams
from ..config import Config, foreign_config
from ..target import Target
from . import checks
from .binding import Call, key_dict
from .callables import named_for, run_callable
from .background import warm_in_background
from .search import AutotuneError, Search, best_challengers, config_repr, ordered
from .selection import Selection

log = logging.getLogger("flyautotune")


def candidates(t: Any, call: Call) -> list:
    """The configs a search of this call tries (the space evaluated, then pruned)."""
    if callable(t.configs):
        configs = _config_list(t, "configs(...)", run_callable(t, "configs(...)", t.configs, call))
    else:
        configs = list(t.configs)
    if t.prune_configs_by is not None and len(configs) > 1:
        configs = _config_list(t, "prune_configs_by(...)",
                               run_callable(t, "prune_configs_by(...)", t.prune_configs_by, call, configs))
    for c in configs:
        if not isinstance(c, Config):
            raise TypeError(f"{t.name}: configs must be flyautotune.Config objects, {foreign_config(c)}")
    return configs


def search_space(t: Any, call: Call) -> tuple:
    """``(configs, default)`` of a search of this call: the space evaluated and pruned (:func:`candidates`),
    and the default, which a search times also where the space lacks it."""
    return candidates(t, call), default_config(t, call)


def search_configs(t: Any, call: Call) -> list:
    """Every config a search of this call times, in its order: the default first (the reference and the
    bar), then the rest of the space (what ``flyautotune report`` compiles)."""
    return ordered(*search_space(t, call))  # as Search orders its candidates: each distinct config once


def _config_list(t: Any, what: str, returned: Any) -> list:
    """What a tuner's callable returned, as a list of configs (a single Config or None is named)."""
    if returned is None or isinstance(returned, (Config, str, bytes, Mapping)) or not hasattr(returned, "__iter__"):
        raise TypeError(f"{t.name}: {what} returned {returned!r}; expected a list of flyautotune.Config")
    return list(returned)


def default_config(t: Any, call: Call) -> Optional[Config]:
    if t.default is None:
        return None
    config = run_callable(t, "default(...)", t.default, call)
    if not isinstance(config, Config):
        raise TypeError(f"{t.name}: default() returned {config!r}; expected a flyautotune.Config")
    return config


def fallback_config(t: Any, call: Call) -> Config:
    """What a rank of a ``fat.distributed`` group runs where the group cannot answer: the default, else the
    first config a search would time."""
    default = default_config(t, call)
    if default is not None:
        return default
    order = search_configs(t, call)
    if not order:
        raise AutotuneError(f"{t.name}: the config space is empty for this call, and there is no default")
    return order[0]


def _emit(t: Any, key: str, config: Config, source: str) -> None:
    events.emit(t.pm, "select", tuner=t.name, key=key, config=config_repr(config), source=source)


def usable(t: Any, data: Any, call: Call, target: Target, snapshot: tuple, where: str) -> Optional[Config]:
    """A stored/shipped winner, or None (with one warning) when it may not or cannot run.

    What the tuner's own callables raise (``default``, ``configs``) is theirs to fix: it propagates, and
    the winner is kept."""
    # the tuner's own answers first, outside the winner's checks: a bug in them must not cost the winner
    default = default_config(t, call) if t.default is not None else None
    static = None if callable(t.configs) else t.configs
    members = static
    if members is None and t.validate is None:
        # nothing else says what is allowed: the space itself (a default's names alone refused the names
        # only its other configs set, deleting the search's own winner, and let any value of its own through)
        members = candidates(t, call)
    tunable = checks.tunable_names(static if static is not None else members, default)
    known = list(static or ()) + ([default] if default is not None else [])
    try:
        config = Config.from_dict(data)
        if default is not None and checks.same_config(config, default):
            members = None  # the default is always allowed
        checks.check_untrusted(t.name, t.sig, config, tunable=tunable, members=members, validate=t.validate,
                               named=named_for(t, t.validate, call) if t.validate is not None else call.named,
                               known=known)
        checks.check_fits(t.name, t.sig, t.pm, [config], target, snapshot)
    except (checks.IncompatibleConfigError, TypeError, ValueError) as exc:
        then = "using the default instead" if default is not None else "it is not used"
        log.warning("%s: ignoring the %s winner %s for this key (%s); %s", t.name, where, _short(data), exc, then)
        return None
    # The caller's own mistake is reported to the caller; the winner stays.
    checks.check_caller(t.name, t.sig, [config], call)
    return config


def _short(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 200 else text[:200] + "..."


def select_cold(t: Any, call: Call, target: Target, snapshot: tuple, forced: bool) -> Selection:
    # A forced search will time candidates: the device warms up while the key (the toolchain's
    # fingerprint among it) is computed, and the search joins it before its first timing.
    warming = warm_in_background(t, call.device) if forced else None
    try:
        return _select_cold(t, call, target, snapshot, forced, warming)
    finally:
        if warming is not None:
            warming.join()


def _select_cold(t: Any, call: Call, target: Target, snapshot: tuple, forced: bool,
                 warming: Any) -> Selection:
    kd = key_dict(t.key, call, target, snapshot, t.pm, t.source_fingerprint)
    key = keys.canonical_json(kd)
    store = t.store()
    local = None if forced else _local_choice(t, call, target, snapshot, key, store)
    from ..scale.distributed import active

    settings = active()
    if settings is not None:  # every rank's first lookup of a key is the group's: rank 0's answer runs everywhere
        if warming is not None:
            warming.join()  # nothing is timed while the device warms
        selection = agreed(t, call, target, snapshot, kd, key, forced, store, settings, local)
        _emit(t, key, selection.config, selection.source)
        return selection
    if local is not None:
        _emit(t, key, local.config, local.source)
        return local
    failed = t._failed.get(key)
    if failed is not None and not forced:
        raise failed  # every candidate failed for this key already in this process
    try:
        selection = search(t, call, target, snapshot, kd, key, forced or key in t._refused, store, warming)
    except AutotuneError as exc:
        t._failed[key] = exc
        raise
    _emit(t, key, selection.config, "search")
    return selection


def without_search(t: Any, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
    """What a call of ``t`` with these arguments runs without searching: ``(selection, entry)``, where
    ``selection`` is this process's stored winner, a shipped one or the default (None where only a search can
    answer), and ``entry`` is the store row the stored winner came from (its timings and provenance; None for
    any other source), read once. Nothing is timed, nothing is stored, and the tuner's memory is left as it was
    (a plan's keys past its budget are only looked up)."""
    from ..targets import target_for

    t._refresh_env()
    call = t.sig.bind(tuple(args), dict(kwargs))
    target = target_for(call.device, t.pm)
    snapshot = t._snapshot()
    key = keys.canonical_json(key_dict(t.key, call, target, snapshot, t.pm, t.source_fingerprint))
    store = _RowsRead(t.store())
    selection = _local_choice(t, call, target, snapshot, key, store)
    entry = store.rows.get((t.name, key)) if selection is not None and selection.source == "store" else None
    return selection, entry


class _RowsRead:
    """A store that keeps the rows its ``get`` returned, so a caller that needs the row a lookup chose does not
    read it again; everything else goes to the store."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.rows: dict = {}

    def get(self, tuner: str, key: str) -> Any:
        entry = self._store.get(tuner, key)
        self.rows[(tuner, key)] = entry
        return entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _local_choice(t: Any, call: Call, target: Target, snapshot: tuple, key: str, store: Any) -> Optional[Selection]:
    """What this process runs for a key without searching: its stored winner, a shipped one, or the default;
    None where only a search can answer."""
    if key not in t._refused:  # winners a launcher refused are not offered again
        entry = store.get(t.name, key)
        space_changed = (entry is not None and t.default is None and t._space_fp is not None
                         and entry.provenance.get("space") not in (None, t._space_fp))
        if space_changed:
            # No default to fall back on: a miss searches, and stored timings of
            # unchanged candidates are reused. (With a default, the old winner
            # still beats the default until a forced search.)
            log.info("%s: the config space changed since the stored winner; searching again", t.name)
        elif entry is not None:
            config = usable(t, entry.config, call, target, snapshot, "stored")
            if config is not None:
                return Selection(config, "store", key)
            store.delete(t.name, key)
        if not space_changed:
            pack_entry = t.find_in_packs(key)
            if pack_entry is not None:
                config = usable(t, pack_entry.config, call, target, snapshot, "shipped")
                if config is not None:
                    return Selection(config, "pack", key)
    if t.default is not None:
        config = default_config(t, call)
        checks.check_caller(t.name, t.sig, [config], call)
        checks.check_fits(t.name, t.sig, t.pm, [config], target, snapshot)
        return Selection(config, "default", key)
    return None


def search(t: Any, call: Call, target: Target, snapshot: tuple, kd: dict, key: str, forced: bool,
           store: Any, warming: Any = None) -> Selection:
    configs, default = search_space(t, call)
    if not configs and default is None:
        raise AutotuneError(f"{t.name}: the config space is empty for this call, and there is no default")
    checks.check_caller(t.name, t.sig, configs + ([default] if default is not None else []), call)
    checks.check_fits(t.name, t.sig, t.pm, configs + ([default] if default is not None else []), target, snapshot)
    distinct = ordered(configs, default)
    if len(distinct) == 1:
        config = distinct[0]
        if forced and config.pre_hook is None:  # a forced search replaces the stored winner, even of one
            store.put(t.name, key, key, config.to_dict(), [],
                      provenance(target, kd, 0.0, t._space_fp, call.device))
        return Selection(config, "search", key)
    t.search_count += 1
    stream = streams.resolve_stream(call.named.get("stream") if t.sig.has_stream else None, call.device)
    # Timings are pooled under the winner's key: the key holds no config-space
    # fingerprint, so a grown space finds the timings of its old candidates.
    known = {} if forced else store.get_timings(t.name, key)
    winner, rows, margin, noise, duration = Search(t, call, target, snapshot, key, configs, default, known,
                                                   stream, store, warming).run()
    if winner.pre_hook is None:
        prov = provenance(target, kd, duration, t._space_fp, call.device)
        prov.update(margin=margin, noise=noise)
        stored = [{k: v for k, v in r.items() if k in _STORED} for r in rows if isinstance(r["config"], dict)]
        store.put(t.name, key, key, winner.to_dict(), stored, prov)
    else:
        unstored(t, winner)
    return Selection(winner, "search", key, tuple(rows), margin, noise)


def unstored(t: Any, winner: Config) -> None:
    """Say once per tuner that a winner with a ``pre_hook`` is not stored (a function is no data): every
    process searches its key again."""
    if t._pre_hook_warned:
        return
    t._pre_hook_warned = True
    log.warning("%s: the winner %s has a pre_hook, and a function is never stored: it is kept in this process "
                "only, so every new process searches this key again. A pre_hook that zeroes or restores tensors "
                "is reset_to_zero=[...] or restore_value=[...] of the tuner, whose winners are stored", t.name,
                winner)


#: Per-candidate fields the store keeps.
_STORED = ("config", "ms", "error", "spread", "method", "reps")


def agreed(t: Any, call: Call, target: Target, snapshot: tuple, kd: dict, key: str, forced: bool, store: Any,
           settings: Any, local: Optional[Selection] = None) -> Selection:
    """Inside ``fat.distributed(...)``: every rank of the group takes one config for the key.

    The ranks check they ask about the same key; then rank 0's own answer (``local`` there: its stored or
    shipped winner, or the default) runs on every rank. Where rank 0 would search, the ranks split the
    candidates, time their share and gather the timings, each rank's read against its own timing of the first
    candidate (the default, where there is one), which every rank with a share times first (one timing more;
    a rank that re-times the finalists takes it as the default's first), so the finalists and the fastest are
    chosen as if one device had timed them all; then every rank re-times the default and the best challengers
    side by side, as a search of one process does, and the ranks keep the default unless a challenger beats it
    on their combined verdicts (``Selection.margin``/``noise`` say by how much, and which band). If a collective
    fails, every rank runs the default (``agree`` warns once).
    """
    from ..scale.distributed import agree, tuning_group

    space: list = []  # (configs, default, order): evaluated only where the group searches, as alone

    def candidates() -> list:
        configs, default = search_space(t, call)
        every = configs + ([default] if default is not None else [])
        checks.check_caller(t.name, t.sig, every, call)
        checks.check_fits(t.name, t.sig, t.pm, every, target, snapshot)
        order = ordered(configs, default)  # the candidates, in the order Search times them
        if not order:
            raise AutotuneError(f"{t.name}: the config space is empty for this call, and there is no default")
        space.append((configs, default, order))
        # what the ranks compare: the same list, in the same order, the default marked (it picks the finalists)
        return [repr(c) + (" (default)" if default is not None and i == 0 else "") for i, c in enumerate(order)]

    runs: list = []

    def share() -> Search:
        if not runs:  # made only where the ranks search (it copies restore_value's tensors)
            configs, default, _ = space[0]
            stream = streams.resolve_stream(call.named.get("stream") if t.sig.has_stream else None, call.device)
            runs.append(Search(t, call, target, snapshot, key, configs, default, {}, stream))
        return runs[0]

    def time_some(indices: list) -> dict:
        # checked against the default's outputs, and the inputs restored after, as in a search of one process
        return share().time_share(indices)

    def finalists(timings: dict) -> list:
        # the default (first in the order, where there is one) and the best challengers, as a search re-times
        if space[0][1] is None or 0 not in timings:
            return []
        return [0] + best_challengers((i, timings[i]) for i in sorted(timings) if i != 0)

    def retime(indices: list) -> dict:
        return share().retime_share(indices)

    def decide(timings: dict) -> int:
        ok = {i: ms for i, ms in timings.items() if ms is not None and ms == ms}
        if not ok:
            raise AutotuneError(f"{t.name}: every candidate failed on every rank")
        return min(ok, key=lambda i: (ok[i], i))  # the same answer on every rank: ties to the lowest index

    accepted: list = []

    def accept(data: dict) -> bool:
        config = usable(t, data, call, target, snapshot, "broadcast")
        accepted.append(config)
        return config is not None

    shared = local is not None and local.source in ("store", "pack")
    result = agree(key=key, candidates=candidates, time_some=time_some, decide=decide,
                   stored=local.config.to_dict() if shared else None,
                   source=local.source if shared else "store",
                   use_default=local is not None and local.source == "default",
                   accept=accept, group=tuning_group(settings.group), timeout_s=settings.timeout_s,
                   finalists=finalists, retime=retime, reference=0)
    if result.failed is not None and result.failed.startswith("every candidate failed"):
        raise AutotuneError(f"{t.name}: {result.failed}")
    if result.config is not None:
        return Selection(accepted[-1], result.source or "store", key)
    if result.failed is not None or result.default:
        if space:
            configs, default, order = space[0]
            fallback = default if default is not None else order[0]
        else:
            fallback = fallback_config(t, call)
            checks.check_caller(t.name, t.sig, [fallback], call)
            checks.check_fits(t.name, t.sig, t.pm, [fallback], target, snapshot)
        return Selection(fallback, "default", key)
    winner = space[0][2][result.winner]
    duration = runs[0].elapsed() if runs else 0.0
    if result.margin is not None:
        log.info("%s: the group's winner %s after %.2f s; %s", t.name, winner, duration,
                 "default kept" if result.margin == 0 else
                 f"{result.margin:.2%} faster than the default (noise band {result.noise:.2%})")
    if result.writer and winner.pre_hook is None:
        prov = provenance(target, kd, duration, t._space_fp, call.device)
        prov.update(margin=result.margin, noise=result.noise)
        store.put(t.name, key, key, winner.to_dict(), [], prov)
    elif result.writer:
        unstored(t, winner)
    t.search_count += 1
    return Selection(winner, "search", key, (), result.margin, result.noise)


def provenance(target: Target, kd: dict, duration: float, space_fp: Optional[str], device: Any) -> dict:
    from .. import __version__

    return {
        "device": device_name(device),
        "target": target.to_dict(),
        "toolchain": kd.get("backend", {}),
        "flyautotune": __version__,
        "when": time.time(),
        "search_s": round(duration, 6),
        "space": space_fp,
    }


def device_name(device: Any) -> str:
    """The marketing name of a torch device (through torch's device module), or the host's processor."""
    torch = sys.modules.get("torch")
    kind = getattr(device, "type", "cpu")
    if torch is not None and kind != "cpu":
        try:
            return str(torch.get_device_module(kind).get_device_name(device))
        except Exception:  # a device module without names: fall back to the host
            pass
    return platform.processor() or platform.machine()
