"""Plan files: validation before any work, the serial runner, progress, summary, pack and CLI."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from flyautotune.cli import main  # noqa: E402
from flyautotune.scale import cli_plan  # noqa: E402
from flyautotune.scale.plan import PlanError, PlanKey, load_plan  # noqa: E402
from flyautotune.scale.runner import PlanProgress, run_serial, summary_table, write_pack  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def toy_on_path(monkeypatch):
    """``scale_toy`` importable as a plugin module, with a fresh memo per test."""
    monkeypatch.syspath_prepend(str(HERE))
    import scale_toy

    scale_toy.launch._memo.clear()
    scale_toy.launch.search_count = 0
    yield scale_toy


def write(tmp_path, text, name="plan.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


GOOD = """
[options]
plugins = ["scale_toy"]

[[tune]]
adopter = "scale_toy"
shapes = ["4x8", [4, 40], "2x100"]
dtypes = ["fp32", "bfloat16"]
"""


def test_plan_keys_are_adopter_by_shape_by_dtype(tmp_path):
    plan = load_plan(write(tmp_path, GOOD + '\n[[tune]]\nadopter = "scale_toy"\nshapes = ["4x8"]\ndtypes = ["fp32"]\n'))
    assert len(plan.keys) == 6  # the repeated key of the second table counts once
    assert plan.keys[0] == PlanKey("scale_toy", (4, 8), "fp32")
    assert plan.keys[1] == PlanKey("scale_toy", (4, 8), "bf16")
    assert plan.pack_path() == tmp_path / "plan.pack.json"


@pytest.mark.parametrize("entry, line, field, words", [
    ('adopter = "nosuch"\nshapes = ["4x8"]\ndtypes = ["fp32"]', 10, "adopter", "unknown adopter 'nosuch'"),
    ('adopter = "scale_toy"\nshapes = ["4x0"]\ndtypes = ["fp32"]', 11, "shapes", "'4x0' is not a shape"),
    ('adopter = "scale_toy"\nshapes = ["4x8x2"]\ndtypes = ["fp32"]', 11, "shapes", "two dimensions"),
    ('adopter = "scale_toy"\nshapes = ["4x8"]\ndtypes = ["fp32", "fp16"]', 12, "dtypes", "lacks dtype 'fp16'"),
    ('adopter = "scale_toy"\nshapes = ["4x8"]\ndtypes = ["fp16"]', 12, "dtypes", "dtype 'fp16' is not supported"),
    ('adopter = "scale_toy"\nshapes = ["4x8"]\ndtypes = ["int7"]', 12, "dtypes", "'int7' is not a dtype"),
    ('adopter = "scale_toy"\nshapes = ["4x8"]', 9, "dtypes", "missing"),
])
def test_bad_plan_names_file_line_entry_and_field(tmp_path, toy_on_path, entry, line, field, words):
    text = GOOD + "\n[[tune]]\n" + entry + "\n"
    path = write(tmp_path, text)
    with pytest.raises(PlanError) as info:
        load_plan(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: [[tune]] entry 2, field '{field}'"), msg
    assert words in msg
    assert toy_on_path.launch.search_count == 0


def test_unknown_option_and_bad_toml(tmp_path):
    with pytest.raises(PlanError, match=r"plan.toml:2: \[options\], field 'budget': unknown option"):
        load_plan(write(tmp_path, GOOD.replace("[options]\n", "[options]\nbudget = 3\n")))
    with pytest.raises(PlanError, match=r"plan.toml: not a valid TOML file: .*line 1"):
        load_plan(write(tmp_path, "[[tune]\nadopter = 1\n"))


def test_serial_plan_stores_winners_and_exports_one_pack(tmp_path, toy_on_path, capsys):
    import io

    from flyautotune.store import get_store, load_pack

    plan = load_plan(write(tmp_path, GOOD))
    log = io.StringIO()
    result = run_serial(plan, progress=PlanProgress(len(plan.keys), stream=log))
    assert [r.source for r in result.results] == ["search"] * 6
    winners = {r.key.shape: r.config["kwargs"]["BLOCK"] for r in result.results}
    assert winners == {(4, 8): 16, (4, 40): 16, (2, 100): 64}
    lines = [line for line in log.getvalue().splitlines() if " left" in line]  # one per finished key
    assert lines[0].startswith("[1/6] scale_toy 4x8 fp32: search 1.188 ms; 5 left, ETA") and "5 left, ETA" in lines[0]
    assert lines[-1].startswith("[6/6] scale_toy 2x100 bf16: search") and "0 left" in lines[-1]
    table = summary_table(result)
    assert "scale_toy 2x100 bf16  search  BLOCK=64" in table and "6 keys in" in table
    assert len(get_store().entries("scale_toy")) == 6
    n = write_pack(result, tmp_path / "out" / "winners.json")
    entries = load_pack(tmp_path / "out" / "winners.json")
    assert n == 6 and {e.key for e in entries} == {r.entry["key"] for r in result.results}

    again = run_serial(plan)  # every key is stored now: nothing is searched again
    assert [r.source for r in again.results] == ["store"] * 6
    assert toy_on_path.launch.search_count == 6


def test_a_key_with_one_candidate_is_single_not_search_and_its_winner_still_ships(tmp_path, toy_on_path):
    from flyautotune.scale.runner import merge_into_store
    from flyautotune.store import MemoryStore, get_store

    plan = load_plan(write(tmp_path, GOOD + '\n[[tune]]\nadopter = "scale_one"\nshapes = ["4x8"]\ndtypes = ["fp32"]\n'))
    result = run_serial(plan)
    assert [r.source for r in result.results] == ["search"] * 6 + ["single"]
    one = result.results[-1]
    assert one.config["kwargs"] == {"BLOCK": 32} and one.ms is None and one.entry is not None
    assert summary_table(result).splitlines()[-1].endswith("6 search, 1 single")
    assert len(get_store().entries("scale_one")) == 1  # stored, untimed, as a forced selection stores it
    n = write_pack(result, tmp_path / "winners.json")
    assert n == 7
    elsewhere = MemoryStore()
    assert merge_into_store(result, elsewhere) == 7  # a Ray driver keeps the one-candidate winner too
    again = run_serial(plan)
    assert again.results[-1].source == "store"


def test_budget_skips_keys_left(tmp_path):
    plan = load_plan(write(tmp_path, GOOD.replace("[options]\n", "[options]\nbudget_s = 0.000001\n")))
    result = run_serial(plan)
    assert result.results[0].source == "search"
    assert {r.source for r in result.results[1:]} == {"skipped"}


def test_keys_stored_earlier_are_looked_up_and_packed_after_the_budget_is_spent(tmp_path, toy_on_path, capsys):
    stored = write(tmp_path, GOOD.replace('["4x8", [4, 40], "2x100"]', '["4x40", "2x100"]'), "stored.toml")
    assert [r.source for r in run_serial(load_plan(stored)).results] == ["search"] * 4
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nbudget_s = 0.000001\n"))
    result = run_serial(load_plan(path))
    # The first key always runs; past the budget only the key that would search is skipped.
    assert [r.source for r in result.results] == ["search", "skipped", "store", "store", "store", "store"]
    assert result.results[1].error == "budget of 1e-06 s spent" and result.results[1].entry is None
    assert toy_on_path.launch.search_count == 5
    assert _cli([str(path), "--device", "cpu", "--serial"]) == 0
    out = capsys.readouterr().out
    assert f"pack: {tmp_path / 'plan.pack.json'} (5 winners)" in out  # every key but the skipped one ships
    keys = [json.loads(e["key"]) for e in json.loads((tmp_path / "plan.pack.json").read_text())["entries"]]
    assert sorted((tuple(k["args"]["x"]), k["dtypes"]["x"]) for k in keys) == [
        ((2, 100), "torch.bfloat16"), ((2, 100), "torch.float32"), ((4, 8), "torch.float32"),
        ((4, 40), "torch.bfloat16"), ((4, 40), "torch.float32")]
    forced = run_serial(load_plan(path), force=True)  # a forced key always searches: past the budget it is skipped
    assert [r.source for r in forced.results] == ["search"] + ["skipped"] * 5


def test_a_key_looked_up_past_the_budget_reads_its_stored_row_once(tmp_path, toy_on_path, monkeypatch):
    from collections import Counter

    from flyautotune.store import get_store

    stored = write(tmp_path, GOOD.replace('["4x8", [4, 40], "2x100"]', '["4x40"]'), "stored.toml")
    searched = run_serial(load_plan(stored))
    store, reads = get_store(), Counter()
    real_get = store.get

    def get(tuner, key):  # counts the store's reads of each row
        reads[key] += 1
        return real_get(tuner, key)

    monkeypatch.setattr(store, "get", get)
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nbudget_s = 0.000001\n")
                 .replace('["4x8", [4, 40], "2x100"]', '["4x8", "4x40"]'))
    result = run_serial(load_plan(path))
    assert [r.source for r in result.results] == ["search", "skipped", "store", "store"]
    looked_up = result.results[2:]
    assert [(r.config, r.ms) for r in looked_up] == [(r.config, r.ms) for r in searched.results]  # its timings too
    assert [reads[r.entry["key"]] for r in looked_up] == [1, 1]


def _cli(argv):
    parser = argparse.ArgumentParser(prog="flyautotune")
    cli_plan.add_parser(parser.add_subparsers(dest="command"))
    return cli_plan.run(parser.parse_args(["plan", *argv]))


def test_a_run_with_no_winner_leaves_the_existing_pack_as_it_was(tmp_path, toy_on_path, monkeypatch, capsys):
    path = write(tmp_path, GOOD)
    pack = tmp_path / "plan.pack.json"
    pack.write_text("a pack from an earlier, good run")
    monkeypatch.setattr(toy_on_path, "example", lambda shape, dtype, device: (_ for _ in ()).throw(
        RuntimeError("no such device")))  # every key fails, as on a machine without the plan's device
    assert _cli([str(path), "--device", "cpu"]) == 1
    assert "no winner to export; " in capsys.readouterr().err
    assert pack.read_text() == "a pack from an earlier, good run"


def test_a_plan_of_many_keys_keeps_each_key_once_in_plan_order(tmp_path, toy_on_path):
    shapes = ", ".join(f'"4x{n}"' for n in range(1, 3001))
    plan = load_plan(write(tmp_path, GOOD + f'\n[[tune]]\nadopter = "scale_toy"\nshapes = [{shapes}, "4x8"]\n'
                                            f'dtypes = ["fp32"]\n'))
    assert len(plan.keys) == 6 + 3000 - 2  # 4x8 and 4x40 fp32 are in GOOD already: each key once, in plan order
    assert plan.keys[6].shape == (4, 1)


def test_cli_runs_serially_without_ray_and_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("flyautotune.scale.ray_engine.ray_installed", lambda: False)
    path = write(tmp_path, GOOD)
    assert _cli([str(path), "--workers", "2"]) == 0
    out, err = capsys.readouterr()
    assert "running serially" in err and "pip install 'flyautotune[ray]'" in err
    assert "6 keys in" in out and f"pack: {tmp_path / 'plan.pack.json'} (6 winners)" in out
    doc = json.loads((tmp_path / "plan.pack.json").read_text())
    assert len(doc["entries"]) == 6


def test_cli_refuses_a_named_ray_cluster_without_ray(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("flyautotune.scale.ray_engine.ray_installed", lambda: False)
    path = write(tmp_path, GOOD)
    assert _cli([str(path), "--ray", "head:6379"]) == 2  # not a serial run on this machine instead
    err = capsys.readouterr().err
    assert "error: argument --ray: Ray is not installed, so the Ray cluster 'head:6379' cannot be used" in err
    assert not (tmp_path / "plan.pack.json").exists()


@pytest.mark.parametrize("argv, words", [
    (["--ray", "--serial"], "error: argument --serial: not allowed with argument --ray"),
    (["--serial", "--ray", "head:6379"], "error: argument --ray: not allowed with argument --serial"),
    (["--serial", "--workers", "4"], "error: argument --workers: 4 workers are Ray's, but --serial runs the plan"),
])
def test_cli_refuses_engine_flags_that_contradict_each_other(tmp_path, capsys, argv, words):
    path = write(tmp_path, GOOD)
    assert main(["plan", str(path), "--device", "cpu", *argv]) == 2  # not a serial run that ignores the rest
    assert words in capsys.readouterr().err
    assert not (tmp_path / "plan.pack.json").exists()


def test_cli_refuses_a_bad_plan_before_work(tmp_path, toy_on_path, capsys):
    path = write(tmp_path, GOOD.replace('"fp32", "bfloat16"', '"fp32", "fp16"'))
    assert _cli([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: [[tune]] entry 1, field 'dtypes'" in err
    assert toy_on_path.launch.search_count == 0 and not (tmp_path / "plan.pack.json").exists()


# -- refused at plan --check (exit 2, file, line and field named): what would otherwise fail at run time or
# run for hours: a device torch cannot use, a budget that is not a number of seconds, a shape Triton's CPU
# interpreter cannot finish


def options_plan(tmp_path, options, shapes='["4x8"]'):
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


def check_plan(capsys, path):
    status = main(["plan", str(path), "--check"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("value", ["gpu", "CUDA", "cuda:x", "meta", ""])
def test_a_device_torch_cannot_run_is_refused_at_check(tmp_path, capsys, value):
    path = options_plan(tmp_path, f'device = "{value}"')
    status, out, err = check_plan(capsys, path)
    assert status == 2 and "the plan is valid" not in out
    assert err.strip() == (f"flyautotune plan: error: {path}:3: [options], field 'device': {value!r} is not a "
                           f"device; accepted: cpu, cuda, cuda:N")


@pytest.mark.parametrize("value", ["gpu", "cuda:x"])
def test_the_device_argument_is_checked_like_the_option(tmp_path, capsys, value):
    path = options_plan(tmp_path, "")
    status = main(["plan", str(path), "--device", value, "--check"])
    captured = capsys.readouterr()
    assert status == 2 and "the plan is valid" not in captured.out
    assert captured.err.strip() == (f"flyautotune plan: error: argument --device: {value!r} is not a device; "
                                    f"accepted: cpu, cuda, cuda:N")


@pytest.mark.parametrize("value", ["cpu", "cuda", "cuda:0", "cuda:3"])
def test_accepted_devices(tmp_path, value):
    assert load_plan(options_plan(tmp_path, f'device = "{value}"')).options.device == value


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_budget_must_be_a_positive_finite_number(tmp_path, capsys, value):
    path = options_plan(tmp_path, f"budget_s = {value}")
    status, _, err = check_plan(capsys, path)
    assert status == 2
    assert f"{path}:3: [options], field 'budget_s': " in err
    assert "must be a positive, finite number of seconds" in err


def test_a_shape_too_large_for_the_cpu_interpreter_is_refused_like_tune(tmp_path, capsys, toy_on_path):
    path = options_plan(tmp_path, 'device = "cpu"', shapes='["4x8", "4096x8192"]')
    status, out, err = check_plan(capsys, path)
    assert status == 2 and toy_on_path.launch.search_count == 0
    assert err.strip() == (
        f"flyautotune plan: error: {path}:7: [[tune]] entry 1, field 'shapes': 4096x8192 has 33554432 elements, "
        f"more than the 4194304 Triton's CPU interpreter finishes in reasonable time; use a GPU "
        f"(device = \"cuda:0\"), a smaller shape, or allow_slow = true in [options]")


def test_allow_slow_lets_the_plan_through(tmp_path, capsys):
    path = options_plan(tmp_path, 'device = "cpu"\nallow_slow = true', shapes='["4096x8192"]')
    status, out, err = check_plan(capsys, path)
    assert status == 0, err
    assert "scale_toy 4096x8192 fp32" in out and "1 key; the plan is valid" in out
    assert load_plan(path).options.allow_slow is True


def test_allow_slow_must_be_a_bool(tmp_path):
    with pytest.raises(PlanError, match=r"field 'allow_slow': 'yes' has the wrong type \(str\); accepted: true or false"):
        load_plan(options_plan(tmp_path, 'allow_slow = "yes"'))


def test_no_cpu_guard_where_the_keys_run_on_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr("flyautotune.devices.default_device", lambda: "cuda:0")
    monkeypatch.setattr("flyautotune.devices.triton_interprets", lambda: False)
    plan = load_plan(options_plan(tmp_path, "", shapes='["4096x8192"]'))
    assert [k.shape for k in plan.keys] == [(4096, 8192)]
    with pytest.raises(PlanError, match="more than the 4194304"):
        load_plan(options_plan(tmp_path, 'device = "cpu"', shapes='["4096x8192"]'))


# -- the pack's destination is checked before any key is tuned


@pytest.mark.parametrize("where, problem", [
    ("a-file/winners.json", "{tmp}/a-file is a file, not a folder, so the pack's folder cannot be made"),
    ("a-file/deeper/winners.json", "{tmp}/a-file is a file, not a folder, so the pack's folder cannot be made"),
    ("a-folder", "it is a folder"),
])
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_pack_that_cannot_be_written_is_refused_before_tuning(tmp_path, toy_on_path, capsys, where, problem,
                                                                check):
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "a-folder").mkdir()
    path = write(tmp_path, GOOD)
    pack = tmp_path / where
    assert _cli([str(path), "--pack", str(pack), "--device", "cpu", *(["--check"] if check else [])]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == (f"flyautotune plan: error: argument --pack: cannot write the pack to {str(pack)!r}: "
                           f"{problem.format(tmp=tmp_path)}; accepted: a file in a folder that exists or can be "
                           f"made, and can be written")
    assert toy_on_path.launch.search_count == 0 and "keys in" not in out  # nothing was tuned
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder", "plan.toml"]


def test_the_plan_option_pack_is_checked_too_and_named(tmp_path, toy_on_path, capsys):
    (tmp_path / "a-file").write_text("not a folder")
    path = write(tmp_path, GOOD.replace("[options]\n", '[options]\npack = "a-file/winners.json"\n'))
    assert _cli([str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"flyautotune plan: error: {path}: [options], field 'pack': cannot write the pack to "
                          f"{str(tmp_path / 'a-file' / 'winners.json')!r}: ")
    assert toy_on_path.launch.search_count == 0


def test_a_pack_in_folders_not_made_yet_is_accepted_and_they_are_made_at_the_end(tmp_path, toy_on_path, capsys):
    path = write(tmp_path, GOOD)
    pack = tmp_path / "dist" / "packs" / "winners.json"
    assert _cli([str(path), "--pack", str(pack), "--device", "cpu", "--check"]) == 0
    assert not (tmp_path / "dist").exists()  # the check leaves nothing behind
    assert _cli([str(path), "--pack", str(pack), "--device", "cpu", "--serial"]) == 0
    assert len(json.loads(pack.read_text())["entries"]) == 6


# -- Ctrl-C keeps what finished


def _interrupt_at(monkeypatch, toy, shape, dtype):
    """Ctrl-C arrives while the plan builds the inputs of ``shape`` x ``dtype``."""
    real = toy.example

    def example(s, d, device):
        if (s, d) == (shape, dtype) and device != "meta":
            raise KeyboardInterrupt
        return real(s, d, device)

    monkeypatch.setattr(toy, "example", example)


def test_ctrl_c_of_a_serial_plan_keeps_the_finished_keys_and_writes_the_named_pack(tmp_path, toy_on_path,
                                                                                   monkeypatch, capsys):
    from flyautotune.store import get_store

    path = write(tmp_path, GOOD)
    pack = tmp_path / "dist" / "winners.json"
    _interrupt_at(monkeypatch, toy_on_path, (4, 40), "fp32")
    assert main(["plan", str(path), "--serial", "--device", "cpu", "--pack", str(pack)]) == 130
    out, err = capsys.readouterr()
    assert ("flyautotune plan: interrupted after 2 of 6 keys: 2 winners kept in the store; run the plan again to "
            "finish (stored keys are looked up, not searched)") in err
    assert f"pack: {pack} (2 winners of the finished keys; 4 keys not run)" in out
    assert len(json.loads(pack.read_text())["entries"]) == 2
    assert len(get_store().entries("scale_toy")) == 2


def test_ctrl_c_without_pack_leaves_the_plans_pack_as_it_was(tmp_path, toy_on_path, monkeypatch, capsys):
    from flyautotune.store import get_store

    path = write(tmp_path, GOOD)
    (tmp_path / "plan.pack.json").write_text("a whole pack of an earlier run")
    _interrupt_at(monkeypatch, toy_on_path, (2, 100), "fp32")
    assert main(["plan", str(path), "--serial", "--device", "cpu"]) == 130
    err = capsys.readouterr().err
    assert "interrupted after 4 of 6 keys: 4 winners kept in the store" in err
    assert "the plan's pack is left as it was (--pack FILE writes the finished keys' winners on Ctrl-C)" in err
    assert (tmp_path / "plan.pack.json").read_text() == "a whole pack of an earlier run"
    assert len(get_store().entries("scale_toy")) == 4


# -- a named Ray cluster that does not answer fails in bounded time, naming the address


@pytest.fixture
def fake_ray(monkeypatch):
    """A stand-in ``ray`` module (``import ray`` finds it): its ``init`` records the connection attempts Ray
    would make and fails as Ray does where no cluster answers (after 20 attempts, 14 minutes, unbounded)."""
    import sys
    import types

    fake = types.ModuleType("ray")
    fake.calls = []
    fake.is_initialized = lambda: False

    def init(address=None, **kwargs):
        fake.calls.append((address, os.environ.get("RAY_gcs_server_port_wait_time_s", "20 (Ray's default)")))
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    fake.init = init
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_gcs_server_port_wait_time_s", raising=False)
    return fake


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ACCEPTED_ADDRESSES = ("accepted: a running Ray cluster's address: HOST:PORT of a head's GCS (port 6379 by default), "
                      "ray://HOST:PORT of a Ray Client server (port 10001 by default), or auto; a cluster slow to "
                      "answer gets longer with connect_timeout_s in [options] (now 1 s)")


def test_a_ray_address_where_nothing_answers_fails_within_connect_timeout(tmp_path, fake_ray, toy_on_path, capsys):
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 1\n"))
    address = f"127.0.0.1:{_closed_port()}"
    assert _cli([str(path), "--ray", address]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at "
                           f"{address!r} within 1 s: nothing answers at {address} (Connection refused); "
                           + ACCEPTED_ADDRESSES)
    assert fake_ray.calls == []  # ray.init, with its 14 minutes of retries, never ran
    assert toy_on_path.launch.search_count == 0 and not (tmp_path / "plan.pack.json").exists()


@contextlib.contextmanager
def _serving(reply):
    """A local TCP server that accepts every connection and, once the client has spoken, sends ``reply``
    (None: says nothing, ever); yields its ``HOST:PORT``."""
    stop, conns = threading.Event(), []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conns.append(conn)
            if reply is not None:
                with contextlib.suppress(OSError):
                    conn.recv(4096)
                    conn.sendall(reply)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        server.join()
        for conn in conns:
            conn.close()
        listener.close()


def _children():
    """This process's child processes (Linux), or None where that cannot be read."""
    tasks = Path(f"/proc/{os.getpid()}/task")
    if not tasks.is_dir():
        return None
    out = set()
    for task in tasks.iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out.update((task / "children").read_text().split())
    return out


#: An empty HTTP/2 SETTINGS frame: the first words of any gRPC server, a Ray head's among them.
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
NOT_RAY = [
    (None, True, "something accepts connections at {a} but sends nothing back (a Ray head answers at once)"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", False,
     "an HTTP server answers at {a}, not a Ray head: it sent 'HTTP/1.1 400 Bad Request'"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", False, "something answers at {a}, not a Ray head: it sent 'SSH-2.0-OpenSSH_9.6'"),
    (SETTINGS, True, "an HTTP/2 (gRPC) server answers at {a}, but no Ray head answered Ray's own check (ray "
                     "health-check) in time"),
]


@pytest.mark.parametrize("reply, late, what", NOT_RAY, ids=["silent", "http", "ssh", "grpc"])
def test_a_port_where_something_else_answers_fails_within_connect_timeout(tmp_path, toy_on_path, monkeypatch,
                                                                          capsys, reply, late, what):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 3\n"))
    threads, children = set(threading.enumerate()), _children()
    with _serving(reply) as address:
        t0 = time.monotonic()
        assert _cli([str(path), "--ray", address]) == 2
        took = time.monotonic() - t0
    assert took < 3 * 3  # it took about 45 s: ray.init's one attempt, past connect_timeout_s
    within = " within 3 s" if late else ""
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at {address!r}{within}: "
        + what.format(a=address) + "; " + ACCEPTED_ADDRESSES.replace("(now 1 s)", "(now 3 s)"))
    # Nothing is left behind: no Ray in this process, no check still running, no thread.
    assert not ray.is_initialized() and _children() == children and set(threading.enumerate()) <= threads
    assert toy_on_path.launch.search_count == 0 and not (tmp_path / "plan.pack.json").exists()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_head_that_began_to_accept_as_the_time_ran_out_is_not_blamed_for_silence(tmp_path, fake_ray, monkeypatch,
                                                                                   capsys, scheme):
    """The port wait can spend the whole time; the next check then read nothing and said the address sends
    nothing back, of a server that answers at once."""
    from flyautotune.scale import ray_engine

    wait = ray_engine._wait_for_port

    def refused_until_the_deadline(host, port, deadline):  # a head that starts as the time runs out
        time.sleep(max(deadline - time.monotonic(), 0.0))
        return wait(host, port, deadline)

    monkeypatch.setattr(ray_engine, "_wait_for_port", refused_until_the_deadline)
    monkeypatch.setattr(ray_engine, "_client_installed", lambda: True)
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 1\n"))
    with _serving(SETTINGS) as where:  # it answers as a gRPC server does, at once
        assert _cli([str(path), "--ray", scheme + where]) == 2
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at '{scheme}{where}' within 1 s: "
        f"{where} began to accept connections only as the time ran out: none was left to ask whether a Ray head "
        f"answers there; " + ACCEPTED_ADDRESSES)
    assert fake_ray.calls == []


def test_a_named_cluster_in_ray_address_is_named_as_such(tmp_path, fake_ray, monkeypatch, capsys):
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 1\n"))
    with _serving(b"HTTP/1.1 400 Bad Request\r\n\r\n") as address:
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert _cli([str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"flyautotune plan: error: RAY_ADDRESS: cannot connect to the Ray "
                                              f"cluster at {address!r}: an HTTP server answers at {address}")
    assert fake_ray.calls == []


def test_once_rays_own_check_passes_ray_gets_the_attempts_that_fit(tmp_path, fake_ray, monkeypatch, capsys):
    from flyautotune.scale import ray_engine

    checked = []
    monkeypatch.setattr(ray_engine, "_health_check", lambda ray, address, deadline: checked.append(address) or "")
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 1\n"))
    with _serving(SETTINGS) as address:
        assert _cli([str(path), "--ray", address]) == 2
    assert checked == [address]
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at {address!r}: {address} "
        f"answers, but Ray could not connect (ConnectionError: Failed to connect to Ray cluster at {address}); "
        + ACCEPTED_ADDRESSES)
    assert fake_ray.calls == [(address, "1")]  # one attempt of Ray's, not 20
    assert "RAY_gcs_server_port_wait_time_s" not in os.environ  # Ray's setting put back as it was


def test_an_operators_own_ray_attempts_are_kept(tmp_path, fake_ray, monkeypatch, capsys):
    from flyautotune.scale import ray_engine

    monkeypatch.setattr(ray_engine, "_health_check", lambda ray, address, deadline: "")
    path = write(tmp_path, GOOD)
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "7")
    with _serving(SETTINGS) as address:
        assert _cli([str(path), "--ray", address]) == 2
    assert fake_ray.calls == [(address, "7")]


@pytest.mark.parametrize("address", ["head:abc", "head:6379/x", ":6379", "head:0", "ray://head:0"])
def test_a_ray_address_that_is_not_one_is_refused_naming_it(tmp_path, fake_ray, capsys, address):
    path = write(tmp_path, GOOD)
    assert _cli([str(path), "--ray", address]) == 2
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: {address!r} is not a Ray address; accepted: HOST:PORT of a "
        f"head's GCS (port 6379 by default), ray://HOST:PORT of a Ray Client server (port 10001 by default), or auto")
    assert fake_ray.calls == []


@pytest.mark.parametrize("address", ["http://head:8265", "https://head:8265"])
def test_an_http_address_is_refused_as_a_dashboards(tmp_path, fake_ray, capsys, address):
    path = write(tmp_path, GOOD)
    assert _cli([str(path), "--ray", address]) == 2
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: {address!r} is an HTTP address (a Ray dashboard's, or its Jobs "
        f"API's), not a Ray cluster's; accepted: HOST:PORT of a head's GCS (port 6379 by default), ray://HOST:PORT "
        f"of a Ray Client server (port 10001 by default), or auto")
    assert fake_ray.calls == []


CLIENT_NOT_RAY = [
    (None, "something accepts connections at {a} but sends nothing back (a Ray head answers at once)"),
    (SETTINGS, "an HTTP/2 (gRPC) server answers at {a}, but not to the ping of Ray's client"),
]


@pytest.mark.parametrize("reply, what", CLIENT_NOT_RAY, ids=["silent", "grpc"])
def test_a_ray_client_address_where_no_ray_client_server_answers_fails_within_connect_timeout(
        tmp_path, toy_on_path, monkeypatch, capsys, reply, what):
    """Ray's client waits without end for a gRPC server that does not answer its ping."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("grpc", reason="ray:// needs ray[client]")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 2\n"))
    threads = set(threading.enumerate())
    with _serving(reply) as where:
        t0 = time.monotonic()
        assert _cli([str(path), "--ray", f"ray://{where}"]) == 2
        took = time.monotonic() - t0
    assert took < 2 * 3
    assert capsys.readouterr().err.strip() == (
        f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at 'ray://{where}' within 2 s: "
        + what.format(a=where) + "; " + ACCEPTED_ADDRESSES.replace("(now 1 s)", "(now 2 s)"))
    assert not ray.is_initialized() and set(threading.enumerate()) <= threads


def test_a_ray_client_server_is_pinged_as_rays_client_does_past_an_http_proxy(monkeypatch):
    """Ray's client opens its channel with no HTTP proxy (``grpc.enable_http_proxy=0``): the ping must too, or an
    ``http_proxy`` in the environment (a proxy that refuses, as one for the outside world does an inside host)
    fails a server Ray would reach."""
    pytest.importorskip("ray")
    grpc = pytest.importorskip("grpc", reason="ray:// needs ray[client]")
    from concurrent import futures

    from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc

    from flyautotune.scale import ray_engine

    class Answers(ray_client_pb2_grpc.RayletDriverServicer):
        def ClusterInfo(self, request, context):
            return ray_client_pb2.ClusterInfoResponse(json="{}")

    server = grpc.server(futures.ThreadPoolExecutor(2))
    ray_client_pb2_grpc.add_RayletDriverServicer_to_server(Answers(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(4)

    def refuse():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = proxy.accept()
                with conn:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=refuse, daemon=True).start()
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.getsockname()[1]}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    got = []

    class Ray:
        def init(self, address, **kwargs):
            got.append(address)

    try:
        ray_engine.connect(Ray(), f"ray://127.0.0.1:{port}", 5.0)
    finally:
        server.stop(0)
        proxy.close()
    assert got == [f"ray://127.0.0.1:{port}"]


def test_a_ray_client_address_without_the_ray_client_says_how_to_get_it(tmp_path, fake_ray, monkeypatch, capsys):
    from flyautotune.scale import ray_engine

    monkeypatch.setattr(ray_engine, "_client_installed", lambda: False)
    path = write(tmp_path, GOOD)
    assert _cli([str(path), "--ray", "ray://head:10001"]) == 2
    assert capsys.readouterr().err.startswith(
        "flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at 'ray://head:10001': a ray:// "
        "address needs the Ray Client, which is not installed here: pip install 'ray[client]'; accepted: ")
    assert fake_ray.calls == []


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_without_a_port_reaches_ray_with_the_default_port_it_was_probed_at(
        tmp_path, fake_ray, monkeypatch, capsys, scheme):
    """Ray takes no GCS address without a port, and its client would try gRPC's default port (443)."""
    from flyautotune.scale import ray_engine

    checked = []
    monkeypatch.setattr(ray_engine, "_health_check", lambda ray, address, deadline: checked.append(address) or "")
    monkeypatch.setattr(ray_engine, "_client_installed", lambda: True)
    monkeypatch.setattr(ray_engine, "_client_ping", lambda *args: checked.append(args[:2]) or ("", False))
    path = write(tmp_path, GOOD.replace("[options]\n", "[options]\nconnect_timeout_s = 1\n"))
    with _serving(SETTINGS) as where:
        port = int(where.rpartition(":")[2])
        monkeypatch.setattr(ray_engine, "CLIENT_PORT" if scheme else "GCS_PORT", port)
        assert _cli([str(path), "--ray", f"{scheme}127.0.0.1"]) == 2
    assert checked == [("127.0.0.1", port) if scheme else f"127.0.0.1:{port}"]
    assert [address for address, _ in fake_ray.calls] == [f"{scheme}127.0.0.1:{port}"]
    assert capsys.readouterr().err.startswith(
        f"flyautotune plan: error: argument --ray: cannot connect to the Ray cluster at '{scheme}127.0.0.1': "
        f"127.0.0.1:{port} answers, but Ray could not connect (ConnectionError: ")


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", '"30"'])
def test_connect_timeout_must_be_a_positive_finite_number(tmp_path, capsys, value):
    path = options_plan(tmp_path, f"connect_timeout_s = {value}")
    status, _, err = check_plan(capsys, path)
    assert status == 2 and f"{path}:3: [options], field 'connect_timeout_s': " in err
    assert ("must be a positive, finite number of seconds" in err if value != '"30"'
            else "has the wrong type (str); accepted: an integer or a number" in err)
    assert load_plan(options_plan(tmp_path, "")).options.connect_timeout_s == 30.0


# -- progress while a key runs


def test_a_plan_on_a_pipe_says_which_key_starts_and_how_its_search_goes(tmp_path, toy_on_path):
    import io

    plan = load_plan(write(tmp_path, GOOD))
    log = io.StringIO()
    run_serial(plan, device="cpu", progress=PlanProgress(len(plan.keys), stream=log, tty=False, every_s=0))
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text  # plain lines for a log
    lines = text.splitlines()
    first = lines[:lines.index(next(x for x in lines if x.startswith("[1/6] scale_toy 4x8 fp32: search ")))]
    assert first[:2] == ["[1/6] scale_toy 4x8 fp32: tuning on cpu", "[1/6] scale_toy 4x8 fp32: searching 4 candidates"]
    assert [x.split(" [")[0] for x in first[2:6]] == [f"[1/6] scale_toy 4x8 fp32: candidate {n} of 4"
                                                      for n in range(1, 5)]
    assert first[6].startswith("[1/6] scale_toy 4x8 fp32: searched 4 candidates in ")
    assert "[6/6] scale_toy 2x100 bf16: tuning on cpu" in lines


def test_a_plan_on_a_pipe_writes_a_candidate_line_at_most_every_every_s(tmp_path, toy_on_path):
    import io

    plan = load_plan(write(tmp_path, GOOD))
    log = io.StringIO()
    run_serial(plan, device="cpu", progress=PlanProgress(len(plan.keys), stream=log, tty=False, every_s=1e9))
    lines = log.getvalue().splitlines()
    assert lines[:3] == ["[1/6] scale_toy 4x8 fp32: tuning on cpu", "[1/6] scale_toy 4x8 fp32: searching 4 candidates",
                         lines[2]] and lines[2].startswith("[1/6] scale_toy 4x8 fp32: searched 4 candidates in ")
    assert not [x for x in lines if ": candidate " in x] and len(lines) == 6 * 4
    again = io.StringIO()  # stored keys: which key, then its result
    run_serial(plan, device="cpu", progress=PlanProgress(len(plan.keys), stream=again, tty=False))
    first, result = again.getvalue().splitlines()[:2]
    assert first == "[1/6] scale_toy 4x8 fp32: tuning on cpu"
    assert result.startswith("[1/6] scale_toy 4x8 fp32: store 1.188 ms; 5 left, ETA ")


def test_a_plan_on_a_terminal_keeps_one_live_line_per_key(tmp_path, toy_on_path):
    import io

    plan = load_plan(write(tmp_path, GOOD))
    log = io.StringIO()
    run_serial(plan, device="cpu", progress=PlanProgress(len(plan.keys), stream=log, tty=True))
    text = log.getvalue()
    assert "\r\x1b[K[1/6] scale_toy 4x8 fp32: tuning on cpu" in text
    assert "\r\x1b[K[1/6] scale_toy 4x8 fp32: [" in text and "] candidate 1 of 4 (" in text  # the search's bar
    assert "\r\x1b[K[1/6] scale_toy 4x8 fp32: search 1.188 ms; 5 left" in text  # replaces the live line
    assert text.endswith("0 left\n")


def test_the_keys_in_flight_on_ray_are_listed_while_waiting():
    import io

    progress = PlanProgress(3, stream=io.StringIO(), tty=False, every_s=0)
    progress.started(PlanKey("scale_toy", (4, 8), "fp32"))
    progress.started(PlanKey("scale_toy", (4, 40), "bf16"))
    progress.tick()
    lines = progress.stream.getvalue().splitlines()
    assert lines[0] == "started scale_toy 4x8 fp32 on a Ray worker (1 running, 0 of 3 done)"
    assert lines[1] == "started scale_toy 4x40 bf16 on a Ray worker (2 running, 0 of 3 done)"
    assert lines[2].startswith("running scale_toy 4x8 fp32 (") and ", scale_toy 4x40 bf16 (" in lines[2]
    assert lines[2].endswith("; 0 of 3 done")
    quiet = PlanProgress(3, stream=io.StringIO(), tty=False, every_s=1e9)  # a log gets such a line every every_s
    quiet.started(PlanKey("scale_toy", (4, 8), "fp32"))
    quiet.tick()
    assert len(quiet.stream.getvalue().splitlines()) == 1


def test_on_a_terminal_the_keys_in_flight_show_how_their_search_goes():
    import io

    progress = PlanProgress(3, stream=io.StringIO(), tty=True)
    key, other = PlanKey("scale_toy", (4, 8), "fp32"), PlanKey("scale_toy", (4, 40), "bf16")
    progress.started(key)
    progress.started(other)
    progress.key_event(key, {"event": "search_start", "candidates": 4})
    progress.key_event(key, {"event": "candidate", "index": 1, "total": 4, "config": {"kwargs": {"BLOCK": 16}},
                             "ms": 1.5})
    progress.tick()
    live = progress.stream.getvalue().rsplit("\r\x1b[K", 1)[-1]
    assert live.startswith("running scale_toy 4x8 fp32 (candidate 2 of 4, ")
    assert ", scale_toy 4x40 bf16 (" in live and live.endswith("; 0 of 3 done")
    progress.key_event(key, {"event": "retime", "round": 1, "most": 3, "finalists": []})
    progress.tick()
    assert progress.stream.getvalue().rsplit("\r\x1b[K", 1)[-1].startswith(
        "running scale_toy 4x8 fp32 (re-timing the finalists, round 1 of at most 3, ")


def _search(n, start=0, end=True):
    """The relayed events of a search of 4 candidates, up to candidate ``n``."""
    events = [{"event": "search_start", "candidates": 4}] if start == 0 else []
    events += [{"event": "candidate", "index": i, "total": 4, "config": {"kwargs": {"BLOCK": 16 << i}}, "ms": 1.0}
               for i in range(start + 1, n + 1)]
    return events + ([{"event": "search_end", "duration_s": 0.5}] if end else [])


def test_a_key_ray_runs_again_says_so_and_shows_only_the_new_runs_search():
    """A worker dies mid-search and Ray runs its key again: the driver shows the retry, then one search; events
    of the dead run that reach the box late are dropped (its candidate lines never follow the retry)."""
    import io

    from flyautotune.scale.ray_engine import ProgressBox

    key, other = PlanKey("scale_toy", (2, 14), "fp32"), PlanKey("scale_toy", (4, 8), "fp32")
    box, progress = ProgressBox(), PlanProgress(2, stream=io.StringIO(), tty=False, every_s=0)
    progress.started(key)
    progress.started(other)

    def relay():
        for index, event in box.take():
            progress.key_event((key, other)[index], event)

    assert box.begin(0) == 1 and box.begin(1) == 1
    for event in _search(2, end=False):  # the first run: two candidates, then its worker dies
        box.put(0, event, 1)
    box.put(1, _search(1, end=False)[0], 1)
    relay()
    assert box.begin(0) == 2  # Ray's retry, in another worker
    box.put(0, _search(3, start=2, end=False)[0], 1)  # the dead run's last event, come in late
    for event in _search(4):
        box.put(0, event, 2)
    relay()
    lines = [x for x in progress.stream.getvalue().splitlines() if x.startswith(f"{key.label()}: ")]
    label = key.label()
    assert [x.split(" [")[0] for x in lines] == [
        f"{label}: searching 4 candidates", f"{label}: candidate 1 of 4", f"{label}: candidate 2 of 4",
        f"{label}: its worker died; retrying (attempt 2)",
        f"{label}: searching 4 candidates", f"{label}: candidate 1 of 4", f"{label}: candidate 2 of 4",
        f"{label}: candidate 3 of 4", f"{label}: candidate 4 of 4", lines[-1]]
    assert lines[-1].startswith(f"{label}: searched 4 candidates in ")
    assert f"{other.label()}: searching 4 candidates" in progress.stream.getvalue()  # the other key: untouched


def test_on_a_terminal_a_key_ray_runs_again_shows_the_retry_in_the_live_line():
    import io

    progress = PlanProgress(1, stream=io.StringIO(), tty=True)
    key = PlanKey("scale_toy", (2, 14), "fp32")
    progress.started(key)
    for event in _search(3, end=False):
        progress.key_event(key, event)
    progress.key_event(key, {"event": "retry", "attempt": 2})
    progress.tick()
    text = progress.stream.getvalue()
    assert "\r\x1b[Kscale_toy 2x14 fp32: its worker died; retrying (attempt 2)\n" in text  # a line that stays
    assert text.rsplit("\r\x1b[K", 1)[-1].startswith("running scale_toy 2x14 fp32 (retrying (attempt 2), ")
    progress.key_event(key, _search(0, end=False)[0])
    progress.tick()
    assert progress.stream.getvalue().rsplit("\r\x1b[K", 1)[-1].startswith(
        "running scale_toy 2x14 fp32 (candidate 1 of 4, ")
