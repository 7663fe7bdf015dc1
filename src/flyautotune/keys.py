"""Cache keys: what a winner depends on, canonical and order-independent."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from typing import Any, Iterable, Optional

_tensor_type: Optional[type] = None


def tensor_type() -> Optional[type]:
    """``torch.Tensor`` once torch is imported, else None (the core never imports torch itself)."""
    global _tensor_type
    if _tensor_type is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            _tensor_type = torch.Tensor
    return _tensor_type


def is_tensor(value: Any) -> bool:
    t = tensor_type()
    return t is not None and isinstance(value, t)


def stride_pattern(tensor: Any) -> tuple:
    """Strides bucketed to 0 (broadcast), 1 (contiguous dim) or 2 (other)."""
    return tuple(0 if s == 0 else 1 if s == 1 else 2 for s in tensor.stride())


def key_value(value: Any) -> Any:
    """A key arg's contribution: a tensor gives its shape, a NumPy scalar (``np.int64(8)``, what
    ``np.prod`` returns) its Python value, anything else itself."""
    if isinstance(value, (int, str, float)):
        return 0.0 if value == 0 and isinstance(value, float) else value  # -0.0: equal to 0.0, one key
    if numpy_scalar(value):
        return value.item()
    if is_tensor(value) or (hasattr(value, "dtype") and hasattr(value, "shape")):
        return tuple(value.shape)
    if isinstance(value, (list, tuple)):
        return tuple(map(key_value, value))
    if isinstance(value, dict):
        return tuple(sorted((str(k), key_value(v)) for k, v in value.items()))
    return value


def numpy_scalar(value: Any) -> bool:
    """A NumPy scalar or 0-d array (``np.int64(8)``, what ``np.prod`` returns): it has a dtype and an empty
    shape like a tensor, but it is a value (keyed as a shape, every size would share one key)."""
    return type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and hasattr(value, "item")


def canonical_json(value: Any) -> str:
    """Sorted, compact JSON; non-JSON values (dtypes, devices) by ``repr``."""
    from .store.jsontext import jsonable

    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), allow_nan=False)


def file_fingerprint(paths: Iterable[str]) -> str:
    """sha256 over the contents of source files (missing files count by name).

    Each file counts by its name (the basename of an absolute path, a relative path as given) and its
    contents, in the order of those two: where the files are installed never changes the fingerprint, so a
    pack tuned from one install is found by another (sorting by the full path would order files kept under
    different folders by where those folders are)."""
    parts = []
    for path in set(paths):
        path = os.fspath(path)
        name = path if not os.path.isabs(path) else os.path.basename(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b"<missing>"
        parts.append((name.encode(), data))
    h = hashlib.sha256()
    for name, data in sorted(parts):
        h.update(name)
        h.update(data)
    return h.hexdigest()[:16]


def source_files(fn: Any) -> list:
    """The file defining ``fn`` (its module), where one exists."""
    target = inspect.unwrap(fn)
    try:
        path = inspect.getsourcefile(target)
    except TypeError:
        path = None
    if path is None:
        module = sys.modules.get(getattr(target, "__module__", None) or "")
        path = getattr(module, "__file__", None)
    return [path] if path else []


def triton_compiler_key() -> Optional[str]:
    """A short hash of the imported Triton's compiler key (Triton's own cache key: its version, its
    source and its LLVM), for a backend's toolchain axis; None where Triton is not imported or has no
    such key. Two builds of one Triton version (a source build, a fork) differ here."""
    if "triton" not in sys.modules:
        return None
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            key = __import__(module, fromlist=["triton_key"]).triton_key()
        except (ImportError, AttributeError):
            continue
        return hashlib.sha256(str(key).encode()).hexdigest()[:16]
    return None
