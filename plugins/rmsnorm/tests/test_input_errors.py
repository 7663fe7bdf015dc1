"""Inputs that used to give a silently wrong result (or a confusing error) are refused by name, and their
valid neighbours still compute RMSNorm (fp64-referenced, on CPU through Triton's interpreter)."""

import re
from fractions import Fraction

import numpy as np
import pytest
import torch

from flyautotune_rmsnorm import rmsnorm, rmsnorm_autotuned
from flyautotune_rmsnorm.reference import check_against_reference

ACCEPTED_EPS = r"accepted: a Python float or int or a numpy scalar, finite, from 0 to 3\.4028234663852886e\+38"


@pytest.fixture(params=[rmsnorm, rmsnorm_autotuned], ids=["rmsnorm", "rmsnorm_autotuned"])
def entry(request):
    return request.param


def inputs(shape=(3, 64), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 3, torch.rand(shape[-1], generator=g) + 0.5


# -- out= whose rows overlap ------------------------------------------------------------------------


@pytest.mark.parametrize("make_out, shape, strides, sy", [
    (lambda: torch.full((64,), 7.0).expand(3, 64), (3, 64), (0, 1), 0),  # every row is one memory row
    (lambda: torch.full((1, 1, 64), 7.0).expand(1, 3, 64), (1, 3, 64), (64, 0, 1), 0),
    (lambda: torch.full((160,), 7.0).as_strided((3, 64), (32, 1)), (3, 64), (32, 1), 32),  # half-overlapping
], ids=["expanded", "expanded-3d", "half-overlap"])
def test_out_with_overlapping_rows_is_refused(entry, make_out, shape, strides, sy):
    x, w = inputs(shape)
    out = make_out()
    msg = (rf"out with shape {re.escape(str(shape))} and strides {re.escape(str(strides))} has overlapping rows "
           rf"\(row stride {sy} < N=64.*pass a tensor with distinct rows")
    with pytest.raises(ValueError, match=msg):
        entry(x, w, out=out)
    assert (out == 7.0).all()  # refused before anything was written


def test_expanded_x_cannot_be_its_own_out(entry):
    x = torch.randn(64).expand(3, 64)
    with pytest.raises(ValueError, match=r"strides \(0, 1\) has overlapping rows"):
        entry(x, torch.ones(64), out=x)


@pytest.mark.parametrize("with_out", [False, True], ids=["new", "out"])
def test_expanded_x_is_read_correctly(entry, with_out):
    row, w = inputs((1, 64))
    x = row.expand(3, 64)  # row stride 0: reading one row three times is fine
    out = torch.full((3, 64), float("nan")) if with_out else None
    y = entry(x, w, out=out)
    assert y.shape == (3, 64) and (out is None or y is out)
    check_against_reference(y, x, w, "expanded x")


def test_distinct_rows_with_gaps_are_still_accepted(entry):
    x, w = inputs()
    out = torch.full((3, 80), float("nan"))[:, :64]  # row stride 80 >= N: distinct rows
    check_against_reference(entry(x, w, out=out), x, w, "out with a row stride of 80")


# -- out= sharing memory with x or the weight ---------------------------------------------------------


@pytest.mark.parametrize("offset", [64, -64, 32, 1], ids=["next-row", "previous-row", "half-row", "one-element"])
def test_out_partially_overlapping_x_is_refused(entry, offset):
    buf = torch.randn(6 * 64)
    x = buf[128:128 + 3 * 64].view(3, 64)  # programs run in any order: one would read a row another wrote
    before = buf.clone()
    out = buf[128 + offset:128 + offset + 3 * 64].view(3, 64)
    shift = re.escape(f"{offset * 4:+d}")
    with pytest.raises(ValueError, match=rf"out \(shape \(3, 64\), strides \(64, 1\), {shift} bytes from "
                                         r"x's first element\) partially overlaps x \(row stride 64\).*accepted: "
                                         r"out=x itself \(in place\) or an out sharing no element with x"):
        entry(x, torch.ones(64), out=out)
    assert torch.equal(buf, before)  # refused before anything was written


def test_out_overlapping_the_weight_is_refused(entry):
    buf = torch.rand(4, 64) + 0.5
    x, w, out = torch.randn(3, 64), buf[3], buf[1:]  # the weight is out's last row
    with pytest.raises(ValueError, match=r"out \(shape \(3, 64\), strides \(64, 1\)\) shares memory with weight.*"
                                         r"pass an out that does not overlap weight"):
        entry(x, w, out=out)
    with pytest.raises(ValueError, match=r"shares memory with weight"):
        entry(x, x[1], out=x)  # in place, normalized by one of its own rows


def test_out_interleaved_with_x_without_sharing_an_element_is_accepted(entry):
    buf = torch.randn(3, 128)
    x, out = buf[:, :64], buf[:, 64:]  # two column blocks of one buffer
    x0, w = x.clone(), torch.rand(64) + 0.5
    assert entry(x, w, out=out) is out
    check_against_reference(out, x0, w, "out interleaved with x")
    assert torch.equal(x, x0)


# -- autograd: the kernel has no backward ------------------------------------------------------------


def test_x_requiring_grad_is_refused_with_grad_on(entry):
    x, w = inputs()
    with pytest.raises(ValueError, match=r"x\.requires_grad=True with grad mode on, but this kernel has no backward"
                                         r".*torch\.no_grad\(\) or torch\.inference_mode\(\).*"
                                         r"torch\.nn\.functional\.rms_norm to train"):
        entry(x.requires_grad_(), w)


def test_weight_parameter_is_refused_with_grad_on(entry):
    x, w = inputs()
    with pytest.raises(ValueError, match=r"weight\.requires_grad=True with grad mode on.*no backward"):
        entry(x, torch.nn.Parameter(w))


def test_out_requiring_grad_is_refused_with_grad_on(entry):
    x, w = inputs()
    with pytest.raises(ValueError, match=r"out\.requires_grad=True with grad mode on.*torch\.no_grad\(\)"):
        entry(x, w, out=torch.empty(3, 64, requires_grad=True))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_inputs_requiring_grad_run_without_grad_mode(entry, mode):
    x, w = inputs()
    xg, wg = x.clone().requires_grad_(), torch.nn.Parameter(w.clone())
    with mode():
        y = entry(xg, wg)
    assert not y.requires_grad
    check_against_reference(y, x, w, mode.__name__)
    assert torch.equal(y, entry(x, w))


# -- eps ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [np.float32(1e-5), np.float64(0.25), np.float32(4.0), np.int64(2), 3,
                                 Fraction(1, 4)], ids=repr)
def test_real_number_eps_is_accepted(entry, eps):
    x, w = inputs()
    y = entry(x, w, eps=eps)
    assert torch.equal(y, entry(x, w, eps=float(eps)))  # exactly the float's result
    check_against_reference(y, x, w, f"eps={eps!r}", eps=float(eps))


def test_eps_up_to_the_largest_fp32_is_honoured(entry):
    x, w = inputs()
    y = entry(x, w, eps=3.4028234663852886e38)
    assert y.abs().max() > 0  # not the zeros an eps of inf gives
    check_against_reference(y, x, w, "eps=FP32_MAX", eps=3.4028234663852886e38)


def test_tensor_eps_is_refused(entry):
    x, w = inputs()
    with pytest.raises(TypeError, match=r"eps=tensor\(1\.0000e-05\) must be a non-negative float, not a tensor: "
                                        r"pass a Python float \(eps\.item\(\)\); " + ACCEPTED_EPS):
        entry(x, w, eps=torch.tensor(1e-5))


@pytest.mark.parametrize("eps", [True, "1e-5", None, np.array(1e-5)], ids=repr)
def test_non_number_eps_is_refused(entry, eps):
    x, w = inputs()
    with pytest.raises(TypeError, match=rf"eps={re.escape(repr(eps))} \({type(eps).__name__}\) must be a "
                                        rf"non-negative float; " + ACCEPTED_EPS):
        entry(x, w, eps=eps)


@pytest.mark.parametrize("eps", [float("inf"), float("nan"), 1e300, 3.5e38, 10**400, -1e-9, np.float64("inf"),
                                 np.float32("-inf")], ids=lambda v: repr(v)[:24])
def test_eps_outside_the_fp32_range_is_refused(entry, eps):
    x, w = inputs()
    with pytest.raises(ValueError, match=rf"eps={re.escape(repr(eps))} must be a non-negative float; "
                                         + ACCEPTED_EPS):
        entry(x, w, eps=eps)


# -- stream= on an empty input ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 64), (4, 0)], ids=str)
def test_bad_stream_is_refused_on_empty_input(entry, shape):
    x, w = torch.randn(shape), torch.ones(shape[-1])
    with pytest.raises(TypeError, match=r"stream='fast' must be a torch stream, a raw stream handle \(int\) or None"):
        entry(x, w, stream="fast")
    with pytest.raises(ValueError, match=r"stream=-3: a raw stream handle must be >= 0"):
        entry(x, w, stream=-3)
    with pytest.raises(ValueError, match=r"stream=1234: a raw stream handle needs a GPU tensor, x is on cpu"):
        entry(x, w, stream=1234)
    assert entry(x, w, stream=0).shape == shape  # 0: the default stream


# -- devices -----------------------------------------------------------------------------------------


def test_meta_tensors_are_refused(entry):
    x, w = torch.empty(3, 64, device="meta"), torch.empty(64, device="meta")
    with pytest.raises(ValueError, match=r"x\.device=meta holds no data to normalize; accepted: CUDA/ROCm GPU "
                                         r"tensors, or CPU tensors \(run under Triton's interpreter\)"):
        entry(x, w)


def test_empty_meta_input_returns_an_empty_result(entry):
    y = entry(torch.empty(0, 64, device="meta"), torch.empty(64, device="meta"))
    assert y.shape == (0, 64) and y.is_meta
