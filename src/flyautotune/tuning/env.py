"""The core's own environment variables, read where a key is looked up cold.

``FLYAUTOTUNE`` forces a fresh search; ``FLYAUTOTUNE_CACHE_DIR`` moves the
store. The hot path never reads a variable: it compares the size of the
environment with the size it saw last (one attribute read) and re-reads both
variables only when it changed — setting or removing a variable, as the docs
show, is noticed on the next call; for a value changed in place, call
``flyautotune.clear_caches()``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

log = logging.getLogger("flyautotune")

FORCE_ENV = "FLYAUTOTUNE"
CACHE_DIR_ENV = "FLYAUTOTUNE_CACHE_DIR"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})
_warned: set = set()
_warn_lock = threading.Lock()


def force_search() -> bool:
    """True when ``FLYAUTOTUNE`` asks for a fresh search (cache and default bypassed).

    An unknown value (``banana``, ``2``) is treated as off, with one warning per value.
    """
    return flag(FORCE_ENV, False, "forced search stays off")


def flag(name: str, default: bool, effect: str) -> bool:
    """The on/off setting ``name`` (1/true/yes/on, 0/false/no/off; unset or empty: ``default``). A value not
    understood keeps ``default``, with one warning per value saying ``effect``."""
    raw = os.environ.get(name)
    value = raw.strip().lower() if raw is not None else ""
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    not_understood(name, raw, effect, "1/true/yes/on or 0/false/no/off")
    return default


def not_understood(name: str, raw: str, effect: str, accepted: str) -> None:
    """Warn, once per variable and value in a process, that the setting ``name=raw`` is not understood."""
    with _warn_lock:
        fresh = (name, raw) not in _warned
        _warned.add((name, raw))
    if fresh:
        log.warning("%s=%r is not understood; %s (accepted: %s)", name, raw, effect, accepted)


def cache_dir_setting() -> Optional[str]:
    """The raw ``FLYAUTOTUNE_CACHE_DIR`` value (None when unset)."""
    return os.environ.get(CACHE_DIR_ENV)


def environment_size() -> int:
    """A cheap change signal for the environment (see module docstring)."""
    return len(os.environ)
