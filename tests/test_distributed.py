"""Agreement across the ranks of a gloo job: one winner, rank 0's stored winner, no hang."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
mp = pytest.importorskip("torch.multiprocessing")

from flyautotune.scale.distributed import DistributedSettings, active, agree, distributed  # noqa: E402

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ranks(monkeypatch):
    """``scale_ranks`` importable here and in the spawned ranks (spawn copies sys.path)."""
    monkeypatch.syspath_prepend(str(HERE))
    import scale_ranks

    return scale_ranks


def spawn(fn, world, tmp_path, *extra):
    mp.spawn(fn, args=(world, free_port(), str(tmp_path), *extra), nprocs=world, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)
            if (tmp_path / f"rank{r}.json").exists()]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_ranks_with_different_timings_choose_one_winner(tmp_path, ranks, world):
    reports = spawn(ranks.agree_scenarios, world, tmp_path)
    assert len(reports) == world
    cold = [r["cold"] for r in reports]
    # Alone, the ranks would disagree; together they take one winner.
    assert len({c["alone"] for c in cold}) > 1
    gathered = {i: ranks.rank_ms(i % world, i) for i in range(ranks.N)}
    assert {c["winner"] for c in cold} == {ranks.decide(gathered)}
    assert [c["writer"] for c in cold] == [True] + [False] * (world - 1)
    timed = [i for c in cold for share in c["timed"] for i in share]
    assert sorted(timed) == list(range(ranks.N))  # each candidate timed once, by one rank
    assert cold[1]["timed"] == [[i for i in range(ranks.N) if i % world == 1]]
    # Rank 0's stored winner is broadcast and wins over every other rank's own.
    stored = [r["stored"] for r in reports]
    assert all(s["config"] == ranks.ROOT_STORED and s["winner"] is None and s["timed"] == [] for s in stored)
    assert not any(s["writer"] for s in stored)
    # Only rank 0's store counts: with none there, the group searches, even where rank 1 has one.
    root_cold = [r["root_cold"] for r in reports]
    assert all(r["config"] is None for r in root_cold)
    assert {r["winner"] for r in root_cold} == {ranks.decide(gathered)}


@pytest.mark.slow
def test_a_rank_that_never_joins_gives_the_default_and_one_warning(tmp_path, ranks):
    (report,) = spawn(ranks.absent_rank, 2, tmp_path, 2.0)
    assert report["winner"] is None and "timed out" in report["failed"]
    assert report["took"] < 2.0 + 1.5
    assert report["second_failed"].startswith("agreement is off after an earlier failure")
    assert len(report["warnings"]) == 1 and "every rank runs the default config" in report["warnings"][0]


def test_distributed_settings_are_per_thread_and_nest():
    assert active() is None
    with distributed(timeout_s=5) as outer:
        assert active() == outer == DistributedSettings(None, 5.0)
        with distributed(group="g", timeout_s=1.5):
            assert active() == DistributedSettings("g", 1.5)
            seen = []
            t = threading.Thread(target=lambda: seen.append(active()))
            t.start()
            t.join()
            assert seen == [None]
        assert active() is outer
    assert active() is None


@pytest.mark.parametrize("bad", [0, -1, float("nan"), True, "5"])
def test_bad_timeout_is_refused(bad):
    with pytest.raises(ValueError, match=rf"timeout_s must be a positive number of seconds, got {bad!r}"):
        with distributed(timeout_s=bad):
            pass


def test_agree_without_an_initialized_group_falls_back_with_a_warning():
    with pytest.warns(RuntimeWarning, match="not initialized"):
        a = agree(key="k", n_candidates=3, time_some=lambda ix: {}, decide=min, stored=None, timeout_s=1)
    assert a.winner is None and a.config is None and not a.writer and "init_process_group" in a.failed


@pytest.mark.slow
def test_a_tuner_inside_distributed_runs_one_config_on_every_rank(tmp_path, ranks):
    reports = spawn(ranks.tuner_scenario, 2, tmp_path)
    assert len({r["ran"] for r in reports}) == 1  # one config everywhere
    assert len({r["alone"] for r in reports}) == 2  # although alone the ranks would disagree
    assert [bool(r["stored"]) for r in reports] == [True, False]  # one rank writes the store
    assert {r["source"] for r in reports} == {"search"}


@pytest.mark.slow
def test_rank_zeros_answer_runs_on_every_rank_whatever_each_rank_holds(tmp_path, ranks):
    r0, r1 = spawn(ranks.own_answers_scenario, 2, tmp_path)
    # n=2: rank 1 had searched alone (its winner in memory and in its store); rank 0 runs the default on a
    # miss, so every rank runs the default
    assert r1["alone2"] != 0
    assert (r0["ran2"], r0["source2"]) == (r1["ran2"], r1["source2"]) == (0, "default")
    # n=3: both ranks hold their own, different winners; rank 0's runs everywhere
    assert r0["alone3"] != r1["alone3"]
    assert (r0["ran3"], r0["source3"]) == (r1["ran3"], r1["source3"]) == (r0["alone3"], "store")
    # ...and answers from memory afterwards, on both ranks
    assert r0["again3"] == r1["again3"] == r0["alone3"] and r0["source_again3"] == r1["source_again3"] == "memory"
    # different keys on the two ranks: each runs the default, with one warning naming the stray rank
    assert (r0["stray"], r0["source_stray"]) == (r1["stray"], r1["source_stray"]) == (0, "default")
    for r in (r0, r1):
        (warning,) = r["warnings"]
        assert "rank(s) [1] asked about another key" in warning
    # the group is still used: a forced search of the group takes one winner, from every rank's timings
    gathered = {i: ranks.rank_ms(i % 2, i) for i in range(ranks.N)}
    assert r0["forced7"] == r1["forced7"] == ranks.decide(gathered)
    # the gloo group flyautotune made for tuning goes with the job's groups (kept past them, the process
    # could abort at exit)
    assert all(r["own_group_live"] and r["own_group_released"] for r in (r0, r1))


@pytest.mark.slow
def test_a_timed_out_agreement_leaves_the_jobs_own_group_working(tmp_path, ranks):
    r0, r1 = spawn(ranks.silent_rank_scenario, 2, tmp_path, 2.0)
    # rank 0 waited at most the bound, then ran the space's first config (there is no default)
    assert r0["ran"] == 0 and r0["source"] == "default" and r0["took"] < 2.0 + 1.5
    assert len(r0["warnings"]) == 1 and "timed out" in r0["warnings"][0]
    assert r1["warnings"] == []
    # the job's own all_reduce on the default group pairs up: tuning ran on a gloo group of its own
    assert r0["sum"] == r1["sum"] == 3.0


@pytest.mark.slow
def test_the_groups_search_checks_outputs_and_restores_inputs(tmp_path, ranks):
    r0, r1 = spawn(ranks.checked_search_scenario, 2, tmp_path)
    # B=3 (timed by rank 1) is the fastest but wrong: rejected against the default's outputs, as alone;
    # B=4 (timed by rank 0) wins on both ranks, and is the one stored
    assert (r0["ran"], r0["source"]) == (r1["ran"], r1["source"]) == (4, "search")
    assert r0["stored"] == [{"B": 4}] and r1["stored"] == []
    # the in-place launch ran once on the caller's inputs: the timing's reps were undone
    assert r0["acc"] == r1["acc"] == [2.0] * 4


@pytest.mark.slow
def test_a_rank_whose_share_outlasts_the_bound_runs_the_default_as_the_others_do(tmp_path, ranks):
    r0, r1 = spawn(ranks.slow_share_scenario, 2, tmp_path, 2.0)
    # rank 0 gave up waiting for rank 1's timings; rank 1 completed that gather later, and still runs what
    # rank 0 runs (the space's first config: there is no default), not the search's winner (B=3)
    assert (r0["ran"], r0["source"]) == (r1["ran"], r1["source"]) == (0, "default")
    for r in (r0, r1):
        (warning,) = r["warnings"]
        assert "every rank runs the default config" in warning and "raise it above that" in warning


@pytest.mark.slow
def test_a_winner_the_launcher_refuses_on_one_rank_does_not_take_the_group_out_of_step(tmp_path, ranks):
    r0, r1 = spawn(ranks.refused_scenario, 2, tmp_path, 3.0)
    assert r0["stored"] == 5
    # rank 1 ran rank 0's winner; rank 0's launcher refused it, so rank 0 runs the default for that key, and
    # answers it from memory, as rank 1 does, without a collective of its own
    assert (r1["ran3"], r1["source3"]) == (5, "store") and (r0["ran3"], r0["source3"]) == (0, "default")
    assert r0["source_again3"] == r1["source_again3"] == "memory"
    # the group stays in step: the next key is one collective of both ranks (no stray key, no time-out)
    assert (r0["ran4"], r0["source4"]) == (r1["ran4"], r1["source4"]) == (0, "default")
    assert r0["warnings"] == r1["warnings"] == []
    assert r0["in_store"] == []  # the refused winner is gone from rank 0's store: the next job agrees anew
    (said,) = [m for m in r0["logged"] if "does not fit the kernel on this rank" in m]
    assert "the other ranks keep the group's winner" in said and "flyautotune clear" in said
    assert r1["logged"] == []


@pytest.mark.slow
def test_flyautotune_1_on_one_rank_keeps_the_groups_answer(tmp_path, ranks):
    r0, r1 = spawn(ranks.forced_on_one_rank_scenario, 2, tmp_path)
    # rank 0 runs the default on a miss: the group does not search, and rank 1 (FLYAUTOTUNE=1) keeps that
    # answer instead of asking the group again, alone, on every call
    for r in (r0, r1):
        assert r["ran"] == [0, 0, 0, 0] and r["sources"] == ["default", "memory", "memory", "default"]
        assert r["select"] == "memory" and r["warnings"] == []


@pytest.mark.slow
def test_ranks_compare_the_candidates_they_search_and_compute_them_only_to_search(tmp_path, ranks):
    r0, r1 = spawn(ranks.candidates_scenario, 2, tmp_path)
    # the same number of candidates in another order: one winning index would be two configs; the ranks
    # see the lists differ and both run the default, with one warning naming rank 1 and the remedy
    assert r0["n3"] == r1["n3"] == [0, "default"]
    for r in (r0, r1):
        (warning,) = r["warnings"]
        assert "rank(s) [1] list other candidates (or another order) than rank 0" in warning
        assert "configs= and prune_configs_by=" in warning
    # rank 0 runs the default on a miss: rank 1's space, which raises, is not needed, as outside the block
    assert r0["n4"] == r1["n4"] == [0, "default"]
    # a space that raises on rank 1 raises there, after the group learnt of it; rank 0 runs the default
    assert r1["n5"] == "agreed: configs(...) raised RuntimeError: no space for n=5 on this rank"
    assert r0["n5"] == [0, "default"]
    gathered = {i: ranks.rank_ms(i % 2, i) for i in range(ranks.N)}
    assert r0["n6"] == r1["n6"] == ranks.decide(gathered)


@pytest.mark.slow
def test_a_subgroups_block_inside_the_jobs_block_keeps_both_groups_answers(tmp_path, ranks):
    r0, r1 = spawn(ranks.subgroup_scenario, 2, tmp_path, 3.0)
    assert r0["alone"] != r1["alone"]  # each rank's store holds its own winner
    job, sub = r0["alone"], r1["alone"]  # the job's rank 0 is rank 0; the subgroup's is rank 1
    first, second = r1["steps"]
    # in the subgroup's block rank 1 runs the subgroup's answer; back in the job's block, the job's again,
    # as rank 0 does, and the next step answers every lookup from memory, with no collective of rank 1 alone
    assert first == {"job": [job, "store"], "sub": [sub, "store"], "job_after": [job, "memory"]}
    assert second == {"job": [job, "memory"], "sub": [sub, "memory"], "job_after": [job, "memory"]}
    assert r0["steps"] == [{"job": [job, "store"], "job_after": [job, "memory"]},
                           {"job": [job, "memory"], "job_after": [job, "memory"]}]
    assert r0["warnings"] == r1["warnings"] == []


def test_entering_the_same_groups_block_again_still_drops_a_plan_chosen_outside_since(tmp_path, monkeypatch):
    # entering the block again skips the scan of the memories when nothing changed since: a plan chosen
    # outside the block in between is such a change
    import flyautotune as fat

    monkeypatch.setenv("FLYAUTOTUNE_CACHE_DIR", str(tmp_path))

    @fat.autotune(configs=[fat.Config(B=b) for b in range(3)], key=["n"], default=lambda **_: fat.Config(B=0),
                  plugin_manager=fat.build_plugin_manager(entry_points=False), name="again")
    def launch(x, n, B=None):
        return B

    x = torch.zeros(2)
    with distributed(timeout_s=1):
        pass
    launch(x, n=3)  # chosen alone
    assert launch.last_source == "default"
    with pytest.warns(RuntimeWarning, match="not initialized"):  # no job here: the group's answer is the default
        with distributed(timeout_s=1):
            launch(x, n=3)
            assert launch.last_source == "default"  # looked up again, not answered from memory
            launch(x, n=3)
            assert launch.last_source == "memory"


@pytest.mark.slow
def test_a_rank_outside_the_group_is_told_where_it_enters_the_block(tmp_path, ranks):
    r0, r1 = spawn(ranks.non_member_scenario, 2, tmp_path)
    assert r0 == {"ran": 0}
    assert r1["error"] == ("fat.distributed: this process (rank 1 of the job) is not a member of the group it was "
                           "given; enter a subgroup's block on its members only (where "
                           "torch.distributed.get_rank(group) >= 0)")


@pytest.mark.slow
def test_two_threads_tuning_in_blocks_of_one_group_stay_in_step(tmp_path, ranks):
    r0, r1 = spawn(ranks.threads_scenario, 2, tmp_path, 3.0)
    # each agreement's collectives run in a row: every key runs one config on both ranks (rank 0's winner,
    # or where the threads' orders differ between the ranks, the default), and no collective timed out
    assert r0["ran"] == r1["ran"] and len(r0["ran"]) == 12
    assert set(r0["ran"].values()) <= {0, 2}
    for r in (r0, r1):
        assert not [w for w in r["warnings"] if "could not agree" in w]
        assert all("give each its own group" in w for w in r["warnings"])


@pytest.mark.slow
def test_a_new_job_in_the_same_processes_agrees_afresh(tmp_path, ranks):
    r0, r1 = spawn(ranks.reinit_scenario, 2, tmp_path, 2.0)
    assert r0["first"] == [0, "default"] and r0["first_warnings"] == 1  # the first job's group failed
    # the new job's group is another group: what the first one agreed (or failed) does not count, so the
    # ranks ask it about n=3 together, and it stays in use for n=4
    assert r0["n3"] == r1["n3"] == [0, "default"] and r0["n4"] == r1["n4"] == [0, "default"]
    assert r0["warnings"] == r1["warnings"] == []


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_a_challenger_a_faster_rank_flatters_does_not_beat_the_default(tmp_path, ranks, world):
    reports = spawn(ranks.retime_scenario, world, tmp_path, "flattered")
    assert len(reports) == world
    # first pass: as measured, the challengers timed on the faster ranks look fastest (read against each rank's
    # own default, none does); side by side, on every rank, each is 2% slower than the default: every rank
    # keeps the default, and so does the store
    for r in reports:
        assert (r["selected"], r["ran"], r["source"]) == (0, 0, "search")
        assert r["margin"] == 0.0 and 0 < r["noise"] < 0.01
        assert r["rounds"][:2] == [1, 2]  # every rank re-timed the finalists itself
        assert r["warnings"] == []
    assert reports[0]["stored"] == [{"B": 0, "margin": 0.0, "noise": reports[0]["noise"]}]
    assert all(r["stored"] == [] for r in reports[1:])
    # a challenger that rank 0 never timed in its share was timed there before the rounds
    assert reports[0]["calls"]["1"] >= 3 and "re-timed 3 finalists on this rank" in " ".join(reports[0]["logged"])


@pytest.mark.slow
def test_a_group_timing_with_its_own_do_bench_re_times_too(tmp_path, ranks):
    # the same flattered challengers, timed by the tuner's do_bench (bare numbers, no spread): every rank
    # calls it again for the finalists, side by side, and the default stands
    reports = spawn(ranks.retime_scenario, 2, tmp_path, "flattered", "do_bench")
    for r in reports:
        assert (r["selected"], r["ran"], r["source"]) == (0, 0, "search")
        assert r["margin"] == 0.0 and r["noise"] > 0 and r["rounds"][:2] == [1, 2]
        assert r["warnings"] == []
    assert reports[0]["stored"] == [{"B": 0, "margin": 0.0, "noise": reports[0]["noise"]}]
    # the challenger that rank 1's faster device flattered (B=1) was timed again on rank 0
    assert reports[0]["calls"]["1"] >= 3


@pytest.mark.slow
def test_a_group_does_not_average_away_the_least_band_of_a_bare_number(tmp_path, ranks):
    # alone, a do_bench's bare numbers need a gain beyond 0.5 % to replace the default; two ranks' bands averaged
    # (sqrt(sum b^2)/n) came to 0.35 %, and B=1, 0.4 % faster on every rank, won in the group where it lost alone
    for r in spawn(ranks.retime_scenario, 2, tmp_path, "slight", "do_bench"):
        assert (r["selected"], r["ran"], r["source"]) == (0, 0, "search")
        assert r["margin"] == 0.0 and r["noise"] == pytest.approx(0.005)


@pytest.mark.slow
def test_a_challenger_faster_on_every_rank_wins_with_its_margin(tmp_path, ranks):
    r0, r1 = spawn(ranks.retime_scenario, 2, tmp_path, "faster")
    for r in (r0, r1):
        assert (r["selected"], r["ran"], r["source"]) == (5, 5, "search")
        assert r["margin"] == pytest.approx(0.1) and 0 < r["noise"] < 0.01
        assert r["warnings"] == []
    assert r0["stored"] == [{"B": 5, "margin": r0["margin"], "noise": r0["noise"]}] and r1["stored"] == []
    said = [m for m in r0["logged"] if "the group's winner" in m]
    assert said and "10.00% faster than the default" in said[0]


@pytest.mark.slow
def test_a_finalist_that_fails_when_one_rank_re_times_it_wins_nowhere(tmp_path, ranks):
    r0, r1 = spawn(ranks.retime_scenario, 2, tmp_path, "flaky")
    # B=3 is the fastest, but its re-run failed on rank 1: it cannot win anywhere; B=5 wins on both ranks
    for r in (r0, r1):
        assert (r["selected"], r["ran"], r["source"]) == (5, 5, "search")
        assert r["margin"] == pytest.approx(0.1) and r["warnings"] == [] and r["took"] < 15
    assert r0["stored"] == [{"B": 5, "margin": r0["margin"], "noise": r0["noise"]}]
    (said,) = [m for m in r1["logged"] if "B=3 lost its device" in m]
    assert "failed when re-timed" in said


@pytest.mark.slow
def test_agreement_with_re_timing_is_one_decision_whatever_a_rank_reports(tmp_path, ranks):
    reports = spawn(ranks.retime_agree_scenario, 2, tmp_path)
    gathered = {i: ranks.rank_ms(i % 2, i) for i in range(ranks.N)}
    for r in reports:
        assert r["warnings"] == []
        # a rank whose re-timing raised still joined the gather: no challenger wins, the default stands
        assert (r["raises"]["winner"], r["raises"]["margin"], r["raises"]["failed"]) == (0, 0.0, None)
        # the default failed on rank 1: the fastest of the candidates that did not fail, as alone
        finalists = r["default fails"]["finalists"]
        rest = {i: ms for i, ms in gathered.items() if i not in finalists}
        assert r["default fails"]["winner"] == ranks.decide(rest) and r["default fails"]["margin"] is None
        # every rank finds the last finalist 5% faster: it wins, with the mean gain and the combined band
        wins = r["wins"]
        assert wins["winner"] == wins["finalists"][-1] != ranks.decide(gathered)
        assert wins["margin"] == pytest.approx(0.05) and wins["noise"] == pytest.approx(0.01 * 2 ** 0.5 / 2)
    assert reports[0] == reports[1]


def test_the_groups_verdict_takes_the_mean_gain_against_the_combined_band():
    from flyautotune.tuning.search import group_verdict

    # 3 beats the default by 4% on both ranks, 5 by 1% inside the band: 3 wins, with the mean gain and
    # sqrt(0.01^2 + 0.01^2) / 2 as its band
    assert group_verdict([0, 3, 5], [{0: (0, 0), 3: (0.03, 0.01), 5: (0.01, 0.01)},
                                     {0: (0, 0), 3: (0.05, 0.01), 5: (0.01, 0.02)}]) == \
        (3, pytest.approx(0.04), pytest.approx(0.01 * 2 ** 0.5 / 2))
    # a large gain on one rank does not outvote a rank where the challenger is slower beyond its band
    assert group_verdict([0, 3], [{0: (0, 0), 3: (0.20, 0.01)}, {0: (0, 0), 3: (-0.03, 0.01)}]) == \
        (0, 0.0, pytest.approx(0.01 * 2 ** 0.5 / 2))
    # a finalist missing on a rank failed there: it cannot win, and the band is the next challenger's
    assert group_verdict([0, 3, 5], [{0: (0, 0), 5: (0.001, 0.01)}, {0: (0, 0), 3: (0.5, 0.01), 5: (0.0, 0.01)}]) \
        == (0, 0.0, pytest.approx(0.01 * 2 ** 0.5 / 2))
    # the default failed on a rank: no verdict (the caller takes the fastest of the rest)
    assert group_verdict([0, 3], [{3: (0.5, 0.01)}, {0: (0, 0), 3: (0.5, 0.01)}]) == (None, None, None)


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 7])
def test_a_default_that_fails_when_one_rank_re_times_it_leaves_the_challengers_in(tmp_path, ranks, n):
    # the default's re-run fails on rank 1; the challengers stood on every rank: they stay in, and the fastest
    # gathered timing, each rank's read against its own first timing of the default, wins everywhere (B=2, not
    # B=1, which only rank 1's faster device made look fastest), not the fastest of those never re-timed (B=5 of
    # 7), nor "every candidate failed" (of 3)
    r0, r1 = spawn(ranks.retime_scenario, 2, tmp_path, "default flaky", "hook", n)
    for r in (r0, r1):
        assert (r["selected"], r["ran"], r["source"]) == (2, 2, "search")
        assert r["margin"] is None and r["warnings"] == []
    assert r0["stored"] == [{"B": 2, "margin": None, "noise": None}] and r1["stored"] == []


@pytest.mark.slow
def test_the_fastest_challenger_a_slower_rank_timed_is_a_finalist_and_wins(tmp_path, ranks):
    r0, r1 = spawn(ranks.retime_scenario, 2, tmp_path, "hidden")
    # as measured, B=5 (rank 1's share, on its 10% slower device) looks slower than B=2 and B=4 (rank 0's), and
    # the default; read against rank 1's own timing of the default, it is the fastest: a finalist, and the winner
    for r in (r0, r1):
        assert (r["selected"], r["ran"], r["source"]) == (5, 5, "search")
        assert r["margin"] == pytest.approx(0.05) and 0 < r["noise"] < 0.01
        assert r["warnings"] == []
    assert r0["stored"] == [{"B": 5, "margin": r0["margin"], "noise": r0["noise"]}] and r1["stored"] == []
    assert r0["calls"]["5"] >= 3  # rank 0 re-timed it
    for r in (r0, r1):
        (said,) = [m for m in r["logged"] if "first-pass timings in rank 0's units" in m]
        assert "rank 1 x0.9091" in said


@pytest.mark.slow
def test_a_groups_timings_are_read_against_each_ranks_own_timing_of_the_reference(tmp_path, ranks):
    r0, r1 = spawn(ranks.reference_agree_scenario, 2, tmp_path)
    # rank 1's device is 20% slower: against its own timing of the reference (index 0, which it times first),
    # its B=1 is the fastest, in rank 0's ms; as measured, B=2 (rank 0's) looked faster
    for r in (r0, r1):
        relative = r["relative"]
        assert relative["winner"] == 1 and relative["failed"] is None
        (seen,) = relative["seen"]
        assert seen["0"] == 1.0 and seen["1"] == pytest.approx(0.9) and seen["2"] == 0.95
        assert not [m for m in relative["logged"] if "could not time the reference" in m]
    assert r0["relative"]["timed"] == [[0, 2, 4, 6]] and r1["relative"]["timed"] == [[0, 1, 3, 5]]
    # a rank whose timing of the reference failed keeps its timings as measured, and one log line says so
    for r in (r0, r1):
        failed = r["reference fails on rank 1"]
        assert failed["winner"] == 2
        (seen,) = failed["seen"]
        assert seen["1"] == pytest.approx(0.9 * 1.2)
        (said,) = [m for m in failed["logged"] if "could not time the reference" in m]
        assert "rank(s) [1]" in said and "compared as measured" in said
    # without a reference each candidate is timed by one rank, and compared as measured
    for r in (r0, r1):
        measured = r["as measured"]
        assert measured["winner"] == 2 and measured["seen"][0]["1"] == pytest.approx(0.9 * 1.2)
        assert measured["logged"] == []
    assert r1["as measured"]["timed"] == [[1, 3, 5]]
    assert r0["warnings"] == r1["warnings"] == []


@pytest.mark.slow
def test_a_groups_search_without_a_default_takes_the_fastest_on_a_device_of_rank_0s_speed(tmp_path, ranks):
    r0, r1 = spawn(ranks.slower_rank_tuner_scenario, 2, tmp_path)
    # no default, no re-timing: the fastest gathered timing wins, each rank's read against its own timing of the
    # first config (B=0, which every rank times first); B=1, on rank 1's 20% slower device, is the fastest
    assert (r0["selected"], r0["source"]) == (r1["selected"], r1["source"]) == (1, "search")
    assert r0["stored"] == [1] and r1["stored"] == []
    assert r0["calls"] == [0, 2, 4, 6] and r1["calls"] == [0, 1, 3, 5]
    assert r0["warnings"] == r1["warnings"] == []


def test_where_rank_0s_timing_of_the_reference_failed_the_next_ranks_sets_the_units(caplog):
    import logging

    from flyautotune.scale.distributed import _relative

    nan = float("nan")
    # 3 ranks, 6 candidates; rank 0's timing of the reference (index 0) failed: rank 1's sets the units, rank 2's
    # timings (its device 2x slower) are read against its own, rank 0's stay as measured; one line says so
    rows = [[nan, nan, nan, 1.3, nan, nan], [1.0, 0.9, nan, nan, 1.1, nan], [2.0, nan, 1.6, nan, nan, 2.4]]
    gathered = {1: 0.9, 2: 1.6, 3: 1.3, 4: 1.1, 5: 2.4}
    with caplog.at_level(logging.INFO, logger="flyautotune.scale"):
        got = _relative("k", gathered, rows, 0, 3)
    assert got == {1: 0.9, 2: pytest.approx(0.8), 3: 1.3, 4: 1.1, 5: pytest.approx(1.2)}
    (warned,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "rank(s) [0] could not time the reference (candidate 0)" in warned and "in rank 1's units" in warned
    # no rank's timing of it stood: every timing as measured
    caplog.clear()
    rows = [[nan, nan], [nan, 1.0]]
    with caplog.at_level(logging.INFO, logger="flyautotune.scale"):
        assert _relative("k", {1: 1.0}, rows, 0, 2) == {1: 1.0}
    (warned,) = [r.getMessage() for r in caplog.records]
    assert "no rank could time the reference" in warned


@pytest.mark.slow
def test_a_groups_search_keeps_to_max_search_s_on_every_rank(tmp_path, ranks):
    r0, r1 = spawn(ranks.budget_scenario, 2, tmp_path)
    for r in (r0, r1):
        assert r["warnings"] == []
        # the default, then the first challenger of the rank's share, which outlasts the budget: the rest of
        # the share is skipped (failed on every rank alike), and the finalists that the other rank timed are
        # timed here once (fewer timings than a round), with no re-timing round past the budget
        later = r["spent later"]
        assert (later["selected"], later["source"]) == (0, "search") and later["rounds"] == []
        # the default's first timing spends the budget: it runs, and nothing else does
        at_once = r["spent at once"]
        assert (at_once["selected"], at_once["source"], at_once["calls"], at_once["rounds"]) == (0, "search", [0], [])
    assert r0["spent later"]["calls"] == [0, 2, 1] and r1["spent later"]["calls"] == [0, 1, 2]


@pytest.mark.slow
def test_a_groups_search_times_a_config_listed_twice_once(tmp_path, ranks):
    r0, r1 = spawn(ranks.duplicates_scenario, 2, tmp_path)
    # the space lists B=0 (the default) three times and B=2 twice: each is one candidate, so no copy of the
    # default takes a finalist's place (its warm timing would look faster than the default's cold first one),
    # and B=1, 5% faster than the default on every rank, is re-timed and wins
    for r in (r0, r1):
        assert r["warnings"] == []
        assert (r["selected"], r["source"]) == (1, "search") and r["margin"] == pytest.approx(0.05)
        assert r["finalists"] and all(f == [0, 1, 2] for f in r["finalists"])
    # each distinct config's first timing, by one rank (the default, the reference, by both)
    assert r0["calls"][:2] == [0, 2] and r1["calls"][:3] == [0, 1, 3]


@pytest.mark.parametrize("reference, error, says", [
    ("0", TypeError, "expected the index of a candidate (an int >= 0), or None"),
    (1.5, TypeError, "expected the index of a candidate (an int >= 0), or None"),
    (True, TypeError, "expected the index of a candidate (an int >= 0), or None"),
    (-1, TypeError, "expected the index of a candidate (an int >= 0), or None"),
    (3, ValueError, "expected the index of a candidate, 0 to 2 (n_candidates=3), or None"),
])
def test_agree_names_a_reference_that_is_no_candidates_index(reference, error, says):
    from flyautotune.scale.distributed import agree

    with pytest.raises(error) as info:
        agree(key="k", time_some=lambda ix: {}, decide=min, stored=None, n_candidates=3, reference=reference)
    assert str(info.value) == f"agree: reference={reference!r}: {says}"
