"""Kernel adopters: a name, the tuned launch (space, default, key) and what the command line needs."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import attrs

from .config import Config


def _name(instance, attribute, value):
    if not isinstance(value, str) or not value.replace("-", "_").isidentifier():
        raise ValueError(
            f"Adopter.name must be an identifier-like string (letters, digits, '_', '-'), got {value!r}"
        )


def _optional_callable(instance, attribute, value):
    if value is not None and not callable(value):
        raise TypeError(f"Adopter.{attribute.name} must be callable or None, got {value!r}")


def _optional_str(instance, attribute, value):
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Adopter.{attribute.name} must be a str or None, got {value!r}")


def _str(instance, attribute, value):
    if not isinstance(value, str):
        raise TypeError(f"Adopter.{attribute.name} must be a str (one line), got {value!r}")


def _tuner(instance, attribute, value):
    if not (callable(value) and callable(getattr(value, "select", None)) and hasattr(value, "configs")):
        raise TypeError(
            f"Adopter.tuner must be a flyautotune.Autotuner (an @autotune-decorated launch), got {value!r}"
        )


@attrs.frozen
class Adopter:
    """A kernel registered with flyautotune: a name and its tuned launch.

    :param name: unique name (``"rmsnorm"``); equals the tuner's ``name=``, so
        ``flyautotune show/export/clear`` find its winners.
    :param tuner: the ``Autotuner`` (an ``@autotune``-decorated launch): it
        holds the config space, the default and the key, declared once.
    :param entry: the user-facing tuned callable (``rmsnorm_autotuned``), if
        it differs from the tuner.
    :param tuner_args: ``tuner_args(*entry_args, **entry_kwargs) -> (args,
        kwargs)`` maps an ``entry`` call to the tuner's own arguments (what
        ``entry`` prepares before its tuned launch); needed when ``entry`` is set.
    :param distribution: the distribution that registered it (filled by the
        registry when known).
    :param example: ``example(shape: tuple, dtype: str, device) -> (args, kwargs)``
        builds inputs for ``entry`` for command-line tuning and reports; optional.
    :param bytes_moved: ``bytes_moved(*entry_args, **entry_kwargs) -> int`` for GB/s; optional.
    :param compile_spec: ``compile_spec(shape: tuple, dtype: str, config: Config,
        target=None) -> (kernel, signature: dict, constexprs: dict[, extra])``
        describing the Triton kernel a config builds, for static cross-compiled
        reports (no GPU needed); optional. ``extra`` may hold ``"options"``
        (compile options the launch derives, e.g. ``num_warps``) and
        ``"values"`` (runtime integers Triton specializes on), so a report
        builds the same binary as a real launch, and ``"compiling"`` (a
        callable returning the context manager the launch compiles in, e.g.
        one that sets a compiler stage hook), which the report enters around
        each compile.
    """

    name: str = attrs.field(validator=_name)
    tuner: Any = attrs.field(validator=_tuner)
    entry: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    tuner_args: Optional[Callable[..., tuple]] = attrs.field(default=None, validator=_optional_callable)
    distribution: Optional[str] = attrs.field(default=None, validator=_optional_str)
    example: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    bytes_moved: Optional[Callable[..., int]] = attrs.field(default=None, validator=_optional_callable)
    compile_spec: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    description: str = attrs.field(default="", validator=_str)

    def __attrs_post_init__(self) -> None:
        if self.entry is not None and self.tuner_args is None:
            raise TypeError(f"Adopter({self.name!r}): entry= needs tuner_args= to map an entry call to the "
                            f"tuner's arguments")
        if self.entry is None and self.tuner_args is not None:
            raise TypeError(f"Adopter({self.name!r}): tuner_args={self.tuner_args!r} without entry= is never "
                            f"called (example() then gives the tuner's own arguments); pass entry= (the "
                            f"function users call) or drop tuner_args=")

    @property
    def configs(self) -> Any:
        """The tuner's config space (a list, or a callable of the call's arguments)."""
        return self.tuner.configs

    @property
    def default(self) -> Optional[Callable[..., Config]]:
        """The tuner's zero-search default."""
        return self.tuner.default

    @property
    def key(self) -> tuple:
        """The tuner's key argument names."""
        return self.tuner.key

    def call(self) -> Callable[..., Any]:
        """The callable users run: ``entry`` or the tuner itself."""
        return self.entry if self.entry is not None else self.tuner

    def bind(self, *args: Any, **kwargs: Any) -> tuple:
        """``(tuner_args, tuner_kwargs)`` for a call of :meth:`call` with these arguments."""
        if self.entry is None:
            return args, kwargs
        out = self.tuner_args(*args, **kwargs)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], (tuple, list))
                and isinstance(out[1], Mapping)):
            raise TypeError(f"Adopter({self.name!r}).tuner_args returned {out!r}; expected (args, kwargs): "
                            f"a tuple or list of positional arguments and a dict of keyword arguments")
        return tuple(out[0]), dict(out[1])


class DuplicateAdopterError(ValueError):
    """Two adopters registered one name."""


class AdopterRegistry:
    """Names -> adopters; the host owns names, plugins register."""

    def __init__(self) -> None:
        self._adopters: dict[str, Adopter] = {}

    def register(self, adopter: Adopter, distribution: Optional[str] = None) -> Adopter:
        if not isinstance(adopter, Adopter):
            raise TypeError(f"register() takes a flyautotune.Adopter, got {adopter!r}")
        if distribution and adopter.distribution is None:
            adopter = attrs.evolve(adopter, distribution=distribution)
        old = self._adopters.get(adopter.name)
        if old is not None:
            raise DuplicateAdopterError(
                f"adopter name {adopter.name!r} is registered twice: by "
                f"{old.distribution or 'an in-process register() call'} and by "
                f"{adopter.distribution or 'an in-process register() call'}; "
                f"rename one or disable a plugin with FLYAUTOTUNE_DISABLE_PLUGINS"
            )
        self._adopters[adopter.name] = adopter
        return adopter

    def get(self, name: str) -> Adopter:
        try:
            return self._adopters[name]
        except KeyError:
            known = ", ".join(sorted(self._adopters)) or "none"
            raise KeyError(f"no adopter named {name!r}; registered adopters: {known}") from None

    def names(self) -> list:
        return sorted(self._adopters)

    def all(self) -> dict:
        return dict(sorted(self._adopters.items()))
