"""Triton HIP options with a fixed set of values: refused at validation, never handed to Triton.

Triton's ``HIPOptions`` (triton/backends/amd/compiler.py) declares ``kpack: int = 1`` and
``matrix_instr_nonkdim: int = 0`` and checks neither; its ``accelerate_matmul`` pass supports kpack 1 or 2
(2 is the widest LDS read) and an MFMA M/N size of 16 or 32 (0: the compiler chooses)."""

import pytest

import flyautotune as fat


@pytest.mark.parametrize("name, value, accepted", [
    ("kpack", 3, "1, 2"), ("kpack", 0, "1, 2"), ("kpack", -1, "1, 2"), ("kpack", True, "1, 2"),
    ("kpack", 2.0, "1, 2"), ("kpack", "2", "1, 2"),
    ("matrix_instr_nonkdim", 7, "0, 16, 32"), ("matrix_instr_nonkdim", 64, "0, 16, 32"),
    ("matrix_instr_nonkdim", 16.0, "0, 16, 32"), ("matrix_instr_nonkdim", False, "0, 16, 32"),
])
def test_unsupported_values_name_hint_value_and_accepted_set(pm, gfx942, name, value, accepted):
    with pytest.raises(ValueError) as info:
        pm.hook.flyautotune_validate_hints(hints={name: value}, target=gfx942)
    assert str(info.value) == (f"compile hint {name!r}: {value!r} is not accepted by Triton's HIP backend; "
                               f"accepted: {accepted}")


@pytest.mark.parametrize("hints", [
    {"kpack": 1}, {"kpack": 2}, {"matrix_instr_nonkdim": 0}, {"matrix_instr_nonkdim": 16},
    {"matrix_instr_nonkdim": 32}, {"kpack": 2, "matrix_instr_nonkdim": 16}, {"kpack": None},
])
def test_supported_values_pass(pm, gfx942, gfx950, hints):
    pm.hook.flyautotune_validate_hints(hints=hints, target=gfx942)
    if hints.get("kpack") != 2:
        pm.hook.flyautotune_validate_hints(hints=hints, target=gfx950)


def test_kpack_2_is_refused_on_gfx950_where_triton_resets_it(pm, gfx950):
    with pytest.raises(ValueError) as info:
        pm.hook.flyautotune_validate_hints(hints={"kpack": 2}, target=gfx950)
    msg = str(info.value)
    assert "'kpack': 2 on gfx950" in msg and "accepted on gfx950: 1" in msg
    pm.hook.flyautotune_validate_hints(hints={"kpack": 1}, target=gfx950)


def test_kpack_2_builds_the_kpack_1_binary_on_gfx950(monkeypatch, dot_kernel):
    import warnings

    import flyautotune_rocm.hints as rocm_hints
    from flyautotune_rocm import compile_report

    mm = dot_kernel
    monkeypatch.setattr(rocm_hints, "KPACK_ONE_ONLY", frozenset())
    sig = {"A": "*bf16", "B": "*bf16", "C": "*fp32"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shas = {arch: [r.binary_sha256 for r in compile_report(
            mm, sig, [fat.Config(BLOCK=64, compile_hints={"kpack": k}) for k in (1, 2)], arch=arch)]
            for arch in ("gfx942", "gfx950")}
    assert shas["gfx950"][0] == shas["gfx950"][1]
    assert shas["gfx942"][0] != shas["gfx942"][1]


def test_the_accepted_sets_match_what_triton_declares():
    compiler = pytest.importorskip("triton.backends.amd.compiler")
    from flyautotune_rocm.hints import TRITON_HIP_CHOICES

    fields = compiler.HIPOptions.__dataclass_fields__
    for name, choices in TRITON_HIP_CHOICES.items():
        assert fields[name].type in (int, "int")
        assert fields[name].default in choices  # Triton's own default is accepted


def test_wgp_cu_mode_is_refused_on_chips_without_workgroup_processors(pm, gfx942, gfx950):
    """CDNA/GCN (gfx9) has no WGP: Triton's '+cumode' feature changes nothing there, so 'wgp' and 'cu' would
    be two candidates of one binary. RDNA targets take it."""
    import flyautotune as fat

    for target in (gfx942, gfx950):
        with pytest.raises(ValueError, match=rf"'wgp_cu_mode': {target.arch} is a CDNA/GCN chip with no "
                                             r"workgroup processors, so 'wgp' and 'cu' build the same binary"):
            pm.hook.flyautotune_validate_hints(hints={"wgp_cu_mode": "cu"}, target=target)
    pm.hook.flyautotune_validate_hints(hints={"wgp_cu_mode": "cu"}, target=fat.Target("rocm", "gfx1100", 32))


def test_schedule_hint_is_refused_where_the_installed_triton_reads_no_such_option(pm, gfx942, monkeypatch):
    """Newer Tritons declare ``HIPOptions.schedule_hint`` and read it nowhere (every value, one binary): the
    hint is refused there, and taken where the HIP backend reads it."""
    import inspect

    from flyautotune_rocm import hints

    compiler = pytest.importorskip("triton.backends.amd.compiler")
    assert hints.triton_reads_option("waves_per_eu") and not hints.triton_reads_option("no_such_option")
    reads = "options.schedule_hint" in inspect.getsource(compiler)
    assert hints.triton_reads_option("schedule_hint") is reads
    monkeypatch.setattr(hints, "triton_reads_option", lambda name: False)
    with pytest.raises(ValueError, match="'schedule_hint': the installed Triton's HIP backend declares it but no "
                                         "pass reads it, so every value builds the same binary"):
        pm.hook.flyautotune_validate_hints(hints={"schedule_hint": "attention"}, target=gfx942)
    monkeypatch.setattr(hints, "triton_reads_option", lambda name: True)
    pm.hook.flyautotune_validate_hints(hints={"schedule_hint": "attention"}, target=gfx942)


@pytest.mark.parametrize("name", ["enable_fp_fusion", "allow_flush_denorm"])
@pytest.mark.parametrize("value", ["no", "yes", 0, 1, 7, 0.0, "False"])
def test_switch_hints_take_only_bools(pm, gfx942, name, value):
    with pytest.raises(ValueError) as exc:
        pm.hook.flyautotune_validate_hints(hints={name: value}, target=gfx942)
    msg = str(exc.value)
    assert repr(name) in msg and repr(value) in msg and "accepted: True, False" in msg


@pytest.mark.parametrize("name", ["enable_fp_fusion", "allow_flush_denorm"])
@pytest.mark.parametrize("value", [True, False, None])
def test_switch_hints_accept_bools_and_unset(pm, gfx942, name, value):
    pm.hook.flyautotune_validate_hints(hints={name: value}, target=gfx942)
