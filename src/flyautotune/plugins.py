"""Building the plugin manager: specs, entry points, built-ins, validation."""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
import re
import threading
from typing import Any, Iterable, Optional

import attrs
import pluggy

from . import hookspecs
from ._markers import PROJECT
from .adopter import Adopter, AdopterRegistry

log = logging.getLogger("flyautotune")

ENTRY_POINT_GROUP = "flyautotune"
DISABLE_ENV = "FLYAUTOTUNE_DISABLE_PLUGINS"


class PluginLoadError(RuntimeError):
    """A plugin is malformed (e.g. a hookimpl that matches no hookspec)."""


@attrs.frozen
class PluginInfo:
    """What ``flyautotune plugins`` shows for one plugin."""

    name: str
    distribution: Optional[str]
    version: Optional[str]
    module: Optional[str]
    builtin: bool = False
    error: Optional[str] = None


class FlyPluginManager(pluggy.PluginManager):
    """pluggy's manager plus the adopter registry and load report."""

    def __init__(self) -> None:
        super().__init__(PROJECT)
        self._registry = AdopterRegistry()
        #: whether the plugins' ``flyautotune_register_adopters`` hooks are still to be called (they
        #: import the adopters' kernels: torch, Triton; a command or program that never asks for an
        #: adopter does not pay for that)
        self._adopters_pending = False
        self._adopters_lock = threading.Lock()
        self._loading_thread: Optional[int] = None
        self.plugin_infos: dict[str, PluginInfo] = {}
        self.load_failures: dict[str, PluginInfo] = {}
        self.disabled: tuple = ()
        #: names in ``disabled`` that no installed or built-in plugin has (a typo disables nothing).
        self.unknown_disabled: tuple = ()

    # -- adopters -----------------------------------------------------------
    @property
    def adopter_registry(self) -> AdopterRegistry:
        """The registry, after the plugins' adopters are registered (on first use, when deferred)."""
        if self._adopters_pending and self._loading_thread != threading.get_ident():
            with self._adopters_lock:
                if self._adopters_pending:
                    # An adopter module that registers in-process while it is imported comes back here on
                    # this thread: it gets the registry being filled, not a second round of hooks.
                    self._loading_thread = threading.get_ident()
                    try:
                        self._registry = _register_adopters(self)  # raises (and stays pending) on a duplicate
                        self._adopters_pending = False
                    finally:
                        self._loading_thread = None
        return self._registry

    def adopters(self) -> dict:
        return self.adopter_registry.all()

    def get_adopter(self, name: str) -> Adopter:
        return self.adopter_registry.get(name)

    def register_adopter(self, adopter: Adopter) -> Adopter:
        """In-process registration (no entry point needed)."""
        return self.adopter_registry.register(adopter)


def disabled_plugins(env: Optional[str] = None) -> tuple:
    raw = os.environ.get(DISABLE_ENV, "") if env is None else env
    return tuple(sorted({p.strip() for p in raw.split(",") if p.strip()}))


def _iter_entry_points() -> Iterable[tuple]:
    seen = set()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP:
                continue
            ident = (ep.name, ep.value)
            if ident in seen:  # the same dist seen twice on sys.path
                continue
            seen.add(ident)
            yield ep, dist


def _load_entry_points(pm: FlyPluginManager) -> set:
    """Load and register the installed plugins; returns every installed plugin name, disabled ones included."""
    names = set()
    for ep, dist in _iter_entry_points():
        names.add(ep.name)
        dist_name = dist.metadata["name"]
        info = PluginInfo(ep.name, dist_name, dist.version, ep.value)
        if pm.is_blocked(ep.name):
            log.info("plugin %r (%s) disabled by %s", ep.name, dist_name, DISABLE_ENV)
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # one broken plugin must not take the others down
            msg = f"{type(exc).__name__}: {exc}"
            pm.load_failures[ep.name] = attrs.evolve(info, error=msg)
            log.warning("flyautotune plugin %r from %s %s failed to load: %s",
                        ep.name, dist_name, dist.version, msg)
            continue
        _register(pm, plugin, ep.name)
        if not pm.get_hookcallers(plugin):
            pm.unregister(plugin)  # it would sit in `flyautotune plugins` doing nothing
            msg = _no_hooks(ep.value, plugin)
            pm.load_failures[ep.name] = attrs.evolve(info, error=msg)
            log.warning("flyautotune plugin %r from %s %s failed to load: %s", ep.name, dist_name, dist.version, msg)
            continue
        pm.plugin_infos[ep.name] = info
    return names


def _no_hooks(value: str, plugin: Any) -> str:
    """Why an entry point's object registered no hook, for ``load_failures``."""
    why = f"its entry point {value!r} gives an object with no flyautotune hook (a function named like a hook " \
          f"and marked @flyautotune.hookimpl)"
    module, _, attr = value.partition(":")
    if attr and callable(plugin) and not isinstance(plugin, type):
        why += f"; it names the function {attr.strip()!r}: name the module that holds the hooks, {module.strip()!r}"
    return why


_WARNED_UNKNOWN: set = set()


def _check_disabled(pm: FlyPluginManager, known: set) -> None:
    """Warn (once per name and process) about a ``FLYAUTOTUNE_DISABLE_PLUGINS`` name no plugin has."""
    pm.unknown_disabled = tuple(n for n in pm.disabled if n not in known)
    fresh = [n for n in pm.unknown_disabled if n not in _WARNED_UNKNOWN]
    _WARNED_UNKNOWN.update(fresh)
    for name in fresh:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        log.warning("%s names %r, but no plugin of that name exists, so it disables nothing%s; known plugins: %s",
                    DISABLE_ENV, name, hint, ", ".join(sorted(known)) or "none")


def _register(pm: FlyPluginManager, plugin: Any, name: Optional[str]) -> None:
    """``pm.register``, with pluggy's refusal of a hook implementation whose arguments the hook does not
    have turned into a ``PluginLoadError`` that names the plugin, the hook and the hook's arguments."""
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        found = re.search(r"for hook '(\w+)'", str(exc))
        caller = getattr(pm.hook, found.group(1), None) if found else None
        spec = getattr(caller, "spec", None)
        accepted = f"; the hook's arguments: {', '.join(spec.argnames)}" if spec is not None else ""
        detail = " ".join(str(exc).split())
        who = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        raise PluginLoadError(f"plugin {who!r}: {detail}{accepted}") from exc


def _check_pending(pm: FlyPluginManager) -> None:
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        spec_names = [n for n in dir(hookspecs) if n.startswith("flyautotune_")]
        problems = []
        for name in dir(pm.hook):
            if not name.startswith("_"):
                caller = getattr(pm.hook, name)
                if isinstance(caller, pluggy.HookCaller) and not caller.has_spec():
                    for impl in caller.get_hookimpls():
                        close = difflib.get_close_matches(name, spec_names, n=1)
                        hint = f" (did you mean {close[0]!r}?)" if close else ""
                        problems.append(f"plugin {impl.plugin_name!r} implements unknown hook {name!r}{hint}")
        detail = "; ".join(problems) or str(exc)
        raise PluginLoadError(f"{detail}. Known hooks: {', '.join(spec_names)}") from exc


def _register_adopters(pm: FlyPluginManager) -> AdopterRegistry:
    """A registry holding ``pm``'s current in-process adopters plus every plugin's."""
    registry = AdopterRegistry()
    hook = pm.hook.flyautotune_register_adopters
    # Call each plugin on its own, so the registry knows which distribution
    # registered which adopter (needed for the duplicate-name error).
    for impl in reversed(hook.get_hookimpls()):
        info = pm.plugin_infos.get(impl.plugin_name)
        dist = f"{info.distribution} (plugin {impl.plugin_name!r})" if info and info.distribution else (
            f"plugin {impl.plugin_name!r}")

        def register(adopter: Adopter, _dist: str = dist) -> Adopter:
            return registry.register(adopter, distribution=_dist)

        impl.function(register=register)
    # Registered in-process while the hooks ran (an adopter module that registers itself when a hook
    # imports it lands in the old registry: see ``adopter_registry``); in eager builds there are none.
    for adopter in pm._registry.all().values():
        registry.register(adopter)
    return registry


def build_plugin_manager(
    *,
    entry_points: bool = True,
    builtins: bool = True,
    disabled: Optional[Iterable[str]] = None,
    plugins: Iterable[Any] = (),
    lazy_adopters: bool = False,
) -> FlyPluginManager:
    """A fresh manager: add specs, load entry points, register built-ins, check, register adopters.

    :param entry_points: load installed plugins (group ``flyautotune``).
    :param builtins: register the core's CPU backend, benchmarker and key axes.
    :param disabled: plugin names to block; default: ``FLYAUTOTUNE_DISABLE_PLUGINS``.
    :param plugins: extra plugin objects to register (tests, embedding apps).
    :param lazy_adopters: call the plugins' ``flyautotune_register_adopters`` on the first use of the
        adopters instead of now (the process-wide manager does: adopters import their kernels).
    """
    pm = FlyPluginManager()
    pm.add_hookspecs(hookspecs)
    pm.disabled = tuple(disabled) if disabled is not None else disabled_plugins()
    for name in pm.disabled:
        pm.set_blocked(name)
    known = _load_entry_points(pm) if entry_points else set()
    if builtins:
        from . import builtin

        for name, plugin in builtin.builtin_plugins():
            known.add(name)
            if not pm.is_blocked(name):
                pm.register(plugin, name=name)
                pm.plugin_infos[name] = PluginInfo(name, "flyautotune", _version(), plugin.__name__, builtin=True)
    for plugin in plugins:
        _register(pm, plugin, None)
    if entry_points and builtins and disabled is None:  # only then is every name a user could mean known
        _check_disabled(pm, known)
    _check_pending(pm)
    if lazy_adopters:
        pm._adopters_pending = True
    else:
        pm._registry = _register_adopters(pm)
    return pm


def _version() -> str:
    from . import __version__

    return __version__


_pm: Optional[FlyPluginManager] = None
_pm_lock = threading.Lock()
#: ``.registry``: on the thread building the process-wide manager, the adopters that plugin modules
#: register in-process while they are imported (the manager they would ask does not exist yet)
_building = threading.local()


def plugin_manager() -> FlyPluginManager:
    """The process-wide plugin manager, built on first use."""
    global _pm
    pm = _pm
    if pm is None:
        if getattr(_building, "registry", None) is not None:
            raise PluginLoadError(
                "flyautotune's plugins are still loading: a module imported by a plugin's entry point called "
                "into flyautotune at import time; only fat.register(...) works there. Make the call inside a "
                "function (the plugin's hook, or the first launch)")
        with _pm_lock:
            if _pm is None:
                _building.registry = AdopterRegistry()
                try:
                    built = build_plugin_manager(lazy_adopters=True)
                    for adopter in _building.registry.all().values():
                        built._registry.register(adopter)
                finally:
                    _building.registry = None
                _pm = built
            pm = _pm
    return pm


def set_plugin_manager(pm: Optional[FlyPluginManager]) -> Optional[FlyPluginManager]:
    """Replace the process-wide manager (``None`` rebuilds on next use); returns the old one."""
    global _pm
    with _pm_lock:
        old, _pm = _pm, pm
    return old


def adopters() -> dict:
    """Registered adopters by name."""
    return plugin_manager().adopters()


def get_adopter(name: str) -> Adopter:
    """The adopter named ``name``; ``KeyError`` lists the known names."""
    return plugin_manager().get_adopter(name)


def register(adopter: Adopter) -> Adopter:
    """Register an adopter in-process, without an entry point."""
    early = getattr(_building, "registry", None)
    if early is not None and _pm is None:  # a plugin module registering while the manager loads it
        return early.register(adopter)
    return plugin_manager().register_adopter(adopter)
