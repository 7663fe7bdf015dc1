"""The cache hit's tensor check compiled against the installed torch (``_tcheck.cpp``).

A cache hit checks that the call's tensors are laid out as the ones its plan was made for. torch's own
C check (``TensorGuards``, what ``torch.compile`` guards with) does that, but most of its cost on a hit
is pybind11's argument dispatch. ``_tcheck.TensorCheck`` makes the same check straight from the
``TensorImpl`` and is called through vectorcall.

It needs torch's C++ headers, so it is not built at install (pip's isolated build has no torch, and
the binary is tied to one torch build). ``flyautotune native build`` (or :func:`build`) compiles it
once into the user cache (``$FLYAUTOTUNE_NATIVE_DIR``), named by the torch version, the Python ABI and the source; later processes
load it (:func:`check_type`) only where the module says it was built for the running torch. Anywhere
else (no build, another torch, ``FLYAUTOTUNE_TENSOR_CHECK=torch``) hits keep torch's check.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger("flyautotune")

#: ``torch`` keeps hits on torch's own check even where a build exists.
ENV = "FLYAUTOTUNE_TENSOR_CHECK"
#: Where builds go (default: the user cache folder's ``native/``).
DIR_ENV = "FLYAUTOTUNE_NATIVE_DIR"
SOURCE = Path(__file__).with_name("_tcheck.cpp")
#: A compile of torch's headers takes 10-40 s; a wedged compiler must not hang the command forever.
BUILD_TIMEOUT_S = 600

_loaded: Any = None  # None: not looked for yet; False: none usable; else the TensorCheck type


def _off() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "torch"


def _torch() -> Any:
    return sys.modules.get("torch")


def build_path(torch: Any = None) -> Optional[Path]:
    """Where the build for the running torch lives (None without torch): ``$FLYAUTOTUNE_NATIVE_DIR``, else
    the user cache folder's ``native/`` (not the store's folder: a store kept apart for a test or a job
    still finds the build), named by a digest of the source, ``torch.__version__``, torch's folder and the Python ABI tag."""
    torch = torch or _torch()
    if torch is None:
        return None
    from ..store.location import user_cache_dir
    soabi = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), torch.__version__.encode(), os.path.dirname(torch.__file__).encode(),
                 soabi.encode()):
        digest.update(part)
        digest.update(b"\0")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    folder = os.environ.get(DIR_ENV)
    folder = Path(folder).expanduser() if folder else user_cache_dir() / "native"
    return folder / f"_tcheck-{digest.hexdigest()[:16]}{suffix}"


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("flyautotune.tuning._tcheck", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_type() -> Optional[type]:
    """``_tcheck.TensorCheck`` where a build for the running torch exists and loads, else None (looked
    for once per process; torch must be imported first)."""
    global _loaded
    if _loaded is None:
        _loaded = False
        torch = _torch()
        if torch is None or _off():
            return None
        path = build_path(torch)
        if path is not None and path.is_file():
            try:
                module = _import(path)
                if module.TORCH_VERSION != torch.__version__:
                    log.warning("flyautotune: %s was built for torch %s, not %s; torch's check serves hits",
                                path, module.TORCH_VERSION, torch.__version__)
                else:
                    _loaded = module.TensorCheck
            except Exception as err:  # noqa: BLE001 - a broken build costs speed, never a call
                log.warning("flyautotune: the compiled tensor check %s does not load (%s); torch's check "
                            "serves hits (rebuild: flyautotune native build)", path, err)
    return _loaded or None


def status() -> tuple:
    """``(kind, why)``: ``"compiled"`` or ``"torch"``, and why (``flyautotune plugins`` says it)."""
    if check_type() is not None:
        return "compiled", str(build_path())
    if _torch() is None:
        return "torch", "torch is not imported"
    if _off():
        return "torch", f"{ENV}=torch"
    return "torch", "not built for this torch (flyautotune native build compiles it, once)"


def compiler() -> list:
    """The C++ compiler's command: ``$CXX``, else the one Python was built with, else ``c++``."""
    return shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")


def compile_command(torch: Any, source: Path, target: Path) -> list:
    """The compiler call that builds ``source`` into ``target`` against ``torch``'s headers and libraries."""
    from torch.utils import cpp_extension
    cxx = compiler()
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    libs = cpp_extension.library_paths()
    cmd = [*cxx, "-O2", "-std=c++20", "-fPIC", "-shared", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-DFAT_TORCH_VERSION=\"{torch.__version__}\"", f"-I{sysconfig.get_paths()['include']}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    cmd += [str(source), "-o", str(target)]
    cmd += [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs] + ["-lc10", "-ltorch_python"]
    return cmd


def build(force: bool = False) -> Path:
    """Compile the check for the running torch into :func:`build_path` (a no-op where it exists, unless
    ``force``) and return the path. Raises ``RuntimeError`` with the compiler's output when it fails."""
    import torch
    path = build_path(torch)
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp.so", dir=path.parent)
    os.close(fd)
    try:
        cmd = compile_command(torch, SOURCE, Path(tmp))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except FileNotFoundError as err:
            raise RuntimeError(f"no C++ compiler: {cmd[0]!r} was not found (set CXX to one)") from err
        except subprocess.TimeoutExpired as err:
            raise RuntimeError(f"the compiler ran past {BUILD_TIMEOUT_S} s: {shlex.join(cmd)}") from err
        if done.returncode != 0:
            raise RuntimeError(f"the compiler failed (exit {done.returncode}): {shlex.join(cmd)}\n"
                               f"{(done.stderr or done.stdout)[-4000:]}")
        module = _import(Path(tmp))  # load it before it takes the name: a broken build never lands
        if module.TORCH_VERSION != torch.__version__:  # pragma: no cover - the macro is the running version
            raise RuntimeError(f"built for torch {module.TORCH_VERSION}, running {torch.__version__}")
        os.replace(tmp, path)  # atomic: a process loading it meanwhile sees the old file or the whole new one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    global _loaded
    _loaded = None  # this process looks again (fastpath reads it when it next makes a check)
    return path
