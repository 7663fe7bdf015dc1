"""Is a config routable to this launch, and may a stored or shipped winner run at all?"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from .. import hints as _hints
from ..config import Config
from ..target import Target
from .binding import Call, Signature
from .callables import naming_error


class IncompatibleConfigError(ValueError):
    """A config cannot be routed to this kernel (unknown kwarg, rejected hint).

    Launchers may raise it for a config they cannot take; a stored winner that
    raises it is dropped and the default is used instead.
    """


class UntrustedConfigError(IncompatibleConfigError):
    """A stored or shipped winner sets something its tuner does not allow."""


def check_caller(name: str, sig: Signature, configs: Sequence[Config], call: Call) -> None:
    """A tuned argument the caller also passed is the caller's error."""
    given = call.given(sig.positional)
    for config in configs:
        for arg in config.kwargs:
            if arg in given:
                raise IncompatibleConfigError(
                    f"{name}: config {config!r} sets {arg!r}, which the caller also passed "
                    f"({arg}={call.named.get(arg)!r}); leave tuned arguments to the tuner"
                )


def check_fits(name: str, sig: Signature, pm: Any, configs: Sequence[Config], target: Target,
               snapshot: tuple) -> None:
    """Every kwarg is consumed by the launch and every hint is accepted by the backend."""
    base = dict(snapshot)
    for config in configs:
        for arg in config.kwargs:
            if arg not in sig.sig.parameters and not sig.var_kw:
                raise IncompatibleConfigError(
                    f"{name}: config {config!r} sets {arg!r}, which nothing consumes: "
                    f"{sig.fn_name} takes {', '.join(sig.params)}. A kernel kwarg must be a parameter of the "
                    f"launch; a compiler option goes in compile_hints={{{arg!r}: {config.kwargs[arg]!r}}} (only "
                    f"{', '.join(_hints.KNOWN_HINTS)} are hints when given by name)"
                )
        merged = _hints.merge_hints(base, config.hints)
        try:
            pm.hook.flyautotune_validate_hints(hints=merged, target=target)
        except (TypeError, ValueError) as exc:
            raise IncompatibleConfigError(
                f"{name}: config {config!r} cannot be compiled for {target.backend}/{target.arch}: {exc}"
            ) from exc


def tunable_names(static: Optional[Sequence[Config]], default: Optional[Config]) -> Optional[frozenset]:
    """The kwarg names a winner may set: those of the static space (and the default),
    or None when the space is computed and there is no default to learn them from."""
    names: set = set()
    if static is not None:
        for c in static:
            names.update(c.kwargs)
    if default is not None:
        names.update(default.kwargs)
    if static is None and default is None:
        return None
    return frozenset(names)


def value_types(known: Sequence[Config]) -> dict:
    """``{kwarg name: the types its values have in known configs}`` (``bool`` apart from ``int``)."""
    types: dict = {}
    for c in known:
        for arg, value in c.kwargs.items():
            types.setdefault(arg, set()).add(type(value))
    return types


def _type_names(types: set) -> str:
    return " or ".join(sorted(t.__name__ for t in types))


def same_config(a: Config, b: Config) -> bool:
    """``a == b`` with each value of the same type too: ``256.0`` and ``True`` are not ``256`` and ``1``
    (they compare equal in Python, but a kernel factory may refuse them, or build another kernel)."""
    return a == b and all(type(v) is type(b.kwargs[k]) for k, v in a.kwargs.items())


def check_untrusted(name: str, sig: Signature, config: Config, *, tunable: Optional[frozenset],
                    members: Optional[Sequence[Config]], validate: Any, named: Mapping[str, Any],
                    known: Sequence[Config] = ()) -> None:
    """A winner from a store or pack may set only tunable names, to values the tuner accepts.

    :param tunable: names a winner may set (None: any launch parameter with a default).
    :param members: when known, the candidate space of this call: the winner must be one of them, with
        values of the same types (:func:`same_config`).
    :param validate: the tuner's ``validate(config, **named)``, or None.
    :param known: configs the tuner itself declared (its static space, its default): a winner's value of a
        name they set must have a type one of them gives it (``BLOCK=256.0`` where they have ints is refused).
    :raises UntrustedConfigError: naming what is not allowed.
    """
    types = value_types(known)
    for arg, value in config.kwargs.items():
        if arg == "stream":
            raise UntrustedConfigError(f"{name}: a stored winner may not set the launch stream ({arg}={value!r})")
        param = sig.sig.parameters.get(arg)
        if tunable is not None and arg not in tunable:
            raise UntrustedConfigError(
                f"{name}: the winner sets {arg}={value!r}, which is not one of the tuner's tunable names "
                f"({', '.join(sorted(tunable)) or 'none'})"
            )
        if tunable is None and (param is None or param.default is param.empty):
            raise UntrustedConfigError(f"{name}: the winner sets {arg}={value!r}, which is not a tunable "
                                       f"parameter of {sig.fn_name} (only parameters with a default are)")
        if not _plain(value):
            raise UntrustedConfigError(f"{name}: the winner sets {arg}={value!r}; tuned values must be "
                                       f"finite numbers, strings or booleans")
        if arg in types and type(value) not in types[arg]:
            raise UntrustedConfigError(f"{name}: the winner sets {arg}={value!r} ({type(value).__name__}); the "
                                       f"tuner's own configs give {arg} {_type_names(types[arg])} values")
    if members is not None and not any(same_config(config, m) for m in members):
        raise UntrustedConfigError(f"{name}: the winner {config} is not a member of the tuner's config space")
    if validate is not None:
        try:
            ok = validate(config, **named)
        except (TypeError, ValueError) as exc:
            raise UntrustedConfigError(f"{name}: the winner {config} was refused by validate(): {exc}") from exc
        except Exception as exc:  # not a refusal: the tuner's bug, named as run_callable names it
            named_exc = naming_error(name, "validate(...)", exc)
            if named_exc is None:
                raise
            raise named_exc from exc
        if ok is False:
            raise UntrustedConfigError(f"{name}: the winner {config} was refused by validate()")


def _plain(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, tuple):
        return all(map(_plain, value))
    return value is None or isinstance(value, (bool, int, str))
