"""Output checks: a candidate must compute what the reference config computes."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

#: (rtol, atol) per dtype name: a reordered fp32 reduction, or one rounding step in 16 bits, passes.
TOLERANCES = {
    "torch.float64": (1e-7, 1e-9),
    "torch.float32": (1e-4, 1e-5),
    "torch.float16": (2e-3, 1e-3),
    "torch.bfloat16": (1.6e-2, 1e-2),
}


def overlaps_itself(t: Any) -> bool:
    """A view in which elements share memory (a broadcast, ``x.expand(...)``: stride 0 over a dimension of
    two or more): nothing can be copied into it and no launch can write it, so it is only ever read."""
    return any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape))


class Snapshot:
    """Copies of a call's tensor arguments, to restore them before each checked run (a broadcast view is
    read-only, so it is left out)."""

    def __init__(self, tensors: list) -> None:
        self.saved = [(n, t, t.clone()) for n, t in tensors if not overlaps_itself(t)]

    def restore(self) -> None:
        for _, t, s in self.saved:
            t.copy_(s)

    def changed(self) -> list:
        """Names of the arguments the last run wrote (the outputs)."""
        import torch

        return [n for n, t, s in self.saved if not torch.equal(t, s)]


def outputs(result: Any, tensors: list, names: list) -> list:
    """``(label, tensor)`` pairs to compare: the written arguments and the returned tensors."""
    import torch

    out = [(f"argument {n}", t) for n, t in tensors if n in names]
    items = result if isinstance(result, (tuple, list)) else (result,)
    for i, r in enumerate(items):
        if isinstance(r, torch.Tensor) and not any(r is t for _, t in tensors):
            out.append((f"result {i}" if len(items) > 1 else "result", r))
    return out


def clone(pairs: list) -> list:
    return [(label, t.detach().clone()) for label, t in pairs]


def poison(tensors: list, names: list, keep: tuple) -> None:
    """Fill the written arguments with NaN (or -1), so a candidate that skips a part is caught.

    Arguments that share memory with an input the candidate reads (``keep``) are left alone.
    """
    by_name = dict(tensors)
    kept_ptrs = {by_name[k].data_ptr() for k in keep if k in by_name}
    for n in names:
        t = by_name[n]
        if t.data_ptr() in kept_ptrs or any(t.data_ptr() == o.data_ptr() for m, o in tensors if m != n):
            continue
        t.fill_(float("nan") if t.is_floating_point() else -1)


def compare(reference: list, got: list, tolerance: Optional[Any] = None) -> Optional[str]:
    """None when ``got`` matches ``reference`` within the per-dtype tolerance, else why not."""
    import torch

    if len(reference) != len(got):
        return f"returned {len(got)} outputs, the reference {len(reference)}"
    for (label, ref), (_, out) in zip(reference, got):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return f"{label} is {tuple(out.shape)} {out.dtype}, the reference {tuple(ref.shape)} {ref.dtype}"
        if not ref.is_floating_point():
            if not torch.equal(ref, out):
                return f"{label} differs from the reference"
            continue
        rtol, atol = _tolerance(tolerance, ref.dtype)
        ok = torch.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(ok.all()):
            bad = int((~ok).sum())
            diff = (out.double() - ref.double()).abs()
            worst = float(diff.nan_to_num(float("inf")).max())
            return (f"{label} differs from the reference in {bad} of {ref.numel()} elements "
                    f"(max abs diff {worst:.3g}; rtol={rtol:g}, atol={atol:g})")
    return None


def _tolerance(tolerance: Any, dtype: Any) -> tuple:
    if tolerance is None:
        return TOLERANCES.get(str(dtype), (1e-4, 1e-5))
    if isinstance(tolerance, Mapping):
        t = tolerance.get(dtype, tolerance.get(str(dtype)))
        return tuple(t) if t is not None else TOLERANCES.get(str(dtype), (1e-4, 1e-5))
    return tuple(tolerance)


def check_arg(value: Any) -> Any:
    """Validate ``check=``: True, False or a callable ``check(result, **named)``."""
    if isinstance(value, bool) or callable(value):
        return value
    raise TypeError(f"autotune: check={value!r}; expected True (compare with the default's outputs), "
                    f"False (off) or a callable check(result, **named_args) that raises or returns False")


def tolerance_arg(value: Any) -> Any:
    """Validate ``tolerance=``: None, ``(rtol, atol)`` or ``{dtype: (rtol, atol)}``."""
    if value is None:
        return None
    pairs = ([(f"tolerance[{k!r}]", p) for k, p in value.items()] if isinstance(value, Mapping)
             else [("tolerance", value)])
    for where, p in pairs:
        if not (isinstance(p, (tuple, list)) and len(p) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)):
            raise TypeError(f"autotune: {where}={p!r}; expected (rtol, atol) with non-negative numbers, "
                            f"or a dict dtype -> (rtol, atol)")
        if not all(x >= 0 and x != float("inf") for x in p):  # NaN fails x >= 0
            raise ValueError(f"autotune: {where}={p!r}; rtol and atol must be finite numbers >= 0")
    return value


Checker = Callable[..., Any]
