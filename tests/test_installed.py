"""What a user gets after the README install: the three plugins, and their own adopter package."""

import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import flyautotune as fat


def test_installed_plugins_are_discovered_by_name():
    # No monkeypatching: this reads the environment the README install produced.
    pm = fat.build_plugin_manager()
    assert {"rocm", "cuda", "rmsnorm"} <= set(pm.plugin_infos), pm.load_failures
    assert pm.plugin_infos["rocm"].distribution == "flyautotune-rocm"
    assert pm.plugin_infos["cuda"].distribution == "flyautotune-cuda"
    assert pm.plugin_infos["rmsnorm"].distribution == "flyautotune-rmsnorm"
    assert "rmsnorm" in pm.adopter_registry.names()
    assert not pm.load_failures


PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "fat-user-adopter"
version = "0.3.0"
dependencies = ["flyautotune"]

[project.entry-points.flyautotune]
useradopter = "fat_user_adopter.hooks"

[tool.setuptools]
packages = ["fat_user_adopter"]
"""

HOOKS = """
import flyautotune as fat


@fat.autotune(configs=[fat.Config(SCALE=s) for s in (1, 2)], key=["n"], name="user_scale",
              default=lambda **named: fat.Config(SCALE=1))
def _launch(x, n, SCALE=None):
    return [v * SCALE for v in x]


@fat.hookimpl
def flyautotune_register_adopters(register):
    register(fat.Adopter(name="user_scale", tuner=_launch))
"""


@pytest.mark.slow
def test_pip_installed_adopter_package_is_seen_by_a_fresh_interpreter(tmp_path):
    pkg = tmp_path / "fat-user-adopter"
    (pkg / "fat_user_adopter").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "fat_user_adopter" / "__init__.py").write_text("")
    (pkg / "fat_user_adopter" / "hooks.py").write_text(HOOKS)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # The new environment sees this one's packages (flyautotune, its editable
    # installs) the way a user's environment would already have them.
    parent = sysconfig.get_paths()["purelib"]
    with open(os.path.join(venv_site, "_parent_env.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({parent!r})\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", str(pkg)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stderr
    probe = textwrap.dedent(
        """
        import flyautotune as fat
        a = fat.get_adopter("user_scale")
        print(a.name, a.distribution, sorted(a.tuner.resolve_config([1, 2], 2).kwargs))
        """
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "user_scale"
    assert "fat-user-adopter" in out.stdout
    # and it is not visible to this (parent) environment
    assert "user_scale" not in fat.build_plugin_manager().adopter_registry.names()
