"""Stored and shipped winners are untrusted: they may set only the tuner's tunable names, to values of
its space; anything else is skipped with one warning and the default runs."""

import json

import pytest
import torch

import flyautotune as fat
from flyautotune import store as fat_store
from flyautotune.store.memory import MemoryStore

SPACE = [fat.Config(BLOCK=b) for b in (64, 128)]


def make(pm, name, **kw):
    ran = []

    @fat.autotune(configs=SPACE, key=["n"], plugin_manager=pm, name=name,
                  default=lambda **a: fat.Config(BLOCK=64), **kw)
    def launch(x, n, BLOCK=None, stream=None):
        ran.append((BLOCK, stream))
        return BLOCK

    return launch, ran


def ship(tmp_path, tuner, key, config):
    entry = fat_store.StoreEntry(tuner=tuner, key=key, config=config,
                                 timings=({"config": config, "ms": 1.0, "error": None},), provenance={},
                                 created=1.0, timing_key=key)
    path = tmp_path / f"{tuner}.json"
    path.write_text(fat_store.dump_pack([entry]))
    return str(path)


@pytest.mark.parametrize("config, why", [
    ({"kwargs": {"BLOCK": 999999999}, "compile_hints": {}}, "not a member of the tuner's config space"),
    ({"kwargs": {"BLOCK": 64, "stream": 0xDEADBEEF}, "compile_hints": {}}, "may not set the launch stream"),
    ({"kwargs": {"x": 3}, "compile_hints": {}}, "not one of the tuner's tunable names"),
])
def test_a_shipped_winner_outside_the_space_is_skipped_and_the_default_runs(pm, tmp_path, caplog, config, why):
    probe, _ = make(pm, "u_probe")
    key = probe.select(torch.zeros(2), 2).key
    launch, ran = make(pm, "u_ship", packs=[ship(tmp_path, "u_ship", key.replace("u_probe", "u_ship"), config)])
    launch.source_fingerprint = probe.source_fingerprint
    with caplog.at_level("WARNING"):
        for _ in range(3):
            assert launch(torch.zeros(2), 2) == 64
    assert ran == [(64, None)] * 3 and launch.last_source == "memory"
    assert why in caplog.text and caplog.text.count("ignoring the shipped winner") == 1


def test_a_stored_winner_outside_the_space_is_dropped_from_the_store(pm, caplog):
    launch, ran = make(pm, "u_store")
    sel = launch.select(torch.zeros(2), 2)
    launch.store().put("u_store", sel.key, sel.key, {"kwargs": {"BLOCK": 7}, "compile_hints": {}}, [], {})
    launch.clear()
    with caplog.at_level("WARNING"):
        assert launch(torch.zeros(2), 2) == 64
    assert launch.store().get("u_store", sel.key) is None
    assert "not a member of the tuner's config space" in caplog.text


def test_validate_refuses_what_the_adopter_does_not_accept(pm, counting_bench):
    seen = []

    def validate(config, n, **_):
        seen.append((config.kwargs["BLOCK"], n))
        return config.kwargs["BLOCK"] <= n

    @fat.autotune(configs=lambda **a: [fat.Config(BLOCK=b) for b in (64, 128)], key=["n"], plugin_manager=pm,
                  name="u_validate", default=lambda **a: fat.Config(BLOCK=64), validate=validate)
    def launch(x, n, BLOCK=None):
        return BLOCK

    key = launch.select(torch.zeros(2), 100).key
    launch.store().put("u_validate", key, key, {"kwargs": {"BLOCK": 128}, "compile_hints": {}}, [], {})
    launch.clear()
    assert launch(torch.zeros(2), 100) == 64 and (128, 100) in seen
    with pytest.raises(fat.IncompatibleConfigError, match="refused by validate"):
        launch.check_winner({"kwargs": {"BLOCK": 128}, "compile_hints": {}}, key)


def test_a_tuned_argument_the_caller_passes_is_an_error_on_warm_keys_too(pm):
    launch, _ = make(pm, "u_caller")
    launch(torch.zeros(2), 2)
    launch(torch.zeros(2), 2)  # warm: the memory answers
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        launch(torch.zeros(2), 2, BLOCK=128)
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        launch(torch.zeros(2), 2, None, 128)


def test_bad_names_and_key_values_are_named(pm):
    with pytest.raises(TypeError, match="name=123; expected a non-empty string"):
        fat.autotune(configs=SPACE, name=123)(lambda n, BLOCK=None: BLOCK)
    launch, _ = make(pm, "u_keys")
    with pytest.raises(ValueError, match=r"key argument n=nan is not a finite number"):
        launch(torch.zeros(2), float("nan"))

    class Opaque:
        pass

    with pytest.raises(TypeError, match="key argument n=.*Opaque without a value representation"):
        launch(torch.zeros(2), Opaque())
    for unhashable, what in (({2, 3}, "set"), ([1, {2}], "set"), (bytearray(b"ab"), "bytearray")):
        with pytest.raises(TypeError, match=f"u_keys: key argument n=.* holds a {what}, which is unhashable"):
            launch(torch.zeros(2), unhashable)
    with pytest.raises(ValueError, match=r"Config: kwarg BLOCK=inf is not a finite number"):
        fat.Config(BLOCK=float("inf"))


def test_an_unknown_force_value_warns_once(pm, monkeypatch, caplog):
    from flyautotune.tuning import env

    monkeypatch.setenv("FLYAUTOTUNE", "banana")
    with caplog.at_level("WARNING"):
        assert env.force_search() is False and env.force_search() is False
    assert caplog.text.count("FLYAUTOTUNE='banana' is not understood") == 1


def test_a_forced_search_over_one_config_replaces_the_stored_winner(pm):
    @fat.autotune(configs=[fat.Config(BLOCK=64), fat.Config(BLOCK=128)], key=["n"], plugin_manager=pm,
                  name="u_single", prune_configs_by=lambda configs, **a: configs[1:])
    def launch(x, n, BLOCK=None):
        return BLOCK

    sel = launch.select(torch.zeros(2), 2)
    launch.store().put("u_single", sel.key, sel.key, {"kwargs": {"BLOCK": 64}, "compile_hints": {}}, [], {})
    assert launch.select(torch.zeros(2), 2, force=True).config == fat.Config(BLOCK=128)
    assert launch.store().get("u_single", sel.key).config == {"kwargs": {"BLOCK": 128}, "compile_hints": {}}


@pytest.mark.parametrize("value, kind", [(128.0, "float"), (True, "bool"), ("128", "str")])
def test_a_winner_equal_to_a_member_only_in_python_is_refused(pm, tmp_path, caplog, value, kind):
    # 128.0 == 128 and True == 1 in Python, but a kernel factory may refuse them or build another kernel:
    # the value's type must be one the tuner's own configs give the name
    probe, _ = make(pm, "u_typed_probe")
    key = probe.select(torch.zeros(2), 2).key.replace("u_typed_probe", "u_typed")
    winner = {"kwargs": {"BLOCK": value}, "compile_hints": {}}
    launch, ran = make(pm, "u_typed", packs=[ship(tmp_path, "u_typed", key, winner)])
    launch.source_fingerprint = probe.source_fingerprint
    with caplog.at_level("WARNING"):
        assert launch(torch.zeros(2), 2) == 64 and launch.last_source == "default"
    assert f"sets BLOCK={value!r} ({kind}); the tuner's own configs give BLOCK int values" in caplog.text
    with pytest.raises(fat.IncompatibleConfigError, match=rf"BLOCK={value!r} \({kind}\)"):
        launch.check_winner(winner, key)  # what `flyautotune import` asks: refused before it is stored
    assert launch.check_winner({"kwargs": {"BLOCK": 128}, "compile_hints": {}}, key) == fat.Config(BLOCK=128)


def test_a_default_that_raises_keeps_the_stored_winner(pm):
    # a bug in the tuner's own default() is the author's to see, not a reason to drop what was tuned
    broken = {"now": False}

    def default(**a):
        if broken["now"]:
            raise ValueError("default() has a bug")
        return fat.Config(BLOCK=64)

    @fat.autotune(configs=SPACE, key=["n"], plugin_manager=pm, name="u_default_bug", default=default)
    def launch(x, n, BLOCK=None):
        return BLOCK

    key = launch.select(torch.zeros(2), 2).key
    launch.store().put("u_default_bug", key, key, {"kwargs": {"BLOCK": 128}, "compile_hints": {}}, [], {})
    launch.clear()
    broken["now"] = True
    with pytest.raises(ValueError, match="default\\(\\) has a bug"):
        launch(torch.zeros(2), 2)
    assert launch.store().get("u_default_bug", key).config["kwargs"] == {"BLOCK": 128}
    broken["now"] = False
    assert launch(torch.zeros(2), 2) == 128 and launch.last_source == "store"


def test_select_takes_force_as_a_bool_only_and_answers_as_the_call_would(pm):
    launch, _ = make(pm, "u_select_args")
    key = launch.select(torch.zeros(2), 2).key
    launch.store().put("u_select_args", key, key, {"kwargs": {"BLOCK": 128}, "compile_hints": {}}, [], {})
    with pytest.raises(TypeError, match=r"u_select_args.select: force='false' must be True or False"):
        launch.select(torch.zeros(2), 2, force="false")
    assert launch.store().get("u_select_args", key).config["kwargs"] == {"BLOCK": 128}  # nothing was searched
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        launch.select(torch.zeros(2), 2, BLOCK=64)
    with pytest.raises(fat.IncompatibleConfigError, match="which the caller also passed"):
        launch(torch.zeros(2), 2, BLOCK=64)


@pytest.mark.parametrize("config, why", [
    ({"kwargs": {"BLOCK": 64, "stream": 0xDEADBEEF}, "compile_hints": {}}, "may not set the launch stream"),
    ({"kwargs": {"BLOCK": 999999999}, "compile_hints": {}}, "not a member of the tuner's config space"),
])
def test_the_python_import_api_refuses_what_an_installed_adopters_tuner_would_never_run(pm, tmp_path, config, why):
    """``plan_import`` checks each entry against its tuner, as ``flyautotune import`` does: by default the
    tuners of the installed adopters, or those given in ``check_with``. The refused entry is skipped with
    its reason, and ``apply_import`` writes nothing of it."""
    launch, _ = make(pm, "u_import")
    pm.register_adopter(fat.Adopter(name="u_import", tuner=launch))
    key = launch.select(torch.zeros(2), 2).key
    good = {"kwargs": {"BLOCK": 128}, "compile_hints": {}}
    pack = fat_store.read_pack(json.dumps({"format": "flyautotune-pack", "version": 1, "entries": [
        json.loads(fat_store.dump_pack([fat_store.StoreEntry("u_import", k, c, (), {}, 1.0, k)]))["entries"][0]
        for k, c in ((key, config), (key.replace('"n":2', '"n":4'), good))]}))
    store = MemoryStore()
    for plan in (fat_store.plan_import(store, pack), fat_store.plan_import(store, pack, check_with={"u_import": launch})):
        [refused] = plan.skipped
        assert refused.reason.startswith("refused: ") and why in refused.reason
        assert [i.entry.config for i in plan.added] == [good]
    assert fat_store.apply_import(store, plan) == 1 and store.get("u_import", key) is None
    unchecked = fat_store.plan_import(store, pack, check_with={})  # no tuner to ask: planned as given
    assert len(unchecked.added) == 1 and not unchecked.skipped


def _computed(pm, name, ran, **kw):
    def space(**_):
        return [fat.Config(BLOCK=64), fat.Config(BLOCK=128, SPLIT=2)]

    @fat.autotune(configs=space, key=["n"], plugin_manager=pm, name=name, default=lambda **a: fat.Config(BLOCK=64),
                  do_bench=lambda fn, setup=None: {None: 5.0, 2: 1.0}[fn()], **kw)
    def launch(x, n, BLOCK=None, SPLIT=None, stream=None):
        ran.append((BLOCK, SPLIT))
        return SPLIT

    return launch


def test_a_computed_spaces_own_winner_is_kept_though_the_default_sets_fewer_names(pm, monkeypatch):
    """With a computed space and a default, a winner's names were checked against the default's alone: the
    search's own winner (SPLIT=2, a name only the space sets) was refused and deleted from the store."""
    ran: list = []
    launch = _computed(pm, "u_computed", ran)
    monkeypatch.setenv("FLYAUTOTUNE", "1")
    key = launch.select(torch.zeros(2), 2).key
    monkeypatch.delenv("FLYAUTOTUNE")
    fat.clear_caches()  # a new process
    again = _computed(pm, "u_computed", ran)
    assert again(torch.zeros(2), 2) == 2 and again.last_source == "store"
    assert again.store().get("u_computed", key).config["kwargs"] == {"BLOCK": 128, "SPLIT": 2}


@pytest.mark.parametrize("config", [
    {"kwargs": {"BLOCK": 999999999}, "compile_hints": {}},
    {"kwargs": {"BLOCK": 64}, "compile_hints": {"maxnreg": 1, "num_warps": 32}},
    {"kwargs": {}, "compile_hints": {}},
])
def test_a_shipped_winner_outside_a_computed_space_with_a_default_is_skipped(pm, tmp_path, caplog, config):
    """Checked against the default's names and types only, such a winner ran: any value, any compile hint,
    or no kwargs at all."""
    ran: list = []
    probe = _computed(pm, "u_probe2", ran)
    key = probe.select(torch.zeros(2), 2).key.replace("u_probe2", "u_shipc")
    launch = _computed(pm, "u_shipc", ran, packs=[ship(tmp_path, "u_shipc", key, config)])
    launch.source_fingerprint = probe.source_fingerprint
    with caplog.at_level("WARNING"):
        assert launch(torch.zeros(2), 2) is None and launch.last_source == "default"
    assert ran[-1] == (64, None) and "is not a member of the tuner's config space" in caplog.text
