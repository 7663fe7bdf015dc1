"""Where the per-user store lives, and the process's one ``TuningStore`` per folder."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional

from .files import PathLike
from .sqlite import DB_NAME, TuningStore

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


def store_dir_problem(directory: PathLike, *, write: bool = True) -> str:
    """Why the store folder ``directory`` cannot serve a store, in words after its name ("is a file, not a
    directory", "is not writable", ...), or ``""`` where it can. Only the file system is asked: nothing is
    created. ``write=False`` asks for reading only (the folder may then be read-only).

    A store that cannot be written would make a tune search for nothing: the winner is lost when the process
    ends, so commands that write check this first."""
    path = Path(os.path.expanduser(os.fspath(directory)))
    try:
        return _dir_problem(path, write)
    except OSError as exc:  # a folder above it we may not even look into
        return f"cannot be checked ({exc.strerror or exc})"


def _dir_problem(path: Path, write: bool) -> str:
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    if not path.exists():
        # The store creates it (and its parents): the nearest existing folder above must allow that.
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            return f"cannot be created: {parent} is a file, not a directory"
        if write and not os.access(parent, os.W_OK | os.X_OK):
            return f"does not exist and cannot be created: {parent} is not writable"
        return ""
    if not os.access(path, os.R_OK | os.X_OK):
        return "is not readable"
    if write:
        if not os.access(path, os.W_OK):
            return "is not writable"
        db = path / DB_NAME
        if db.exists() and not (db.is_file() and os.access(db, os.R_OK | os.W_OK)):
            return f"holds {DB_NAME}, which is not a writable file"
    return ""


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
