"""Bad input to the public API fails where it is given, naming the argument and the value."""

import contextlib
import fractions
import re
import threading

import pytest

import flyautotune as fat


def _launch(x, n, BLOCK=None):
    return x


@pytest.fixture
def tuner():
    return fat.autotune(configs=[fat.Config(BLOCK=64)], key=["n"], name="api_errors")(_launch)


# -- autotune(packs=, source_files=) ------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["packs", "source_files"])
@pytest.mark.parametrize("value", [123, b"winners.json", {"format": "flyautotune-pack"}])
def test_packs_and_source_files_name_an_item_that_is_no_path(option, value):
    """Each item is checked where it is given: a bytes path was read as pack text, a number as nothing, and
    the pack was skipped with a warning only at the first call."""
    with pytest.raises(TypeError, match=rf"autotune: {option}= holds .* \({type(value).__name__}\); accepted: paths"):
        fat.autotune(configs=[fat.Config(BLOCK=64)], key=["n"], **{option: [value]})(_launch)


def test_source_files_names_a_file_that_does_not_exist(tmp_path, monkeypatch):
    """A misspelled or relative path counted as missing in the fingerprint: editing the kernel it meant
    never dropped its winners."""
    kernel = tmp_path / "kernels.py"
    kernel.write_text("# kernel\n")
    monkeypatch.chdir(tmp_path)
    assert fat.autotune(configs=[fat.Config(BLOCK=64)], source_files=["kernels.py"])(_launch).source_fingerprint
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(FileNotFoundError, match=r"source_files= holds 'kernels.py', which is not a file "
                                                r"\(relative paths are read from the working folder"):
        fat.autotune(configs=[fat.Config(BLOCK=64)], source_files=["kernels.py"])(_launch)


# -- Config -----------------------------------------------------------------------------------------------


def test_config_refuses_a_triton_style_positional_dict():
    # triton.Config({"BLOCK": 64}, num_warps=4): the dict used to become compile hints, BLOCK never a kwarg
    with pytest.raises(TypeError, match=r"positional argument \{'BLOCK': 64\}"):
        fat.Config({"BLOCK": 64}, num_warps=4)
    assert fat.Config(compile_hints={"maxnreg": 128}, BLOCK=64).hints == {"maxnreg": 128}


def test_config_refuses_a_kwarg_name_that_is_no_identifier():
    with pytest.raises(ValueError, match="kwarg name 'a-b' is not an identifier"):
        fat.Config(**{"a-b": 2})


def test_config_refuses_a_non_finite_non_builtin_float():
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match=r"kwarg A=np\.float32\(nan\) is not a finite number"):
        fat.Config(A=np.float32("nan"))
    assert fat.Config(A=fractions.Fraction(10 ** 400)).kwargs["A"] == fractions.Fraction(10 ** 400)


def test_to_dict_refuses_a_nested_value_that_is_not_json():
    marker = object()
    with pytest.raises(TypeError, match=r"kwarg A=\(1, <object object.*not JSON-serializable; accepted"):
        fat.Config(A=(1, marker)).to_dict()
    nested = fat.Config(A=((1, 2), ("x", None)))
    assert fat.Config.from_dict(nested.to_dict()) == nested


def test_from_dict_names_a_non_str_kwarg_name():
    with pytest.raises(TypeError, match="Config.from_dict: kwarg name 1 is a int"):
        fat.Config.from_dict({"kwargs": {1: 2, "BLOCK": 3}})


# -- Adopter ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, message", [
    ("description", None, "Adopter.description must be a str"),
    ("description", 3, "Adopter.description must be a str"),
    ("distribution", 3, "Adopter.distribution must be a str or None"),
])
def test_adopter_text_fields_are_type_checked(tuner, field, value, message):
    with pytest.raises(TypeError, match=f"{message}.*got {value!r}"):
        fat.Adopter(name="a", tuner=tuner, **{field: value})


@pytest.mark.parametrize("returned", [(1, {}), ((1,), [1]), ((1,), None)])
def test_bind_names_a_malformed_tuner_args_result(tuner, returned):
    adopter = fat.Adopter(name="a", tuner=tuner, entry=lambda x: x, tuner_args=lambda x: returned)
    with pytest.raises(TypeError, match=r"Adopter\('a'\)\.tuner_args returned .*expected \(args, kwargs\)"):
        adopter.bind(1)
    good = fat.Adopter(name="a", tuner=tuner, entry=lambda x: x, tuner_args=lambda x: ([x, 4], {"BLOCK": 8}))
    assert good.bind(1) == ((1, 4), {"BLOCK": 8})


# -- target_for -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["gpu", "CPU", ""])
def test_target_for_names_a_bad_device_string(device):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=f"target_for: device={device!r} is not a device string.*accepted"):
        fat.target_for(device)


@pytest.mark.parametrize("device", [0, 1.5, True, ["cpu"], fat.Target("cpu", "x86_64", 1)])
def test_target_for_refuses_a_value_that_is_no_device(device):
    with pytest.raises(TypeError, match=re.escape(f"target_for: device={device!r} is a ") + ".*accepted"):
        fat.target_for(device)


def test_target_for_points_a_tensor_at_its_device_and_explains_meta():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="is a Tensor; pass tensor.device"):
        fat.target_for(torch.zeros(1))
    with pytest.raises(LookupError, match="device=device\\(type='meta'\\) has no compile target"):
        fat.target_for(torch.device("meta"))
    assert fat.target_for(torch.zeros(1).device) == fat.target_for("cpu")


# -- compile_hints / target_context -----------------------------------------------------------------------


def test_compile_hints_exited_out_of_order_is_an_error():
    outer, inner = fat.compile_hints(num_warps=4), fat.compile_hints(num_warps=8)
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match=r"compile_hints\(\{'num_warps': 4\}\) exited while an inner block"):
        outer.__exit__(None, None, None)
    assert fat.current_hints() == {"num_warps": 8}  # nothing was popped: the right order still unwinds
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    assert fat.current_hints() == {}


def test_compile_hints_exited_twice_or_on_another_thread_is_an_error():
    block = fat.compile_hints(num_warps=4)
    with block:
        pass
    with pytest.raises(RuntimeError, match="exited with no block open on this thread"):
        block.__exit__(None, None, None)

    block.__enter__()
    errors = []

    def other():
        try:
            block.__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert fat.current_hints() == {"num_warps": 4}
    block.__exit__(None, None, None)
    assert len(errors) == 1 and "no block open on this thread" in errors[0]


def test_compile_hints_in_order_still_nest_and_reuse():
    a = fat.compile_hints(num_warps=4)
    with contextlib.ExitStack() as es:
        es.enter_context(a)
        es.enter_context(fat.compile_hints(maxnreg=64, num_warps=None))
        es.enter_context(a)
        assert fat.current_hints() == {"num_warps": 4, "maxnreg": 64}
    assert fat.current_hints() == {}


def test_target_context_refuses_a_bad_plugin_manager():
    with pytest.raises(TypeError, match="target_context: plugin_manager=3; accepted"):
        with fat.target_context(fat.Target("cpu", "x86_64", 1), plugin_manager=3):
            pass


def test_target_context_exited_out_of_order_is_an_error():
    t1, t2 = fat.Target("rocm", "gfx942", 64), fat.Target("cuda", "sm_90", 32)
    outer, inner = fat.target_context(t1), fat.target_context(t2)
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match=r"target_context\(Target\(backend='rocm'.*exited while an inner"):
        outer.__exit__(None, None, None)
    assert fat.current_target() == t2
    inner.__exit__(None, None, None)
    assert fat.current_target() == t1
    fat.context._local.launch = None  # the outer block's generator is spent; restore the thread by hand
    assert fat.current_target() is None


def test_tuner_args_without_an_entry_is_refused(pm):
    """``tuner_args`` maps an entry call to the tuner's arguments: without ``entry`` nothing ever calls it."""
    tuner = fat.autotune(configs=[fat.Config(BLOCK=1)], key=["n"], name="ta")(lambda x, n, BLOCK=None: None)
    with pytest.raises(TypeError, match=r"Adopter\('ta'\): tuner_args=.* without entry= is never called"):
        fat.Adopter(name="ta", tuner=tuner, tuner_args=lambda x: ((x, len(x)), {}))
    assert fat.Adopter(name="ta", tuner=tuner).bind([1.0], 1) == (([1.0], 1), {})  # no entry: args as given
