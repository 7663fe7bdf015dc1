"""Logging set-up from ``FLYAUTOTUNE_LOG``: the library only logs (on the
``flyautotune`` logger and its children); this attaches a handler so a user
can see those messages without writing logging code."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, TextIO, Union

LOG_ENV = "FLYAUTOTUNE_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
OFF = ("off", "none", "0", "")
DEFAULT_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"

_MARK = "_flyautotune_handler"


def parse_level(value: Union[str, int]) -> Optional[int]:
    """``"info"`` -> ``logging.INFO``; ``"off"`` -> None.

    :raises ValueError: naming the value and the accepted levels.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in OFF:
        return None
    if text in LEVELS:
        return LEVELS[text]
    raise ValueError(
        f"{LOG_ENV}={value!r} is not a log level; accepted: {', '.join(LEVELS)} or off"
    )


def configure_logging(level: Union[str, int, None] = None, stream: Optional[TextIO] = None,
                      fmt: str = DEFAULT_FORMAT) -> Optional[logging.Handler]:
    """Send the ``flyautotune`` logger's records at ``level`` and above to ``stream``.

    :param level: ``"debug"``, ``"info"``, ``"warning"``, ``"error"``, ``"off"``,
        a ``logging`` level number, or None to read ``FLYAUTOTUNE_LOG`` (unset: do nothing).
    :param stream: default ``sys.stderr``.
    :returns: the handler installed (it replaces one an earlier call installed),
        or None when logging was left alone or switched off.
    :raises ValueError: an unknown level name.
    """
    if level is None:
        level = os.environ.get(LOG_ENV, "")
    number = parse_level(level)
    logger = logging.getLogger("flyautotune")
    for old in [h for h in logger.handlers if getattr(h, _MARK, False)]:
        logger.removeHandler(old)
    if number is None:
        return None
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
    logger.setLevel(number)
    return handler
