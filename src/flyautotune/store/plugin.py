"""The built-in store plugin: the per-user SQLite store, registered ``trylast`` so
any other ``flyautotune_store`` implementation wins over it."""

from __future__ import annotations

from .._markers import hookimpl
from .location import get_store
from .sqlite import TuningStore


class SqliteStorePlugin:
    """Provides ``get_store()``: the SQLite store of the current ``FLYAUTOTUNE_CACHE_DIR``
    (re-read on every call). Works registered as the class or as an instance."""

    __name__ = "flyautotune.store.SqliteStorePlugin"

    @staticmethod
    @hookimpl(trylast=True)
    def flyautotune_store() -> TuningStore:
        return get_store()
