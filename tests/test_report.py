"""Reports through the hooks: target names from ``flyautotune_report_targets``, one
``flyautotune_compile_report`` call per candidate, and what the command prints."""

from __future__ import annotations

import contextlib

import pytest

import flyautotune as fat
from flyautotune.cli import main
from flyautotune.report import KernelSpec, ReportError, ResourceRow, parse_target, resource_report

FAKE = fat.Target("fakegpu", "fk1", 16)


class FakeBackend:
    """Offers one target and 'compiles' a candidate into registers = 10 * BLOCK."""

    def __init__(self):
        self.calls = []

    @fat.hookimpl
    def flyautotune_report_targets(self):
        return {"fk1": FAKE}

    @fat.hookimpl
    def flyautotune_compile_report(self, spec, config, hints, target):
        if target.backend != "fakegpu":
            return None
        self.calls.append((spec, config, dict(hints)))
        if spec.constexprs["SIZE"] > 64:
            raise RuntimeError("too big for fk1\nsecond line")
        return ResourceRow(config=config, options=dict(hints), registers=10 * config.kwargs["BLOCK"],
                           occupancy=4, occupancy_max=8, occupancy_unit="waves/CU",
                           binary_sha256=f"{config.kwargs['BLOCK']:064d}", labels={"registers": "fregs"})


def _launch(x, n, BLOCK=None):
    return x


@pytest.fixture
def backend(pm):
    plugin = FakeBackend()
    pm.register(plugin, name="fakebackend")
    yield plugin
    pm.unregister(name="fakebackend")


@pytest.fixture
def adopter(pm):
    def space(x, n, **_):
        # a target-dependent space: the report must see its own target, not this machine's
        target = fat.current_target()
        blocks = (1, 2, 4) if target is not None and target.backend == "fakegpu" else (1,)
        return [fat.Config(BLOCK=b, num_warps=2) for b in blocks]

    tuned = fat.autotune(configs=space, key=["n"], name="rdemo")(_launch)

    def compile_spec(shape, dtype, config):
        return "kernel", {"X": f"*{dtype}"}, {"SIZE": 32 * config.kwargs["BLOCK"]}, {"num_warps": 1}

    a = fat.Adopter(name="rdemo", tuner=tuned, entry=lambda x: tuned(x, len(x)),
                    tuner_args=lambda x: ((x, len(x)), {}),
                    example=lambda shape, dtype, device: (([0.0] * shape[0],), {}), compile_spec=compile_spec)
    pm.register_adopter(a)
    return a


def test_each_candidate_is_compiled_by_the_plugin_that_owns_the_target(pm, backend, adopter):
    rows = resource_report(adopter, (4, 8), "bf16", FAKE, pm)
    assert [r.config.kwargs["BLOCK"] for r in rows] == [1, 2, 4]
    assert [r.registers for r in rows[:2]] == [10, 20]
    assert rows[2].error == "RuntimeError: too big for fk1"
    spec, config, hints = backend.calls[0]
    assert isinstance(spec, KernelSpec) and spec.signature == {"X": "*bf16"} and spec.constexprs == {"SIZE": 32}
    assert hints == {"num_warps": 2}  # the config's hint over compile_spec's option


def test_report_command_prints_the_backends_column_names(pm, backend, adopter, capsys):
    assert main(["report", "rdemo", "--target", "FK1", "--shape", "4x8"]) == 0
    out = capsys.readouterr().out
    assert "rdemo 4x8 bf16 compiled for fk1 (3 candidates, no GPU used):" in out
    header = next(line for line in out.splitlines() if line.startswith("config"))
    assert "fregs" in header and "occupancy (waves/CU)" in header and "SGPRs" not in header
    assert "failed: RuntimeError: too big for fk1" in out
    assert "2 of 3 candidates built 2 distinct binaries." in out
    # the failure runs on after its config and widens no column: the built rows stay as narrow as their values
    lines = out.splitlines()
    failed = next(line for line in lines if "failed:" in line)
    assert failed.index("failed:") == header.index("num_warps")
    built = [line for line in lines if line.startswith("BLOCK=") and "failed:" not in line]
    at = header.index("fregs")
    assert [line[at:at + len("fregs")].strip() for line in built] == ["10", "20"], (header, built)


def test_report_names_the_candidates_that_build_one_binary_and_what_tells_them_apart(pm, backend, capsys):
    """The fake backend's binary depends on BLOCK alone, so two num_warps of one BLOCK are one program: the
    report lists them under their digest by the knob that changes nothing, and says what they share."""
    space = [fat.Config(BLOCK=1, num_warps=2), fat.Config(BLOCK=1, num_warps=4), fat.Config(BLOCK=2, num_warps=2)]
    tuned = fat.autotune(configs=space, key=["n"], name="twins")(_launch)
    pm.register_adopter(fat.Adopter(
        name="twins", tuner=tuned, entry=lambda x: tuned(x, len(x)), tuner_args=lambda x: ((x, len(x)), {}),
        example=lambda shape, dtype, device: (([0.0] * shape[0],), {}),
        compile_spec=lambda shape, dtype, config: ("kernel", {"X": "*fp32"}, {"SIZE": 1}, {})))
    assert main(["report", "twins", "--target", "fk1", "--shape", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "3 of 3 candidates built 2 distinct binaries." in lines
    at = lines.index("3 of 3 candidates built 2 distinct binaries.")
    assert lines[at + 1:] == [
        "Same binary (what differs between these configs changes nothing on fk1); a search times each, unless "
        "the adopter's precompile names its builds:",
        f"  {f'{1:064d}'[:12]}: num_warps=2 | num_warps=4 (both: BLOCK=1)"]
    # --distinct makes that an exit status for an adopter's CI, in both output forms
    for form in ([], ["--json"]):
        assert main(["report", "twins", "--target", "fk1", "--shape", "4", "--distinct", *form]) == 1
        err = capsys.readouterr().err
        assert "--distinct: candidates of 4 bf16 build the same binary on fk1" in err, err


def test_report_of_distinct_binaries_lists_no_twins(pm, backend, adopter, capsys):
    assert main(["report", "rdemo", "--target", "fk1", "--shape", "4x8", "--distinct"]) == 0
    assert "Same binary" not in capsys.readouterr().out


def test_a_target_no_plugin_offers_lists_the_accepted_names(pm, backend, adopter, capsys):
    with pytest.raises(ValueError, match=r"'gfx1100' is not a supported target; accepted: fk1 \(NVIDIA sm_\* "
                                         r"targets come with flyautotune-cuda"):
        parse_target("gfx1100", pm)
    assert main(["report", "rdemo", "--target", "gfx1100", "--shape", "4x8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flyautotune: error: argument --target: 'gfx1100' is not a supported target; "
                          "accepted: fk1 (")
    assert len(err.strip().splitlines()) == 1


def test_a_target_nobody_compiles_is_a_clear_error(pm, adopter):
    class NamesOnly:
        @fat.hookimpl
        def flyautotune_report_targets(self):
            return {"fk1": FAKE}

    pm.register(NamesOnly(), name="namesonly")
    with pytest.raises(ReportError, match="no installed plugin compiles reports for fakegpu/fk1"):
        resource_report(adopter, (4, 8), "bf16", FAKE, pm)


def test_each_compile_runs_inside_the_context_compile_spec_names(pm, backend):
    """A launch that compiles inside a context of its own (a stage hook it sets) gets the same context
    around the report's compile, so the report reads the binary the launch builds."""
    events, open_at_compile = [], []

    @contextlib.contextmanager
    def compiling():
        events.append("enter")
        try:
            yield
        finally:
            events.append("exit")

    class Seen(FakeBackend):
        @fat.hookimpl(tryfirst=True)
        def flyautotune_compile_report(self, spec, config, hints, target):
            open_at_compile.append(events.count("enter") - events.count("exit"))
            return None  # the fake backend below compiles it

    pm.register(Seen(), name="seen")
    tuned = fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["n"], name="rctx")(_launch)
    a = fat.Adopter(name="rctx", tuner=tuned, example=lambda shape, dtype, device: (([0.0] * shape[0], shape[0]), {}),
                    compile_spec=lambda shape, dtype, config: (
                        "kernel", {"X": "*fp32"}, {"SIZE": 32}, {"options": {}, "compiling": compiling}))
    try:
        rows = resource_report(a, (4,), "fp32", FAKE, pm)
    finally:
        pm.unregister(name="seen")
    assert [r.registers for r in rows] == [10, 20]
    assert open_at_compile == [1, 1]  # each compile ran inside the context
    assert events == ["enter", "exit", "enter", "exit"]  # and each context closed after its compile


def test_a_compiling_entry_that_is_not_callable_is_named(pm, backend):
    tuned = fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["n"], name="rctx2")(_launch)
    a = fat.Adopter(name="rctx2", tuner=tuned, example=lambda shape, dtype, device: (([0.0] * shape[0], shape[0]), {}),
                    compile_spec=lambda shape, dtype, config: (
                        "kernel", {"X": "*fp32"}, {"SIZE": 32}, {"compiling": "editing"}))
    rows = resource_report(a, (4,), "fp32", FAKE, pm)
    assert rows[0].error == ("TypeError: adopter 'rctx2': compile_spec's extra['compiling'] is 'editing'; "
                             "expected a callable that returns a context manager, or None")


@pytest.mark.parametrize("devices", ["meta", (), ["meta", 0], None, iter(["meta"])])
def test_candidate_configs_names_devices_that_are_not_device_names(adopter, devices):
    from flyautotune.report import candidate_configs

    with pytest.raises(ValueError, match=r"candidate_configs: devices=.* is not a non-empty list or tuple of "
                                         r"device names; expected e.g. \('meta', 'cpu'\)"):
        candidate_configs(adopter, (4, 8), "bf16", FAKE, devices=devices)


def _searched_adopter(pm, name, configs, **options):
    """An adopter over torch tensors whose launch returns what it ran (BLOCK and num_warps), so a search's
    do_bench can record every config it times."""
    import torch

    timed = []

    def bench(fn, setup=None):
        timed.append(fn())
        return 1.0

    def launch(x, n, BLOCK=None):
        return BLOCK, fat.current_hints().get("num_warps")

    tuned = fat.autotune(configs=configs, key=["n"], name=name, do_bench=bench, plugin_manager=pm, **options)(launch)
    adopter = fat.Adopter(
        name=name, tuner=tuned,
        example=lambda shape, dtype, device: ((torch.zeros(shape, device=device), shape[0]), {}),
        compile_spec=lambda shape, dtype, config: ("kernel", {"X": "*fp32"}, {"SIZE": 32}, {}))
    pm.register_adopter(adopter)
    return adopter, timed


@pytest.mark.parametrize("case", ["default outside", "pruned", "computed"])
def test_report_lists_exactly_what_a_search_times(pm, backend, capsys, case):
    """A default outside a static space is timed by every search (it is what most calls run), and a
    prune_configs_by narrows a static space too: the report compiles what the search times, in its order."""
    import torch

    from flyautotune.report import candidate_configs

    space = [fat.Config(BLOCK=b, num_warps=w) for b in (64, 128, 256) for w in (1, 4)]
    options = {
        "default outside": dict(default=lambda x, n: fat.Config(BLOCK=512, num_warps=2)),
        "pruned": dict(prune_configs_by=lambda configs, x, n: [c for c in configs if c.kwargs["BLOCK"] <= n]),
        "computed": dict(default=lambda x, n: fat.Config(BLOCK=128, num_warps=4),
                         prune_configs_by=lambda configs, x, n: configs[1:]),
    }[case]
    configs = (lambda x, n: space[::-1]) if case == "computed" else space
    name = "rsearch_" + case.replace(" ", "_")
    adopter, timed = _searched_adopter(pm, name, configs, **options)
    listed = candidate_configs(adopter, (128,), "fp32", FAKE)
    adopter.tuner.select(torch.zeros(128), 128, force=True)
    assert [(c.kwargs["BLOCK"], c.hints["num_warps"]) for c in listed] == timed[:len(listed)]
    assert len(set(timed)) == len(listed)  # the first pass times each once; the re-timing rounds only repeat
    want = {"default outside": 7, "pruned": 4, "computed": 5}[case]
    assert len(listed) == want
    assert main(["report", name, "--target", "fk1", "--shape", "128", "--dtype", "fp32"]) == 0
    assert f"({want} candidates, no GPU used)" in capsys.readouterr().out


def test_a_default_without_an_example_to_evaluate_it_is_named(pm, backend):
    from flyautotune.report import candidate_configs

    tuned = fat.autotune(configs=[fat.Config(BLOCK=1), fat.Config(BLOCK=2)], key=["n"], name="rnoexample",
                         default=lambda x, n: fat.Config(BLOCK=4))(_launch)
    a = fat.Adopter(name="rnoexample", tuner=tuned,
                    compile_spec=lambda shape, dtype, config: ("kernel", {"X": "*fp32"}, {"SIZE": 32}, {}))
    with pytest.raises(ReportError, match="adopter 'rnoexample' has default= but no example"):
        candidate_configs(a, (4,), "fp32", FAKE)


def test_a_shape_no_candidate_builds_for_fails_the_command(pm, backend, capsys):
    """fk1 fails SIZE > 64, and SIZE is 32 * the shape's second dimension here: at 4x8 every candidate fails."""
    tuned = fat.autotune(configs=[fat.Config(BLOCK=b) for b in (1, 2, 4)], key=["n"], name="unbuilt")(_launch)
    pm.register_adopter(fat.Adopter(
        name="unbuilt", tuner=tuned, entry=lambda x: tuned(x, len(x)), tuner_args=lambda x: ((x, len(x)), {}),
        compile_spec=lambda shape, dtype, config: ("kernel", {"X": "*bf16"}, {"SIZE": 32 * shape[1]}, {})))
    assert main(["report", "unbuilt", "--target", "fk1", "--shape", "4x1", "--shape", "4x8"]) == 1
    captured = capsys.readouterr()
    assert "3 of 3 candidates built 3 distinct binaries." in captured.out
    assert "0 of 3 candidates built 0 distinct binaries." in captured.out  # the table still says why
    assert captured.err == "flyautotune: error: no candidate of 4x8 bf16 built for fk1 (see the failed rows above)\n"
    assert main(["report", "unbuilt", "--target", "fk1", "--shape", "4x8", "--json"]) == 1
    captured = capsys.readouterr()
    assert '"error": "RuntimeError: too big for fk1"' in captured.out
    assert "(see each candidate's error above)" in captured.err
    assert main(["report", "unbuilt", "--target", "fk1", "--shape", "4x1"]) == 0  # every candidate built
