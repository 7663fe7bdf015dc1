"""The tuning store: winners, per-candidate timings and provenance in SQLite,
and canonical JSON packs that ship winners with an adopter.

One SQLite file per cache directory (``$FLYAUTOTUNE_CACHE_DIR``, default
``$XDG_CACHE_HOME/flyautotune`` or ``~/.cache/flyautotune``), shared safely by
every process of the user. Packs and store files are untrusted input: parsing
is bounded and every entry validated (see docs/security.md).

Modules: ``entries`` (StoreEntry, validation), ``jsontext`` (canonical and
bounded JSON), ``sqlite`` (TuningStore), ``recovery`` (schema, migrations,
salvage), ``deferred`` (winners kept in memory while the store is busy),
``files`` (atomic writes, ownership, locks), ``packs`` (pack files),
``imports`` (import planning), ``location`` (get_store), ``protocol`` (Store),
``memory`` (MemoryStore), ``plugin`` (the built-in store hook).
"""

from .entries import PackError, StoreEntry, StoreError
from .files import write_atomic
from .imports import ImportItem, ImportPlan, apply_import, plan_import, unmatched
from .jsontext import MAX_DEPTH, MAX_ENTRY_BYTES, MAX_PACK_BYTES, canonical_config_json
from .location import CACHE_DIR_ENV, cache_dir, get_store
from .memory import MemoryStore
from .packs import (PACK_FORMAT, PACK_VERSION, Pack, PackIndex, dump_pack, find_in_packs, load_pack, package_packs,
                    pack_with_other_source, read_pack)
from .plugin import SqliteStorePlugin
from .protocol import Store
from .recovery import MIGRATIONS, SCHEMA_VERSION, migrate
from .sqlite import BUSY_TIMEOUT_S, CALL_TIMEOUT_S, DB_NAME, TuningStore

__all__ = [
    "BUSY_TIMEOUT_S",
    "CACHE_DIR_ENV",
    "CALL_TIMEOUT_S",
    "DB_NAME",
    "MAX_DEPTH",
    "MAX_ENTRY_BYTES",
    "MAX_PACK_BYTES",
    "MIGRATIONS",
    "PACK_FORMAT",
    "PACK_VERSION",
    "ImportItem",
    "ImportPlan",
    "MemoryStore",
    "Pack",
    "PackError",
    "PackIndex",
    "SCHEMA_VERSION",
    "SqliteStorePlugin",
    "Store",
    "StoreEntry",
    "StoreError",
    "TuningStore",
    "apply_import",
    "cache_dir",
    "canonical_config_json",
    "dump_pack",
    "find_in_packs",
    "pack_with_other_source",
    "get_store",
    "load_pack",
    "migrate",
    "package_packs",
    "plan_import",
    "read_pack",
    "unmatched",
    "write_atomic",
]
