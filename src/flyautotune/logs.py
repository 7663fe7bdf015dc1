"""``FLYAUTOTUNE_LOG=info|debug|warning``: route flyautotune's log records to stderr.

Library code only logs (logger ``flyautotune`` and its children); this hook
adds one stderr handler when the variable is set, so a user can see progress
and decisions without configuring ``logging`` in their program.
"""

from __future__ import annotations

import logging
import os
import warnings

LOG_ENV = "FLYAUTOTUNE_LOG"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_HANDLER_NAME = "flyautotune-env"


def configure_from_env(value: str | None = None) -> int | None:
    """Apply ``FLYAUTOTUNE_LOG`` (or ``value``); returns the level set, or None."""
    raw = os.environ.get(LOG_ENV, "") if value is None else value
    raw = raw.strip().lower()
    if not raw:
        return None
    level = LEVELS.get(raw)
    if level is None:
        warnings.warn(
            f"{LOG_ENV}={raw!r} is not a log level; accepted: {', '.join(LEVELS)}", RuntimeWarning, stacklevel=2
        )
        return None
    logger = logging.getLogger("flyautotune")
    if not any(getattr(h, "name", None) == _HANDLER_NAME for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.name = _HANDLER_NAME
        handler.setFormatter(logging.Formatter("[flyautotune %(levelname)s] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    return level
