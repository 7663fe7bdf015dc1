"""Files the store and packs touch: atomic writes, ownership checks, a bounded
inter-process lock, and reading a bounded regular file."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

LOCK_TIMEOUT_S = 10.0


def write_atomic(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` so a reader or a crash never
    sees half of it: a fresh temporary file in the same folder (``O_EXCL``, never
    following a planted link), fsync, rename over ``path``, fsync the folder.
    An existing file keeps its permission bits; a new one gets 0644."""
    path = Path(path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the folder is synced (POSIX; a no-op elsewhere).
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "unknown user"


def ownership_problem(path: PathLike) -> str:
    """Why ``path`` must not be trusted as the user's own ('' when it may, or when it
    does not exist): it belongs to another user, as ssh and pip refuse. POSIX only."""
    if not hasattr(os, "geteuid") or sys.platform == "win32":
        return ""
    try:
        st = os.stat(path)  # a link is judged by what it points to
    except OSError:
        return ""
    me = os.geteuid()
    if st.st_uid == me:
        return ""
    return (f"{path} is owned by {_owner_name(st.st_uid)} (uid {st.st_uid}), not by you "
            f"({_owner_name(me)}, uid {me}); another user could have planted it, so it is not used. "
            f"Point FLYAUTOTUNE_CACHE_DIR at a folder you own")


@contextlib.contextmanager
def file_lock(path: Path, timeout: Optional[float] = None) -> Iterator[bool]:
    """An inter-process lock (``flock``) waited for at most ``timeout`` seconds
    (default ``LOCK_TIMEOUT_S``).

    Yields True when held, False when it could not be taken in time (the caller
    decides whether to go on); always True off POSIX, where there is no ``flock``.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        yield True  # no lock file possible (read-only folder): nothing to serialize against
        return
    try:
        deadline = time.monotonic() + (LOCK_TIMEOUT_S if timeout is None else timeout)
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() + pause > deadline:
                    held = False
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
        yield held
    finally:
        os.close(fd)


def read_regular_file(path: PathLike, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    Opens without blocking (a FIFO cannot hang the caller) and reads at most
    ``limit + 1`` bytes (``/dev/zero`` cannot exhaust memory).

    :raises OSError: unreadable; ``ValueError``: not a regular file, or too large.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"it is larger than {limit} bytes")
    return data
