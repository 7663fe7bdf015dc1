"""The cache hit's tensor check compiled against the installed torch (``_tcheck.cpp``).

A cache hit checks that the call's tensors are laid out as the ones its plan was made for. torch's own
C check (``TensorGuards``, what ``torch.compile`` guards with) does that, but most of its cost on a hit
is pybind11's argument dispatch. ``_tcheck.TensorCheck`` makes the same check straight from the
``TensorImpl`` and is called through vectorcall.

It needs torch's C++ headers, so it is not built at install (pip's isolated build has no torch, and
the binary is tied to one torch build). It is compiled once per torch install into the user cache
(``$FLYAUTOTUNE_NATIVE_DIR``), named by the torch version, the Python ABI and the source; processes load
it (:func:`check_type`) only where the module says it was built for the running torch. Anywhere else (no
build yet, another torch, ``FLYAUTOTUNE_TENSOR_CHECK=torch``) hits keep torch's check.

Who compiles it: the first process that makes a cache hit without a build starts the compiler in the
background (:func:`start_background_build`: a detached child at low priority, one per cache folder at a
time, its output in a ``.log`` next to the build), as Triton compiles its launchers on first use; that
process keeps torch's check, processes started after the build use it. A failed build is not tried
again in the background until the source or torch changes (``.failed`` says why).
``FLYAUTOTUNE_NATIVE_AUTO=0`` turns the background build off; ``flyautotune native build`` (or
:func:`build`) compiles in the foreground and says how it went.
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
import threading
import time
from pathlib import Path
from typing import Any, Optional

from .env import flag, not_understood

log = logging.getLogger("flyautotune")

#: ``torch`` keeps hits on torch's own check even where a build exists.
ENV = "FLYAUTOTUNE_TENSOR_CHECK"
#: Where builds go (default: the user cache folder's ``native/``).
DIR_ENV = "FLYAUTOTUNE_NATIVE_DIR"
SOURCE = Path(__file__).with_name("_tcheck.cpp")
#: ``0`` (or ``off``, ``false``, ``no``) keeps hits from starting the background build.
AUTO_ENV = "FLYAUTOTUNE_NATIVE_AUTO"
#: A compile of torch's headers takes 10-40 s; a wedged compiler must not hang the command forever.
BUILD_TIMEOUT_S = 600
#: A background build's lock older than this is left over from a build that died: taken over.
STALE_LOCK_S = BUILD_TIMEOUT_S + 120

_loaded: Any = None  # None: not looked for yet; False: none usable; else the TensorCheck type
_background: Any = None  # None: not tried in this process; else what start_background_build said


def _off() -> bool:
    raw = os.environ.get(ENV, "")
    value = raw.strip().lower()
    if value not in ("", "torch"):
        not_understood(ENV, raw, "hits use the compiled check where it is built",
                       "torch, for torch's TensorGuards; unset for the compiled check")
    return value == "torch"


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


def _auto_off() -> bool:
    return not flag(AUTO_ENV, True, "cache hits still start the background build")


def side_files(path: Path) -> dict:
    """The files a background build of ``path`` keeps next to it: ``lock`` (a build is running: its pid),
    ``failed`` (the last one failed: why), ``log`` (the compiler's output)."""
    return {kind: path.with_name(path.name + "." + kind) for kind in ("lock", "failed", "log")}


def _take_lock(lock: Path) -> bool:
    """Create ``lock`` exclusively (True), taking over one older than :data:`STALE_LOCK_S`."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime < STALE_LOCK_S:
                    return False
                lock.unlink()
            except FileNotFoundError:
                pass
            continue
        os.close(fd)
        return True
    return False


def start_background_build() -> str:
    """Start compiling the check for the running torch in a detached child process, unless there is no
    need or it is not wanted; at most once per process. Returns what happened, in words: ``started (pid
    N)``, or why not (built already, turned off, a build running, the last one failed, no torch, or an
    OS error). Never raises: a hit must not fail for an optimisation."""
    global _background
    if _background is not None:
        return _background
    try:
        _background = _start()
    except Exception as err:  # noqa: BLE001 - anything unforeseen costs the build, never the hit
        _background = f"not started: {type(err).__name__}: {err}"
    log.debug("flyautotune: background build of the tensor check: %s", _background)
    return _background


def _start() -> str:
    torch = _torch()
    if torch is None:
        return "not started: torch is not imported"
    if _off() or _auto_off():
        return f"not started: {ENV}=torch" if _off() else f"not started: {AUTO_ENV}=0"
    try:
        path = build_path(torch)
        files = side_files(path)
        if path.is_file():
            return "not started: built already"
        if files["failed"].is_file():
            return f"not started: the last build failed (see {files['failed']})"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _take_lock(files["lock"]):
            return "not started: another process is building it"
        try:
            with open(files["log"], "w") as logf:
                code = f"import sys; from {__package__} import tcheck; sys.exit(tcheck._background_main(sys.argv[1]))"
                child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                                         close_fds=True)
            files["lock"].write_text(f"{child.pid}\n")
        except BaseException:
            files["lock"].unlink(missing_ok=True)
            raise
    except OSError as err:
        return f"not started: {err}"
    threading.Thread(target=child.wait, name="flyautotune-tcheck-build", daemon=True).start()  # reaps it
    log.info("flyautotune: compiling the tensor check for torch %s in the background (pid %d, output in %s); "
             "processes started after it finishes use it (%s=0 turns this off)", torch.__version__, child.pid,
             files["log"], AUTO_ENV)
    return f"started (pid {child.pid})"


def _background_main(expected: str) -> int:
    """The detached child of :func:`start_background_build`, which expects the build at ``expected``:
    build at low priority, record a failure, release the lock."""
    files = side_files(Path(expected))
    try:
        try:
            os.nice(10)
        except (AttributeError, OSError):  # pragma: no cover - no nice (Windows) or not allowed
            pass
        import torch
        if build_path(torch) != Path(expected):  # another torch here (the parent changed sys.path)
            raise RuntimeError(f"this process's torch ({torch.__version__}, {torch.__file__}) is not the one "
                               f"that asked for {expected}")
        path = build(background=True)
        print(f"built {path}")
        return 0
    except Exception as err:  # noqa: BLE001 - whatever went wrong is said in .failed and the log
        files["failed"].write_text(f"{type(err).__name__}: {err}\n")
        print(f"failed: {err}")
        return 1
    finally:
        files["lock"].unlink(missing_ok=True)


def status() -> tuple:
    """``(kind, why)``: ``"compiled"`` or ``"torch"``, and why (``flyautotune plugins`` says it)."""
    if check_type() is not None:
        return "compiled", str(build_path())
    if _torch() is None:
        return "torch", "torch is not imported"
    if _off():
        return "torch", f"{ENV}=torch"
    path = build_path()
    files = side_files(path)
    if path.is_file():
        return "torch", f"{path} is built; processes started from now on use it"
    if files["lock"].is_file():
        return "torch", (f"it is being compiled in the background ({files['lock']}); processes started after "
                         f"it finishes use it")
    if files["failed"].is_file():
        why = files["failed"].read_text(errors="replace").strip().splitlines()[:1]
        return "torch", (f"its background build failed ({why[0] if why else 'no reason recorded'}; output in "
                         f"{files['log']}); flyautotune native build tries again and shows the compiler's output")
    auto = (f"{AUTO_ENV}=0 keeps hits from building it" if _auto_off() else
            "the first cache hit compiles it in the background")
    return "torch", f"not built for this torch yet ({auto}; flyautotune native build compiles it now)"


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


def build(force: bool = False, background: bool = False) -> Path:
    """Compile the check for the running torch into :func:`build_path` (a no-op where it exists, unless
    ``force``) and return the path. Raises ``RuntimeError`` with the compiler's output when it fails. A
    foreground build (not ``background``) clears the record of a failed background build first, so hits
    try again in the background after it."""
    import torch
    path = build_path(torch)
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if not background:
        side_files(path)["failed"].unlink(missing_ok=True)
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
