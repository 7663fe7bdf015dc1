"""The core's one compiled part: the cache-hit path in C (``flyautotune.tuning._hit``).

Everything else is in pyproject.toml. The extension is optional: where no C compiler or Python headers
are found, the install goes on and the generated Python hit path serves every call (it is also what
the C path defers to for anything but a plain hit).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("flyautotune.tuning._hit", ["src/flyautotune/tuning/_hit.c"], optional=True)])
