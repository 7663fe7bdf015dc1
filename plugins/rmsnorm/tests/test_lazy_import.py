"""Loading flyautotune's plugins does not import the RMSNorm kernels: a command or program that never asks
for an adopter (``flyautotune show``, a program with its own tuners) does not pay for torch and Triton."""

import subprocess
import sys

import pytest

PROGRAM = """
import sys
import flyautotune as fat

pm = fat.plugin_manager()
print("loaded", "flyautotune_rmsnorm.hooks" in sys.modules, "flyautotune_rmsnorm.api" in sys.modules)
print("adopter", pm.get_adopter("rmsnorm").name, "flyautotune_rmsnorm.api" in sys.modules)
from flyautotune_rmsnorm import rmsnorm, rocm_space
print("names", rmsnorm.__module__, rocm_space.__module__)
"""


def test_plugins_load_without_the_kernels_and_the_names_import_on_first_use():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["loaded True False", "adopter rmsnorm True",
                                       "names flyautotune_rmsnorm.api flyautotune_rmsnorm.space"]


def test_an_unknown_name_is_an_attribute_error():
    import flyautotune_rmsnorm

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        flyautotune_rmsnorm.no_such_name
    assert {"rmsnorm", "rmsnorm_autotuned", "make_launcher"} <= set(dir(flyautotune_rmsnorm))
