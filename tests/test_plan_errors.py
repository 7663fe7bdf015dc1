"""Plan files refused at ``plan --check`` (exit 2, file, line and field named) for what would otherwise fail
at run time or run for hours: a device torch cannot use, a budget that is not a number of seconds, a shape
Triton's CPU interpreter cannot finish."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from flyautotune.cli import main  # noqa: E402
from flyautotune.scale.plan import PlanError, load_plan  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def toy_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    import scale_toy

    scale_toy.launch._memo.clear()
    scale_toy.launch.search_count = 0
    yield scale_toy


def write(tmp_path, options, shapes='["4x8"]'):
    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent(f"""\
        [options]
        plugins = ["scale_toy"]
        {options}

        [[tune]]
        adopter = "scale_toy"
        shapes = {shapes}
        dtypes = ["fp32"]
        """))
    return path


def check(capsys, path):
    status = main(["plan", str(path), "--check"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("value", ["gpu", "CUDA", "cuda:x", "meta", ""])
def test_a_device_torch_cannot_run_is_refused_at_check(tmp_path, capsys, value):
    path = write(tmp_path, f'device = "{value}"')
    status, out, err = check(capsys, path)
    assert status == 2 and "the plan is valid" not in out
    assert err.strip() == (f"flyautotune plan: error: {path}:3: [options], field 'device': {value!r} is not a "
                           f"device; accepted: cpu, cuda, cuda:N")


@pytest.mark.parametrize("value", ["gpu", "cuda:x"])
def test_the_device_argument_is_checked_like_the_option(tmp_path, capsys, value):
    path = write(tmp_path, "")
    status = main(["plan", str(path), "--device", value, "--check"])
    captured = capsys.readouterr()
    assert status == 2 and "the plan is valid" not in captured.out
    assert captured.err.strip() == (f"flyautotune plan: error: argument --device: {value!r} is not a device; "
                                    f"accepted: cpu, cuda, cuda:N")


@pytest.mark.parametrize("value", ["cpu", "cuda", "cuda:0", "cuda:3"])
def test_accepted_devices(tmp_path, value):
    assert load_plan(write(tmp_path, f'device = "{value}"')).options.device == value


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_budget_must_be_a_positive_finite_number(tmp_path, capsys, value):
    path = write(tmp_path, f"budget_s = {value}")
    status, _, err = check(capsys, path)
    assert status == 2
    assert f"{path}:3: [options], field 'budget_s': " in err
    assert "must be a positive, finite number of seconds" in err


def test_a_shape_too_large_for_the_cpu_interpreter_is_refused_like_tune(tmp_path, capsys, toy_on_path):
    path = write(tmp_path, 'device = "cpu"', shapes='["4x8", "4096x8192"]')
    status, out, err = check(capsys, path)
    assert status == 2 and toy_on_path.launch.search_count == 0
    assert err.strip() == (
        f"flyautotune plan: error: {path}:7: [[tune]] entry 1, field 'shapes': 4096x8192 has 33554432 elements, "
        f"more than the 4194304 Triton's CPU interpreter finishes in reasonable time; use a GPU "
        f"(device = \"cuda:0\"), a smaller shape, or allow_slow = true in [options]")


def test_allow_slow_lets_the_plan_through(tmp_path, capsys):
    path = write(tmp_path, 'device = "cpu"\nallow_slow = true', shapes='["4096x8192"]')
    status, out, err = check(capsys, path)
    assert status == 0, err
    assert "scale_toy 4096x8192 fp32" in out and "1 key; the plan is valid" in out
    assert load_plan(path).options.allow_slow is True


def test_allow_slow_must_be_a_bool(tmp_path):
    with pytest.raises(PlanError, match=r"field 'allow_slow': 'yes' has the wrong type"):
        load_plan(write(tmp_path, 'allow_slow = "yes"'))


def test_no_cpu_guard_where_the_keys_run_on_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr("flyautotune.devices.default_device", lambda: "cuda:0")
    monkeypatch.setattr("flyautotune.devices.triton_interprets", lambda: False)
    plan = load_plan(write(tmp_path, "", shapes='["4096x8192"]'))
    assert [k.shape for k in plan.keys] == [(4096, 8192)]
    with pytest.raises(PlanError, match="more than the 4194304"):
        load_plan(write(tmp_path, 'device = "cpu"', shapes='["4096x8192"]'))
