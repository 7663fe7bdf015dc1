"""What a tuner decided for one call: the config, where it came from, the key and the timings."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from ..config import Config

#: Where a config can come from, in lookup order.
SOURCES = ("memory", "store", "pack", "default", "search")


@attrs.frozen
class Selection:
    """The answer of ``Autotuner.select``.

    :param config: the config that runs.
    :param source: ``memory``, ``store``, ``pack``, ``default`` or ``search``.
    :param key: the canonical key (JSON text) the winner is stored under.
    :param timings: for a search, one dict per candidate: ``config``, ``ms``
        (or None), ``error`` (or None), and the measurement's ``spread``,
        ``method`` and ``reps`` where known; empty otherwise.
    :param margin: for a search, the winner's relative gain over the default
        (``0.0`` when the default was kept), else None.
    :param noise: for a search, the tie band the decision used, else None.
    """

    config: Config
    source: str = attrs.field(validator=attrs.validators.in_(SOURCES))
    key: str
    timings: tuple = attrs.field(default=(), converter=tuple)
    margin: Optional[float] = None
    noise: Optional[float] = None

    def with_source(self, source: str) -> "Selection":
        return attrs.evolve(self, source=source)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "config": self.config.to_dict() if self.config.pre_hook is None else repr(self.config),
            "source": self.source, "key": self.key, "timings": list(self.timings),
        }
        if self.margin is not None:
            d["margin"] = self.margin
        if self.noise is not None:
            d["noise"] = self.noise
        return d
