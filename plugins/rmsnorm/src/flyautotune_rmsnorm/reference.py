"""An fp64 reference and the error measure the tests and benchmarks use."""

from __future__ import annotations

#: Largest accepted ||y - ref|| / ||ref|| per output dtype name.
TOLERANCE = {"bfloat16": 5e-3, "float16": 5e-3, "float32": 1e-5}


def rmsnorm_reference(x, weight, eps: float = 1e-6):
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` in float64."""
    xd = x.double()
    return xd * (xd.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * weight.double()


def relative_error(y, ref) -> float:
    """``||y - ref|| / ||ref||`` (NaN in ``y`` gives NaN, which no tolerance accepts)."""
    yd = y.double().to(ref.device)
    return ((yd - ref).norm() / ref.norm()).item()


def tolerance(dtype) -> float:
    return TOLERANCE[str(dtype).replace("torch.", "")]


def check_against_reference(y, x, weight, what: str = "", eps: float = 1e-6) -> None:
    """Assert ``y`` is ``rmsnorm(x, weight)``: every element written (no NaN), the whole tensor within
    :func:`tolerance`, and every row within twice that (one row with a wrong sum hides in the whole
    tensor's error)."""
    assert not y.isnan().any(), f"{what}: an output element was not written"
    ref = rmsnorm_reference(x, weight, eps)
    err = relative_error(y, ref)
    assert err <= tolerance(y.dtype), f"{what}: relative error {err:.3g}"
    rows = ((y.double().to(ref.device) - ref).norm(dim=-1) / ref.norm(dim=-1)).max().item()
    assert rows <= 2 * tolerance(y.dtype), f"{what}: relative error {rows:.3g} in a row"
