import logging
import subprocess
import sys

import pytest

from flyautotune import logs


def test_env_level_routes_records_to_stderr():
    code = (
        "import logging, flyautotune\n"
        "logging.getLogger('flyautotune.store').info('hello from the store')\n"
        "logging.getLogger('flyautotune').debug('not shown at info')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"FLYAUTOTUNE_LOG": "info", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "[flyautotune INFO] hello from the store" in out.stderr
    assert "not shown" not in out.stderr


def test_bad_level_warns_with_accepted_values():
    with pytest.warns(RuntimeWarning, match="FLYAUTOTUNE_LOG='loud' is not a log level; accepted: debug, info"):
        assert logs.configure_from_env("loud") is None


def test_unset_adds_no_handler():
    before = list(logging.getLogger("flyautotune").handlers)
    assert logs.configure_from_env("") is None
    assert logging.getLogger("flyautotune").handlers == before
