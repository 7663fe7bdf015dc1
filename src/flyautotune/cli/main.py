"""The parser and the entry point: one module per sub-command lives in ``cmd/``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
import warnings
from typing import Optional, Sequence

from .. import __version__
from ..devices import restore_triton_interpret
from ..progress import first_line
from .cmd import COMMANDS
from .common import PROG, CommandError, Parser, UsageError


def build_parser() -> Parser:
    """The ``flyautotune`` argument parser, every sub-command included."""
    parser = Parser(
        prog=PROG,
        description="Tune GPU kernels with flyautotune, manage the tuning store and inspect plugins.",
        epilog="Environment: FLYAUTOTUNE_CACHE_DIR (store location), FLYAUTOTUNE=1 (every tune searches "
               "again, as tune --force does), FLYAUTOTUNE_LOG=info|debug (log messages), "
               "FLYAUTOTUNE_EVENT_LOG=FILE (JSON-lines events), FLYAUTOTUNE_DISABLE_PLUGINS=a,b, "
               "FLYAUTOTUNE_NATIVE_HIT=0 (cache hits in Python, not C), FLYAUTOTUNE_TENSOR_CHECK=torch (hits "
               "check tensors with torch's TensorGuards even where flyautotune native build compiled one).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log info (-v) or debug (-vv) messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for module in COMMANDS.values():
        module.add_parser(sub)
    for command in sub.choices.values():  # -v after the command name too (tune -v ...); not shown in its help
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    _tolerant_output()
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    _setup_logging(args.verbose)
    # A Triton notice about its next release, printed on every compile: noise for this command.
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
    try:
        with restore_triton_interpret():  # a CPU tune sets it for its own run only
            status = COMMANDS[args.command].run(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except CommandError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # keep the interpreter from failing on exit
        return 1
    except Exception as exc:
        if logging.getLogger("flyautotune").isEnabledFor(logging.DEBUG):
            traceback.print_exc()
        _error(f"{type(exc).__name__}: {first_line(exc)} (FLYAUTOTUNE_LOG=debug shows the traceback)")
        return 1
    return status if isinstance(status, int) else 0


def _tolerant_output() -> None:
    # Text from packs and stores may hold what the terminal's encoding cannot show: escape it, never crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def _error(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def _setup_logging(verbose: int) -> None:
    from ..logs import configure_from_env

    logger = logging.getLogger("flyautotune")
    if verbose:
        configure_from_env("debug" if verbose > 1 else "info")
    elif not logger.handlers:
        # FLYAUTOTUNE_LOG unset (the import configures it otherwise): warnings still reach the
        # user, one plain line each.
        handler = _LineSafeHandler()
        handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


class _LineSafeHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr``; on a terminal, clears the live progress line
    before a message, so they never share a line."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # the stream is always the current sys.stderr
        pass

    def emit(self, record: logging.LogRecord) -> None:
        isatty = getattr(self.stream, "isatty", None)
        if isatty is not None and isatty():
            with contextlib.suppress(OSError, ValueError):
                self.stream.write("\r\x1b[K")
        super().emit(record)
