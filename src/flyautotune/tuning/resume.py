"""Crash markers: a search records each candidate before it runs, so a search that finds the marker of a
process that is gone knows which candidate brought it down, and skips it. A search stopped by an exception
(Ctrl-C, ``SystemExit``) did not crash: it takes its markers back before the exception goes on."""

from __future__ import annotations

import os
import re
import shlex
import socket

#: Recorded for a candidate before it runs and replaced when it finishes (or taken back when the search
#: stops by an exception): found by a later search, it means the process died while the candidate ran,
#: and the candidate is skipped.
CRASHED = "crashed: the process ended while this candidate ran (flyautotune clear ADOPTER retries it)"
#: What replaces the marker of an interrupted candidate in a store that cannot delete a timing row
#: (no ``drop_timing``): a failure, retried by the next search, never a crash.
INTERRUPTED = "interrupted: the search stopped while this candidate ran"


def skipped(tuner: str) -> str:
    """The error of a candidate a search skips because an earlier search crashed while it ran; it names the
    command that retries it (a forced search skips it too: rerun right after a crash, it would crash again)."""
    return (f"skipped: it crashed an earlier search: the process ended while this candidate ran "
            f"(flyautotune clear {shlex.quote(tuner)} retries it)")


def running_marker() -> str:
    """The error text recorded for a candidate while it runs in this process."""
    return f"{CRASHED} [pid {os.getpid()} on {socket.gethostname()}]"


def crashed(error: str) -> bool:
    """A crash marker whose process is gone (on this host); a live process's marker is a search in progress."""
    m = re.fullmatch(r"crashed:.*\[pid (\d+) on (.+)\]", error)
    if m is None:
        return False
    pid, host = int(m.group(1)), m.group(2)
    if host != socket.gethostname():
        return False  # another machine's search: nothing tells whether it is still running
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): still running
        return False
    return False
