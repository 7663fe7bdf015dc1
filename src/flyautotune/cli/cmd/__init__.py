"""One module per sub-command: ``add_parser(subparsers)`` declares it, ``run(args)`` does it."""

from ...scale import cli_plan as plan
from . import clear, export, import_pack, native, plugins, report, show, tune

#: name -> module, in the order ``--help`` lists them.
COMMANDS = {
    "plugins": plugins,
    "tune": tune,
    "show": show,
    "export": export,
    "import": import_pack,
    "clear": clear,
    "report": report,
    "plan": plan,
    "native": native,
}
