"""``flyautotune plugins``: backends and adopters found, and plugins that failed to load."""

from __future__ import annotations

import argparse
import json

from ...tuning import fastpath, tcheck
from ..common import indent, out, plugin_manager, short, table


def add_parser(sub) -> None:
    p = sub.add_parser("plugins", help="backends and adopters found, and plugins that failed to load")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> None:
    pm = plugin_manager()
    plugins = []
    for name, info in sorted(pm.plugin_infos.items(), key=lambda kv: (kv[1].builtin, kv[0])):
        plugin = pm.get_plugin(name)
        hooks = sorted(c.name.replace("flyautotune_", "") for c in (pm.get_hookcallers(plugin) or ()))
        plugins.append({
            "name": name, "distribution": info.distribution, "version": info.version,
            "module": info.module, "builtin": info.builtin, "hooks": hooks,
            "backend": "target" in hooks,
        })
    adopters = [
        {"name": a.name, "distribution": a.distribution, "description": a.description,
         "tunable": a.example is not None, "report": a.compile_spec is not None}
        for a in pm.adopters().values()
    ]
    failures = [
        {"name": f.name, "distribution": f.distribution, "version": f.version, "error": f.error}
        for f in sorted(pm.load_failures.values(), key=lambda f: f.name)
    ]
    kind, why = fastpath.hit_path()
    check, check_why = tcheck.status()
    if args.json:
        out(json.dumps({"plugins": plugins, "adopters": adopters, "failures": failures,
                        "disabled": list(pm.disabled),
                        "unknown_disabled": list(getattr(pm, "unknown_disabled", ())),
                        "hit_path": {"kind": kind, "why": why},
                        "tensor_check": {"kind": check, "why": check_why}}, indent=2))
        return
    out("Plugins:")
    rows = [[p["name"], "backend" if p["backend"] else ("adopters" if "register_adopters" in p["hooks"] else "hooks"),
             (p["distribution"] or "-") + (" (built-in)" if p["builtin"] else ""), p["version"] or "-",
             ", ".join(p["hooks"])] for p in plugins]
    out(indent(table(["name", "kind", "distribution", "version", "hooks"], rows)))
    out()
    out("Adopters:")
    if adopters:
        rows = [[a["name"], a["distribution"] or "in-process register()", short(a["description"], 60)]
                for a in adopters]
        out(indent(table(["name", "registered by", "description"], rows)))
    else:
        out("  none (pip install an adopter such as flyautotune-rmsnorm, or see docs/write_adopter.md)")
    if failures:
        out()
        out("Failed to load:")
        rows = [[f["name"], f"{f['distribution']} {f['version']}", f["error"]] for f in failures]
        out(indent(table(["name", "distribution", "error"], rows)))
    if pm.disabled:
        out()
        unknown = set(getattr(pm, "unknown_disabled", ()))
        names = [f"{n} (no plugin of that name)" if n in unknown else n for n in pm.disabled]
        out(f"Disabled by FLYAUTOTUNE_DISABLE_PLUGINS: {', '.join(names)}")
    out()
    out(f"Cache hits: {'in C' if kind == 'c' else 'in Python'} ({why}).")
    out(f"Tensor check: {'compiled for this torch' if check == 'compiled' else 'torch TensorGuards'} ({check_why}).")
