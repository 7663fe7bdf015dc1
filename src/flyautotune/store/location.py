"""Where the per-user store lives, and the process's one ``TuningStore`` per folder."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional

from .files import PathLike
from .sqlite import TuningStore

CACHE_DIR_ENV = "FLYAUTOTUNE_CACHE_DIR"


def cache_dir() -> Path:
    """``$FLYAUTOTUNE_CACHE_DIR``, else :func:`user_cache_dir`."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return user_cache_dir()


def user_cache_dir() -> Path:
    """The user cache dir + ``/flyautotune`` (``$XDG_CACHE_HOME`` or ``~/.cache``; ``%LOCALAPPDATA%`` on
    Windows), whatever ``$FLYAUTOTUNE_CACHE_DIR`` says."""
    if os.name == "nt":  # pragma: no cover
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
        base = xdg if xdg and os.path.isabs(xdg) else str(Path.home() / ".cache")
    return Path(base) / "flyautotune"


_STORES: dict = {}
_STORES_LOCK = threading.Lock()
_LAST: tuple = (None, None)  # (environment token, store): the repeat-call fast path


def get_store(directory: Optional[PathLike] = None) -> TuningStore:
    """The process's ``TuningStore`` for ``directory`` (default: ``cache_dir()``,
    re-read from the environment on every call). One object per directory."""
    global _LAST
    token = None
    if directory is None:
        env = os.environ
        # An explicit FLYAUTOTUNE_CACHE_DIR decides alone; read the fallbacks only without it.
        token = env.get(CACHE_DIR_ENV) or (None, env.get("XDG_CACHE_HOME"), env.get("HOME"), env.get("LOCALAPPDATA"))
        last = _LAST
        if last[0] == token:
            return last[1]
        directory = cache_dir()
    resolved = os.path.realpath(os.path.expanduser(os.fspath(directory)))
    with _STORES_LOCK:
        store = _STORES.get(resolved)
        if store is None:
            store = _STORES[resolved] = TuningStore(resolved)
    if token is not None:
        _LAST = (token, store)
    return store
