"""The pluggy markers of the ``flyautotune`` project."""

import pluggy

PROJECT = "flyautotune"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
