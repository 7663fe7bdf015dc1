"""A plan through a local Ray instance of 2 CPU workers: same winners as serial, and a killed worker."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from flyautotune.scale.plan import load_plan  # noqa: E402
from flyautotune.scale.ray_engine import run_ray  # noqa: E402
from flyautotune.scale.runner import run_serial, write_pack  # noqa: E402

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One local Ray instance of 2 CPU workers for the module; workers import ``scale_toy``."""
    marker = tmp_path_factory.mktemp("kill") / "killed"
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SCALE_TOY_KILL", "SCALE_TOY_KILL_MID")}
    # Local workers inherit the driver's environment at ray.init.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), saved["PYTHONPATH"]) if p)
    os.environ["SCALE_TOY_KILL"] = str(marker)
    os.environ["SCALE_TOY_KILL_MID"] = str(marker.with_name("killed-mid"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield marker
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def toy(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    import scale_toy

    scale_toy.launch._memo.clear()
    scale_toy.launch.search_count = 0  # tests run before this module may have searched in this process
    return scale_toy


def plan_file(tmp_path, shapes, options=""):
    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent(f"""
        [options]
        plugins = ["scale_toy"]
        {options}

        [[tune]]
        adopter = "scale_toy"
        shapes = {shapes!r}
        dtypes = ["fp32", "bf16"]
    """).replace("'", '"'))
    return load_plan(path)


def _winners(result):
    return {(r.key.shape, r.key.dtype): (r.source, r.config) for r in result.results}


def test_ray_plan_matches_serial_and_merges_one_store_and_pack(tmp_path, local_ray, toy, monkeypatch):
    from flyautotune.store import get_store, load_pack

    driver_dir = os.environ["FLYAUTOTUNE_CACHE_DIR"]
    plan = plan_file(tmp_path, ["4x8", "4x40", "2x100", "1x64"])
    seen = []
    parallel = run_ray(plan, progress=seen.append)
    assert len(parallel.results) == 8 and [r.source for r in parallel.results] == ["search"] * 8
    assert len(seen) == 8 and parallel.engine == "ray, 2 CPU worker(s)"
    assert toy.launch.search_count == 0  # the driver tuned nothing itself
    workers = {r.worker for r in parallel.results}
    assert all(w.split(":")[-1] != str(os.getpid()) for w in workers)
    driver_store = get_store()
    assert len(driver_store.entries("scale_toy")) == 8
    write_pack(parallel, tmp_path / "ray.pack.json")

    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path / "serial-store"))
    serial = run_serial(plan)
    assert _winners(serial) == _winners(parallel)
    assert {e.key: e.config for e in load_pack(tmp_path / "ray.pack.json")} == \
        {e.key: e.config for e in get_store().entries("scale_toy")}

    # The driver's winners travel to the workers: nothing is searched again.
    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", driver_dir)
    again = run_ray(plan)
    assert [r.source for r in again.results] == ["store"] * 8


def test_each_key_says_when_it_goes_to_a_worker(tmp_path, local_ray):
    import io

    from flyautotune.scale.runner import PlanProgress

    plan = plan_file(tmp_path, ["4x8", "2x100"])
    log = io.StringIO()
    run_ray(plan, progress=PlanProgress(len(plan.keys), stream=log, tty=False))
    lines = log.getvalue().splitlines()
    for key in plan.keys:
        start = next(i for i, x in enumerate(lines) if x.startswith(f"started {key.label()} on a Ray worker ("))
        end = next(i for i, x in enumerate(lines) if x.startswith("[") and f"] {key.label()}: search " in x)
        assert start < end


def test_a_workers_search_progress_reaches_the_driver_key_by_key(tmp_path, local_ray):
    import io

    from flyautotune.scale.runner import PlanProgress

    plan = plan_file(tmp_path, ["4x8", "2x100"])
    log = io.StringIO()
    run_ray(plan, progress=PlanProgress(len(plan.keys), stream=log, tty=False, every_s=0))
    lines = log.getvalue().splitlines()
    for key in plan.keys:  # each key's search as `flyautotune tune` shows it, each line prefixed by its key
        mine = [i for i, x in enumerate(lines) if x.startswith(f"{key.label()}: ")]
        assert lines[mine[0]] == f"{key.label()}: searching 4 candidates"
        assert [lines[i].split(" [")[0] for i in mine[1:5]] == [f"{key.label()}: candidate {n} of 4"
                                                                for n in range(1, 5)]
        assert lines[mine[5]].startswith(f"{key.label()}: searched 4 candidates in ") and len(mine) == 6
        start = lines.index(next(x for x in lines if x.startswith(f"started {key.label()} on a Ray worker (")))
        end = next(i for i, x in enumerate(lines) if x.startswith("[") and f"] {key.label()}: search " in x)
        assert start < mine[0] and mine[-1] < end  # between the key going to a worker and its result


def test_on_a_pipe_a_workers_candidate_lines_come_at_most_every_every_s(tmp_path, local_ray):
    import io

    from flyautotune.scale.runner import PlanProgress

    plan = plan_file(tmp_path, ["4x8"])
    log = io.StringIO()
    run_ray(plan, progress=PlanProgress(len(plan.keys), stream=log, tty=False, every_s=1e9))
    lines = log.getvalue().splitlines()
    assert not [x for x in lines if ": candidate " in x]
    for key in plan.keys:  # the search's start and end are always shown
        assert f"{key.label()}: searching 4 candidates" in lines
        assert any(x.startswith(f"{key.label()}: searched 4 candidates in ") for x in lines)


def test_a_killed_worker_loses_only_its_key(tmp_path, local_ray, toy):
    from flyautotune.store import get_store

    plan = plan_file(tmp_path, ["4x8", "2x13", "4x40", "2x100"])
    result = run_ray(plan)
    assert local_ray.exists(), "the worker tuning the 13-wide rows should have killed itself once"
    assert [r.source for r in result.results] == ["search"] * 8
    killed = [r for r in result.results if r.key.shape == (2, 13)]
    assert [r.config["kwargs"]["BLOCK"] for r in killed] == [16, 16]
    dead_pid = local_ray.read_text()
    assert all(r.worker.split(":")[-1] != dead_pid for r in killed)  # retried in another process
    assert len(get_store().entries("scale_toy")) == 8


def test_a_key_whose_worker_died_mid_search_shows_the_retry_then_one_search(tmp_path, local_ray, toy):
    import io

    from flyautotune.scale.runner import PlanProgress

    plan = plan_file(tmp_path, ["2x14"])  # the first worker to time BLOCK=64 on 14-wide rows kills itself
    log = io.StringIO()
    result = run_ray(plan, progress=PlanProgress(len(plan.keys), stream=log, tty=False, every_s=0))
    assert local_ray.with_name("killed-mid").exists()
    assert [r.source for r in result.results] == ["search"] * 2
    lines = log.getvalue().splitlines()
    retried = [k for k in plan.keys if f"{k.label()}: its worker died; retrying (attempt 2)" in lines]
    assert len(retried) == 1, log.getvalue()
    label = retried[0].label()
    mine = [x.split(" [")[0] for x in lines if x.startswith(f"{label}: ")]
    after = mine[mine.index(f"{label}: its worker died; retrying (attempt 2)") + 1:]
    assert after[:5] == [f"{label}: searching 4 candidates"] + [f"{label}: candidate {n} of 4" for n in range(1, 5)]
    assert len(after) == 6 and after[5].startswith(f"{label}: searched 4 candidates in ")  # one search after it
    assert mine.index(f"{label}: its worker died; retrying (attempt 2)") <= 3  # the dead run got no further
    end = next(i for i, x in enumerate(lines) if x.startswith("[") and f"] {label}: search " in x)
    assert max(i for i, x in enumerate(lines) if x.startswith(f"{label}: ")) < end  # then its result


def test_cli_ray_flag_uses_the_running_instance(tmp_path, local_ray, capsys):
    import argparse

    from flyautotune.scale import cli_plan

    plan = plan_file(tmp_path, ["4x8", "2x100"])
    parser = argparse.ArgumentParser(prog="flyautotune")
    cli_plan.add_parser(parser.add_subparsers(dest="command"))
    assert cli_plan.run(parser.parse_args(["plan", plan.path, "--ray"])) == 0
    out = capsys.readouterr().out
    assert "4 keys in" in out and "(ray, 2 CPU worker(s))" in out and "(4 winners)" in out


def test_past_the_budget_workers_look_up_stored_keys_and_they_ship(tmp_path, local_ray, toy):
    run_serial(plan_file(tmp_path, ["4x40", "2x100"]))  # the driver's store holds these four keys
    plan = plan_file(tmp_path, ["4x8", "4x40", "2x100"], "budget_s = 0.000001")
    result = run_ray(plan)
    # The first key always runs; past the budget only the key that would search is skipped.
    assert [r.source for r in result.results] == ["search", "skipped", "store", "store", "store", "store"]
    assert all(r.worker.split(":")[-1] != str(os.getpid()) for r in result.results[1:])  # looked up by workers
    assert write_pack(result, tmp_path / "ray.pack.json") == 5


def test_ctrl_c_of_the_driver_keeps_every_key_its_workers_finished(tmp_path, local_ray, monkeypatch, capsys):
    from flyautotune.cli import main
    from flyautotune.store import get_store, load_pack

    plan = plan_file(tmp_path, ["4x8", "4x40", "2x100"])
    real_wait, calls = ray.wait, []

    def wait(*args, **kwargs):  # Ctrl-C in the driver while it waits for its third key
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(ray, "wait", wait)
    pack = tmp_path / "partial.pack.json"
    assert main(["plan", plan.path, "--ray", "--pack", str(pack)]) == 130
    out, err = capsys.readouterr()
    assert "flyautotune plan: interrupted after 2 of 6 keys: 2 winners kept in the store" in err
    assert f"pack: {pack} (2 winners of the finished keys; 4 keys not run)" in out
    assert len(get_store().entries("scale_toy")) == 2  # merged into the driver's store as they arrived
    assert {e.key for e in load_pack(pack)} == {e.key for e in get_store().entries("scale_toy")}


def test_a_ray_head_passes_the_checks_before_ray_init(local_ray):
    """The checks that bound a connection to a named cluster let a real head through, quickly."""
    import time

    from flyautotune.scale.ray_engine import _health_check, _host_port, _what_answers

    address = ray.get_runtime_context().gcs_address
    t0 = time.monotonic()
    assert _what_answers(*_host_port(address), t0 + 10) == ("", False)  # it speaks gRPC
    assert _health_check(ray, address, t0 + 30) == ""  # and Ray's own check finds its GCS
    assert time.monotonic() - t0 < 10


def test_a_heads_gcs_from_a_machine_that_is_no_node_of_it_fails_at_once_naming_the_ray_client(local_ray,
                                                                                              monkeypatch):
    """ray.init looks for this machine's node for a minute, then fails with no word of ray://."""
    import time

    from flyautotune.scale.ray_engine import RayConnectError, connect

    address = ray.get_runtime_context().gcs_address
    host = address.rpartition(":")[0]
    calls = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    connect(ray, address, 30)  # this machine runs the head: through to ray.init
    assert [c["address"] for c in calls] == [address]
    monkeypatch.setattr(ray._private.services, "find_node_ids", lambda: [])  # a machine that runs no Ray node
    t0 = time.monotonic()
    with pytest.raises(RayConnectError) as err:
        connect(ray, address, 30)
    assert time.monotonic() - t0 < 10 and len(calls) == 1
    assert str(err.value) == (
        f"cannot connect to the Ray cluster at {address!r}: a Ray head answers at {address}, but no Ray node runs on "
        f"this machine, and a head's address connects only a machine of its cluster (after `ray start --address "
        f"{address}`); from another machine, connect through the Ray Client: ray://{host}:10001")


def test_a_heads_gcs_given_as_a_ray_client_address_fails_at_once_saying_so(local_ray, monkeypatch):
    """Ray's client retries for about 30 s a server that does not know its calls."""
    import time

    from flyautotune.scale.ray_engine import RayConnectError, connect

    pytest.importorskip("grpc", reason="ray:// needs ray[client]")
    gcs = ray.get_runtime_context().gcs_address
    monkeypatch.setattr(ray, "init", lambda **kwargs: pytest.fail(f"ray.init ran: {kwargs}"))
    t0 = time.monotonic()
    with pytest.raises(RayConnectError) as err:
        connect(ray, f"ray://{gcs}", 30)
    assert time.monotonic() - t0 < 10
    assert str(err.value) == (
        f"cannot connect to the Ray cluster at 'ray://{gcs}': a gRPC server answers at {gcs}, but not a Ray Client "
        f"server (it does not know the Ray Client's calls, as a head's GCS does not: ray:// takes the Ray Client "
        f"server's port, 10001 by default)")
