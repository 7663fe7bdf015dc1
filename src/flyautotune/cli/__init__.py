"""The ``flyautotune`` command (also ``python -m flyautotune``).

Sub-commands: ``plugins``, ``tune``, ``show``, ``export``, ``import``,
``clear``, ``report``, one module each in ``cmd/``. Exit status: 0 on success,
2 for bad input (unknown adopter, shape, dtype, target, device) with one line
on stderr, 1 when the work itself failed, 130 on Ctrl-C.
"""

from .common import CommandError, UsageError
from .main import build_parser, main

__all__ = ["CommandError", "UsageError", "build_parser", "main"]
