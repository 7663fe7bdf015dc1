"""Kernel adopters: a named config space, a zero-search default and a factory."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import attrs

from .config import Config


def _name(instance, attribute, value):
    if not isinstance(value, str) or not value.replace("-", "_").isidentifier():
        raise ValueError(
            f"Adopter.name must be an identifier-like string (letters, digits, '_', '-'), got {value!r}"
        )


def _callable(instance, attribute, value):
    if not callable(value):
        raise TypeError(f"Adopter.{attribute.name} must be callable, got {value!r}")


def _optional_callable(instance, attribute, value):
    if value is not None and not callable(value):
        raise TypeError(f"Adopter.{attribute.name} must be callable or None, got {value!r}")


def _configs(instance, attribute, value):
    if callable(value):
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, Config) for c in value):
        raise TypeError(
            f"Adopter.configs must be a list of flyautotune.Config or a callable returning one, got {value!r}"
        )


def _str_tuple(value: Any) -> tuple:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen
class Adopter:
    """A kernel registered with flyautotune.

    :param name: unique name (``"rmsnorm"``).
    :param factory: ``factory(**specialization) -> launcher``; builds (and
        caches) the kernel for one specialization.
    :param specialize: ``specialize(*args, **kwargs) -> dict`` maps a call's
        arguments to the factory's specialization (shape, dtype, ...).
    :param configs: the search space: a list of ``Config`` or a callable
        ``configs(**named_args) -> list`` evaluated only when a search runs.
    :param default: ``default(**named_args) -> Config``: the zero-search pick.
    :param key: names of the call arguments that key a winner.
    :param knobs: names of the structural kwargs the factory consumes.
    :param entry: the tuned callable (``rmsnorm_autotuned``), if any.
    :param distribution: the distribution that registered it (filled by the
        registry when known).
    :param example: ``example(shape: tuple, dtype: str, device) -> (args, kwargs)``
        builds inputs for command-line tuning and reports; optional.
    :param bytes_moved: ``bytes_moved(*args, **kwargs) -> int`` for GB/s; optional.
    :param compile_spec: ``compile_spec(shape: tuple, dtype: str, config: Config,
        target=None) -> (kernel, signature: dict, constexprs: dict[, extra])``
        describing the Triton kernel a config builds, for static cross-compiled
        reports (no GPU needed); optional. ``extra`` may hold ``"options"``
        (compile options the launch derives, e.g. ``num_warps``) and
        ``"values"`` (runtime integers Triton specializes on), so a report
        builds the same binary as a real launch.
    """

    name: str = attrs.field(validator=_name)
    factory: Callable[..., Any] = attrs.field(validator=_callable)
    specialize: Optional[Callable[..., dict]] = attrs.field(default=None, validator=_optional_callable)
    configs: Union[Sequence[Config], Callable[..., Sequence[Config]]] = attrs.field(
        default=(), validator=_configs
    )
    default: Optional[Callable[..., Config]] = attrs.field(default=None, validator=_optional_callable)
    key: tuple = attrs.field(default=(), converter=_str_tuple)
    knobs: tuple = attrs.field(default=(), converter=_str_tuple)
    entry: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    distribution: Optional[str] = attrs.field(default=None)
    example: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    bytes_moved: Optional[Callable[..., int]] = attrs.field(default=None, validator=_optional_callable)
    compile_spec: Optional[Callable[..., Any]] = attrs.field(default=None, validator=_optional_callable)
    description: str = attrs.field(default="")


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
