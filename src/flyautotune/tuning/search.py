"""A search: time every candidate, re-time the best few against the default,
keep the default unless a challenger beats it by more than the measured noise,
and reject candidates whose outputs disagree with the reference's."""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from typing import Any, Optional

import attrs

from .. import events, streams
from ..timing import events as timing_events
from ..config import Config
from ..devices import explain_interpreter_error
from ..measurement import Measurement
from ..store.jsontext import canonical_config_json
from . import resume, verify
from .background import short_switch_interval, warm_in_background
from .binding import Call
from .callables import named_for
from .candidate import Candidate, config_repr
from .plan import Plan, run_plan, zero
from .precompile import Precompiler

__all__ = ["AutotuneError", "Candidate", "Search", "config_repr"]

log = logging.getLogger("flyautotune")

#: Challengers re-timed against the default after the first pass.
FINALISTS = 2
#: Interleaved re-timing rounds, and the most a close call may take. A challenger wins only on at least
#: ``ROUNDS`` rounds paired with the default's: fewer say nothing of how much two timings of the same
#: config disagree from one moment to the next.
ROUNDS = 3
MAX_ROUNDS = 6
#: One-sided 99th percentiles of Student's t, by degrees of freedom (the paired rounds kept, less one): a
#: challenger's gain must exceed this many standard errors of the per-round ratios. With timings that wander
#: by 0.1-2 %, a tie then replaced the default in 0-6 % of searches, where twice the standard error let
#: 17-35 % through (``bench/decision.py``).
T_99 = {1: 31.821, 2: 6.965, 3: 4.541, 4: 3.747, 5: 3.365, 6: 3.143, 7: 2.998, 8: 2.896, 9: 2.821}
#: A decision whose noise band is this narrow needs no more rounds.
SETTLED_NOISE = 0.005
#: The narrowest band against a timing that reports no spread (a bare number, as a ``do_bench=`` returns):
#: rounds that happen to agree closely must not make any gain at all a win.
UNKNOWN_SPREAD_NOISE = SETTLED_NOISE
#: A round whose challenger/default ratio is this many times off the others' median was disturbed.
HICCUP = 1.5
#: A candidate whose first timing exceeds this multiple of the best so far is cut short.
CUTOFF = 3.0
#: The first pass ranks every candidate with this share of ``rep``; the finalists are re-timed with all
#: of it, round after round.
FIRST_PASS_SHARE = 0.5
#: ... but never fewer timed replays (launches) than this.
MIN_FIRST_PASS_REP = 5
#: A candidate whose build ``precompile`` names like an earlier one's is not timed; its row's error says
#: ``skipped: same build as <config> ...``.
SAME_BUILD = "same build as"
#: The error of a candidate not started because the search's time budget was spent.
BUDGET_SPENT = "skipped: the search budget (max_search_s) ran out"


def first_pass_rep(rep: int) -> int:
    """Replays (or timed launches) of a candidate's first-pass timing for a tuner's ``rep``."""
    return min(rep, max(MIN_FIRST_PASS_REP, int(rep * FIRST_PASS_SHARE)))


class AutotuneError(RuntimeError):
    """Every candidate of a search failed; the message lists each failure."""


class Search:
    """The search of one key; ``run()`` returns ``(winner, rows, margin, noise)``."""

    def __init__(self, tuner: Any, call: Call, target: Any, snapshot: tuple, key: str, configs: list,
                 default: Optional[Config], known: dict, stream: Any, store: Any = None,
                 warming: Optional[threading.Thread] = None) -> None:
        self.t = tuner
        self.call = call
        self.target = target
        self.snapshot = snapshot
        self.key = key
        self.stream = stream
        self.given_stream = stream if tuner.sig.has_stream and call.named.get("stream") is not None else None
        self.known = known
        self.store = store if callable(getattr(store, "put_timing", None)) else None
        failures = store.get_failures(tuner.name, key) if callable(getattr(store, "get_failures", None)) else {}
        self.crashed = {cj for cj, err in failures.items() if resume.crashed(str(err))}
        self._running: dict = {}  # config JSON -> the crash-marker row recorded for it and not yet replaced
        self.precompiler: Optional[Precompiler] = None
        self.built: dict = {}  # what precompile named a build -> the first candidate of that build (the one run)
        self.t0 = time.perf_counter()
        order = ordered(configs, default)
        # the default first: the reference and the bar (always timed: it is what we protect)
        self.cands = [Candidate(c, default is not None and i == 0) for i, c in enumerate(order)]
        self.default = self.cands[0] if default is not None else None
        saved = []
        for n in tuner.restore_value:
            t = call.named.get(n)
            if t is None:
                continue
            if not callable(getattr(t, "clone", None)):
                raise TypeError(f"restore_value names {n!r}, which is {t!r} ({type(t).__name__}) in this call; "
                                f"restore_value takes tensor arguments")
            if not verify.overlaps_itself(t):  # a broadcast view is never written
                saved.append(t)
        self._saved = [(t, t.clone()) for t in saved]
        self.setup = self._setup if (self._saved or tuner.reset_to_zero) else None
        self.rotations: list = []
        self._reference: Optional[list] = None
        self._snapshot: Optional[verify.Snapshot] = None
        self._written: list = []
        self._checkable = all(getattr(t.device, "type", "") != "meta" for _, t in call.tensors)
        self._poison = True
        # what check= receives (named_for: the call's arguments, not the knobs), read once for every candidate
        self._check_named = named_for(tuner, tuner.check, call) if callable(tuner.check) else None
        self.rounds = 0  # re-timing rounds run
        self.finalists: list = []
        self._probed = False  # a group rank's probe ran (its share and its re-timing run one)
        self._warming = warming  # a clock warm-up the caller started (joined before the first timing)

    # -- plumbing ---------------------------------------------------------------------
    def _setup(self) -> None:
        for t, s in self._saved:
            t.copy_(s)
        zero(self.t.reset_to_zero, self.call)

    def _plan(self, config: Config) -> Plan:
        return Plan(config, self.target, "search", self.snapshot, self.t._pm)

    def _runner(self, config: Config, call: Call):
        plan = self._plan(config)
        # A stream the caller gave is passed on; an omitted one stays omitted, so the launch uses the
        # current stream, which the timing engine makes the launch stream, or its capture stream.
        fn, sig, stream = self.t.fn, self.t.sig, self.given_stream
        return lambda: run_plan(fn, sig, plan, call, stream)

    def _rotations(self) -> list:
        """Copies of the call's tensors, so timing rotates over inputs that are cold in the caches. The
        tuner's ``outputs`` are not copied: every timed launch writes the caller's buffer."""
        if self.setup is not None or not self.call.tensors or not rotates_on(self.call.device):
            return []
        from .. import timing

        # A broadcast view is kept as it is: a clone would be dense, another memory pattern than the call's.
        rotated = [(k, t) for k, t in self.call.tensors if k not in self.t.outputs and not verify.overlaps_itself(t)]
        if not rotated:
            return []
        per_set = sum(t.numel() * t.element_size() for _, t in rotated)
        # At least two sets: replaying one set leaves the tail of its inputs warm in the cache for the next launch.
        n = max(2, timing.rotation_count(self.call.device, per_set))
        copies = [self.call]
        try:
            for _ in range(1, n):
                copies.append(self.t.sig.replaced(self.call, {k: _copy(v) for k, v in rotated}))
        except _out_of_memory() as exc:
            # a copy of a huge input may not fit: time over the copies that did, rather than fail the search
            log.warning("%s: %d of %d input copies for cold-cache timing fit in memory (%s: %s); timing over %s",
                        self.t.name, len(copies), n, type(exc).__name__, exc,
                        f"{len(copies)} copies" if len(copies) > 1 else "the call's own inputs")
        return copies if len(copies) > 1 else []

    def _emit(self, event: str, **fields: Any) -> None:
        events.emit(self.t.pm, event, tuner=self.t.name, key=self.key, **fields)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over_budget(self) -> bool:
        return self.t.max_search_s is not None and self.elapsed() > self.t.max_search_s

    # -- measuring --------------------------------------------------------------------
    def measure(self, cand: Candidate, cutoff_ms: Optional[float] = None, result: Optional[list] = None,
                rep: Optional[int] = None) -> Measurement:
        fn = self._runner(cand.config, self.call)
        if result is not None:  # keep what the launch on the original inputs returned, for the output check
            run = fn

            def fn() -> Any:
                out = run()
                result[:] = [out]
                return out

        rotations = [fn] + [self._runner(cand.config, c) for c in self.rotations[1:]] if self.rotations else []
        rep = self.t.rep if rep is None else rep
        with streams.on_stream(self.stream):
            if self.t.do_bench is not None:
                given = {"warmup": self.t.warmup, "rep": rep}  # only those the user's do_bench takes
                raw = self.t.do_bench(fn, setup=self.setup, **{k: given[k] for k in self.t._bench_keywords})
                m = Measurement.coerce(raw, who=f"do_bench for {cand.config}")
                return m if m.method else attrs.evolve(m, method="do_bench")
            raw = self.t.pm.hook.flyautotune_benchmark(
                fn=fn, setup=self.setup, target=self.target, stream=self.stream, warmup=self.t.warmup,
                rep=rep, rotations=rotations, cutoff_ms=cutoff_ms,
            )
        if raw is None:
            raise LookupError(f"no flyautotune_benchmark plugin times {self.target.backend} targets")
        return Measurement.coerce(raw, who=f"the {self.target.backend} benchmark for {cand.config}")

    def prepare_check(self) -> None:
        """Before a checked candidate runs: pristine inputs, and written outputs poisoned."""
        if self.t.check is False or not self.call.tensors or not self._checkable:
            return
        import torch

        with torch.no_grad():
            if self._snapshot is None:
                try:
                    self._snapshot = verify.Snapshot(self.call.tensors)
                except (NotImplementedError, RuntimeError) as exc:  # e.g. meta tensors: nothing to compare
                    log.info("%s: outputs cannot be checked on these tensors (%s)", self.t.name, exc)
                    self._checkable = False
                    return
            self._snapshot.restore()
            if self._reference is not None and self.t.check is True and self._poison:
                verify.poison(self.call.tensors, self._written, self.t.restore_value)

    def check(self, cand: Candidate, result: Any) -> Optional[str]:
        """After ``cand`` ran (timed): why its outputs are wrong, or None. The first checked config is the reference."""
        check = self.t.check
        if check is False:
            return None
        if callable(check):
            try:
                ok = check(result, **self._check_named)
            except Exception as exc:
                return f"check(...) raised {type(exc).__name__}: {exc}"
            return "check(...) returned False" if ok is False else None
        if not self.call.tensors or not self._checkable:
            return None
        got = verify.outputs(result, self.call.tensors, self._written)
        if self._reference is None:
            self._written = self._snapshot.changed()
            self._reference = verify.clone(verify.outputs(result, self.call.tensors, self._written))
            return None
        problem = verify.compare(self._reference, got, self.t.tolerance)
        if problem is not None:
            problem += self._poisoned_hint(got)
        return problem

    def _poisoned_hint(self, got: list) -> str:
        """Why a candidate may have failed the check: it added into an output the check filled with NaN
        (a split-K kernel's atomics, ``+=``), which a tuner without ``reset_to_zero``/``restore_value`` for it
        does not clear."""
        if self.t.check is not True or not self._poison:
            return ""
        kept = set(self.t.restore_value) | set(self.t.reset_to_zero)
        for (label, ref), (_, out) in zip(self._reference, got):
            name = label[len("argument "):] if label.startswith("argument ") else None
            if name is None or name not in self._written or name in kept or not out.is_floating_point():
                continue
            if out.shape == ref.shape and bool((out.isnan() & ~ref.isnan()).any()):
                return (f" (it was filled with NaN before this candidate ran, and NaN came out where the reference "
                        f"has numbers: if the launch adds into {name}, with atomics or +=, declare "
                        f"reset_to_zero=[{name!r}] (or restore_value=[{name!r}]) so every run starts from the "
                        f"caller's values)")
        return ""

    def _cjson(self, cand: Candidate) -> Optional[str]:
        # the store's own identity of a candidate: its timings and crash markers are keyed by it
        return canonical_config_json(cand.config.to_dict()) if cand.config.pre_hook is None else None

    def _record(self, cand: Candidate, running: bool = False) -> None:
        """Persist ``cand``'s timing now (or, before it runs, the crash marker), so a crash keeps it."""
        if self.store is None or cand.config.pre_hook is not None:
            return
        row = {"config": cand.config.to_dict(), "ms": None if running else cand.ms,
               "error": resume.running_marker() if running else cand.error}
        if row["ms"] is None and row["error"] is None:
            return
        cj = self._cjson(cand)
        if running:
            self._running[cj] = row  # kept first: an interrupt inside the write may still commit the marker
        try:
            stored = self.store.put_timing(self.t.name, self.key, row)
        except Exception as exc:  # persistence is a convenience: never fail the search on it
            log.debug("%s: could not record a timing: %s", self.t.name, exc)
            return
        if (running and stored is False) or (not running and stored is not False):
            self._running.pop(cj, None)  # a marker that was not written, or one the result replaced

    def _take_back_markers(self) -> None:
        """The search stops by an exception (Ctrl-C, ``SystemExit``, an error), not by the process dying: no
        candidate it was running crashed it, so their crash markers go, and nothing is recorded as failed."""
        running, self._running = self._running, {}
        if self.store is None:
            return
        drop = getattr(self.store, "drop_timing", None)
        for row in running.values():
            try:
                if callable(drop):  # only the marker: a row another process wrote meanwhile stays
                    drop(self.t.name, self.key, row["config"], row["error"])
                else:  # a store that cannot delete a row: a failure the next search retries, not a crash
                    self.store.put_timing(self.t.name, self.key, dict(row, error=resume.INTERRUPTED))
            except Exception as exc:
                log.debug("%s: could not take back a crash marker: %s", self.t.name, exc)

    def _prior(self, cand: Candidate) -> Optional[float]:
        """The stored time of an earlier search for ``cand`` (never for the default: it is always re-timed)."""
        if cand.is_default or cand.config.pre_hook is not None:
            return None
        prior = self.known.get(self._cjson(cand))
        return prior if isinstance(prior, (int, float)) and not isinstance(prior, bool) and prior > 0 else None

    def start_precompile(self) -> None:
        if self.t.precompile is None:
            return
        self.precompiler = Precompiler(self.t.name, self.t.precompile,
                                       named_for(self.t, self.t.precompile, self.call))
        self.precompiler.start((c, self._plan(c.config)) for c in self.cands
                               if self._prior(c) is None and self._cjson(c) not in self.crashed)

    def warm_device(self) -> None:
        """Bring the device's clocks up in the background while the candidates compile and the probe
        runs (unless the caller already started that); :meth:`settle` waits for it before the first
        timing, which would otherwise warm the device itself after those."""
        if self._warming is None and self.precompiler is not None and self.precompiler.pool is not None:
            self._warming = warm_in_background(self.t, self.call.device)

    def settle(self) -> None:
        """Wait for the background warm-up: nothing is timed while it runs."""
        if self._warming is not None:
            self._warming.join()
            self._warming = None

    def wait_compiled(self, cand: Candidate) -> Optional[Candidate]:
        """Wait for ``cand``'s build; returns the candidate timed earlier whose build ``precompile``
        named alike (the same code: timing it again would only add noise), else None."""
        built = self.precompiler.wait(cand) if self.precompiler is not None else None
        if built is None:
            return None
        first = self.built.setdefault(built, cand)
        return None if first is cand else first

    def first_pass(self) -> None:
        total = len(self.cands)
        best: Optional[float] = None
        spent = 0
        for i, cand in enumerate(self.cands, 1):
            prior = self._prior(cand)
            record = False  # a candidate not started is reported (a progress display counts it), not recorded
            if i > 1 and self.over_budget():
                cand.error = BUDGET_SPENT
                spent += 1
            elif self._cjson(cand) in self.crashed:
                cand.error = resume.skipped(self.t.name)
                log.warning("%s: candidate %d/%d %s %s", self.t.name, i, total, cand.config, cand.error)
            elif prior is None and (twin := self.wait_compiled(cand)) is not None:  # the same code, timed already
                record = True
                cand.error = f"skipped: {SAME_BUILD} {twin.config} (precompile named both builds alike)"
                log.info("%s: candidate %d/%d %s %s", self.t.name, i, total, cand.config, cand.error)
            else:
                record = True
                try:
                    self._first_timing(cand, prior, best)
                    best = cand.ms if best is None else min(best, cand.ms)
                    log.info("%s: candidate %d/%d %s: %.4f ms (%s)%s", self.t.name, i, total, cand.config, cand.ms,
                             cand.measurement.method or "timed", " (stored timing)" if cand.reused else "")
                except Exception as exc:  # a failing candidate is reported and skipped
                    cand.error = str(exc) if isinstance(exc, _Rejected) else f"{type(exc).__name__}: {exc}"
                    cand.exc = exc
                    log.warning("%s: candidate %d/%d %s failed: %s", self.t.name, i, total, cand.config, cand.error)
            if record and not cand.reused:
                self._record(cand)
            self._emit("candidate", index=i, total=total, config=config_repr(cand.config), ms=cand.ms,
                       error=cand.error, reused=cand.reused,
                       **({} if cand.measurement is None else {"spread": cand.noise(),
                                                               "method": cand.measurement.method}))
        if spent:
            log.info("%s: %d of %d candidates %s (max_search_s=%g)", self.t.name, spent, total, BUDGET_SPENT,
                     self.t.max_search_s)

    def _first_timing(self, cand: Candidate, prior: Optional[float], best: Optional[float]) -> None:
        """``cand``'s first-pass sample: its stored time, or a timing (cut short past ``CUTOFF`` × ``best``)
        whose outputs pass the check; raises what the run or the check refused."""
        if prior is not None:
            cand.measurement, cand.reused = Measurement(prior), True
        else:
            self._record(cand, running=True)
            self.prepare_check()
            held: list = []
            cand.measurement = self.measure(cand, cutoff_ms=None if best is None else best * CUTOFF, result=held,
                                            rep=first_pass_rep(self.t.rep))
            problem = self.check(cand, held[-1] if held else None)
            if problem is not None:
                cand.measurement = None
                raise _Rejected(f"rejected: {problem}")
        cand.samples.append(cand.measurement.ms)

    def rerank(self) -> None:
        """Re-time the best few and the default in interleaved rounds (with the benchmark hook or the
        tuner's own ``do_bench``, called once per finalist a round).

        Each round times every finalist once, back to back, so a challenger's time and the
        default's from the same round share the device's state (clocks, temperature, what else
        runs): the decision compares them in pairs. Rounds go on, up to ``MAX_ROUNDS``, while the
        best challenger's gain is inside its noise band and the band is wider than
        ``SETTLED_NOISE``."""
        if self.default is None or self.default.ms is None:
            return
        rivals = best_challengers((c, c.ms) for c in self.cands
                                  if c.ms is not None and not c.is_default and not c.reused)
        if rivals:
            self.retime([self.default] + rivals)

    def retime(self, finalists: list) -> list:
        """Time ``finalists`` (the default first, each timed once already) again in interleaved rounds, as
        :meth:`rerank` describes; returns those still standing (a finalist that fails a round drops out, its
        ``error`` says why). :attr:`rounds` counts the rounds run."""
        for r in range(MAX_ROUNDS):
            if self.over_budget() or (r >= ROUNDS and self._settled(finalists)):
                break
            order = finalists[r % len(finalists):] + finalists[:r % len(finalists)]
            self._emit("retime", round=r + 1, most=MAX_ROUNDS, finalists=[config_repr(c.config) for c in order])
            for cand in order:
                try:
                    cand.measurement = self._retimed(cand)  # all of rep: its spread is the noise floor
                    cand.samples.append(cand.measurement.ms)
                except Exception as exc:  # flaky on a re-run: it cannot be trusted to win
                    cand.error = f"failed when re-timed: {type(exc).__name__}: {exc}"
                    log.warning("%s: finalist %s %s", self.t.name, cand.config, cand.error)
                    cand.samples.clear()
                    finalists = [c for c in finalists if c is not cand]
            if self.default not in finalists or len(finalists) < 2:
                break
            self.rounds = r + 1
        self.finalists = finalists
        return finalists

    def _retimed(self, cand: Candidate) -> Measurement:
        """One round's timing of ``cand``; the default gets a second try where the first raised: a failure of
        what runs without tuning would hand the decision to the challengers, so one hiccup must not."""
        try:
            return self.measure(cand)
        except Exception as exc:
            if cand is not self.default:
                raise
            log.warning("%s: the default %s failed when re-timed (%s: %s); timing it once more", self.t.name,
                        cand.config, type(exc).__name__, exc)
            return self.measure(cand)

    def _settled(self, finalists: list) -> bool:
        verdicts = [compare(c, self.default) for c in finalists if c is not self.default]
        gain, noise = max(verdicts, key=lambda v: v[0] - v[1])
        return noise <= SETTLED_NOISE or abs(gain) > noise

    def decide(self) -> tuple:
        """``(winner, margin, noise)``: the default unless a challenger beats it by more than the noise.

        Once the finalists were re-timed, only those that stood compete, each compared with the default
        round by round (:func:`compare`)."""
        ok = [c for c in self.cands if c.ms is not None and c.error is None]
        if not ok:
            return None, None, None
        d = self.default
        if d is None or d.ms is None or d.error is not None:
            return min(ok, key=lambda c: c.ms), None, None
        # once the finalists were re-timed, only those that stood may win (a challenger never re-timed has only its
        # first timing, taken at another moment than the default's), even where every round failed them
        rivals = [c for c in ok if c is not d and (not self.finalists or c in self.finalists or c.reused)]
        return verdict(d, [(c, *compare(c, d)) for c in sorted(rivals, key=lambda c: c.ms)])

    def probe(self) -> None:
        """Run the first config untimed on pristine inputs: its outputs are the reference.

        Up to two more runs decide how candidates are checked: a second run without a restore
        shows whether the launch is idempotent (if not, outputs after timing cannot be compared, and
        checks are off for this search); a run over poisoned outputs shows whether the launch reads
        them (if so, they are restored, not poisoned, before each candidate). When the launch writes
        none of the ``restore_value`` tensors (and nothing is zeroed), restoring them is a no-op, so
        the reps need no setup and are timed as graph replays over rotated inputs.
        """
        first = next((c for c in self.cands if self._prior(c) is None and self._cjson(c) not in self.crashed), None)
        if not self.call.tensors or not self._checkable or first is None:
            return
        import torch

        run = self._runner(first.config, self.call)
        tensors = self.call.tensors
        self.wait_compiled(first)
        self._record(first, running=True)

        def once() -> list:
            with streams.on_stream(self.stream):
                if self.setup is not None:
                    self.setup()  # restored and zeroed as every rep is
                result = run()
            return verify.clone(verify.outputs(result, tensors, self._written))

        try:
            with torch.no_grad():
                self._snapshot = verify.Snapshot(tensors)
            with streams.on_stream(self.stream):
                if self.setup is not None:
                    self.setup()
                result = run()
            with torch.no_grad():
                self._written = self._snapshot.changed()
                reference = verify.clone(verify.outputs(result, tensors, self._written))
                if self.t.check is True and self._written:
                    if verify.compare(reference, once(), None) is not None:
                        self._checkable = False  # a second run changes the outputs: nothing to compare after reps
                        log.info("%s: the launch is not idempotent (declare restore_value= to check outputs); "
                                 "candidates are not compared", self.t.name)
                    else:
                        self._snapshot.restore()
                        verify.poison(tensors, self._written, self.t.restore_value)
                        if verify.compare(reference, once(), None) is not None:
                            self._poison = False  # the launch reads its outputs: restore them instead
                self._reference = reference if self.t.check is True and self._checkable else None
                self._snapshot.restore()
        except Exception as exc:  # the first pass reports this candidate's failure; the next one is the reference
            log.debug("%s: probe run of %s failed: %s", self.t.name, first.config, exc)
            self._reference, self._written = None, []
            return
        if self.setup is not None and not self.t.reset_to_zero and not set(self._written) & set(self.t.restore_value):
            self.setup = None

    def run(self) -> tuple:
        n = len(self.cands)
        self._emit("search_start", candidates=n)
        log.info("%s: searching %d configs on %s/%s", self.t.name, n, self.target.backend, self.target.arch)
        try:
            with short_switch_interval():
                self.start_precompile()
                self.warm_device()
                self.probe()
                self.rotations = self._rotations()
                self.settle()
                self.first_pass()
                self.rerank()
        except BaseException:
            self._take_back_markers()  # before the exception goes on: the process is not dying
            raise
        finally:
            self._finish()
        winner, margin, noise = self.decide()
        rows = [c.row() for c in self.cands]
        duration = self.elapsed()
        if winner is None:
            listing = "; ".join(f"{c.config}: {c.error}" for c in self.cands)
            last = next((getattr(c, "exc", None) for c in reversed(self.cands) if getattr(c, "exc", None)), None)
            error = AutotuneError(f"{self.t.name}: all {n} configs failed: {listing}")
            explain_interpreter_error(error)
            raise error from last
        if margin is not None:
            log.info("%s: winner %s (%.4f ms) after %.2f s; %s", self.t.name, winner.config, winner.ms, duration,
                     "default kept" if winner.is_default else
                     f"{margin:.2%} faster than the default (noise band {noise:.2%})")
        else:
            log.info("%s: winner %s (%.4f ms) after %.2f s", self.t.name, winner.config, winner.ms, duration)
        self._emit("search_end", winner=config_repr(winner.config), ms=winner.ms, duration_s=duration,
                   candidates=rows, margin=margin, noise=noise)
        return winner.config, rows, margin, noise, duration

    def time_share(self, indices: list) -> dict:
        """One rank's share of a search the ranks of a ``fat.distributed`` group split: ``{index: ms or None}``
        for the candidates at ``indices`` of :attr:`cands` (None: the candidate failed, or its outputs
        disagree with the reference's). A rank's share starts with the first candidate (the default, where
        there is one) on every rank: the group reads each rank's timings against that one, and the default's
        timing here is its first sample when :meth:`retime_share` re-times it. Each rank first runs the probe,
        so every rank checks its share
        against the same reference (the first candidate's outputs, the default's, on pristine inputs), as
        a search's first pass does; the caller's inputs are restored after, as after a search.

        ``max_search_s`` holds per rank, as in a first pass: once this rank's budget is spent, no new
        candidate of its share starts (its first timing, the reference, always runs); the rest are None,
        their ``error`` saying they were skipped, so they count as failed on every rank alike."""
        out: dict = {}
        skipped = 0
        try:
            with short_switch_interval():
                self._ready()
                for n, i in enumerate(indices):
                    cand = self.cands[i]
                    if n > 0 and self.over_budget():
                        cand.error = BUDGET_SPENT
                        out[i] = None
                        skipped += 1
                        continue
                    out[i] = self._share_timing(cand)
        finally:
            self._finish()
        if skipped:
            log.info("%s: %d of this rank's %d candidates %s", self.t.name, skipped, len(indices), BUDGET_SPENT)
        return out

    def retime_share(self, indices: list) -> dict:
        """One rank's re-timing of the finalists of a ``fat.distributed`` group's search, at ``indices`` of
        :attr:`cands`, the default first: every rank re-times all of them on its own device, in interleaved
        rounds, as :meth:`rerank` does (a finalist another rank timed is first timed here once, checked as
        in :meth:`time_share`). Returns ``{index: (gain, noise, least)}`` over the default on this device
        (:func:`judge`; the default's own is ``(0.0, 0.0, 0.0)``); a finalist missing failed here, and the
        default is missing where it failed here (then the challengers that stood have ``(0.0, inf)``: no
        verdict, but no failure either). The caller's inputs are restored after.

        Past ``max_search_s`` only the finalists not timed here yet are timed, once each (at most
        ``FINALISTS`` timings, fewer than a round): this rank's verdict needs them, and :meth:`retime`
        starts no round past the budget."""
        finalists: list = []
        try:
            with short_switch_interval():
                self._ready()
                for i in indices:
                    cand = self.cands[i]
                    if cand.samples or self._share_timing(cand) is not None:  # timed here already, or now
                        finalists.append(cand)
                if self.default in finalists and len(finalists) >= 2:
                    finalists = self.retime(finalists)
        finally:
            self._finish()
        d = self.cands[indices[0]] if indices else None
        if d is not self.default:
            return {}
        if d not in finalists:  # no verdicts here, but the challengers that stood are no failures
            return {i: (0.0, math.inf) for i in indices[1:] if self.cands[i] in finalists}
        out = {i: judge(self.cands[i], d) for i in indices[1:] if self.cands[i] in finalists}
        log.info("%s: re-timed %d finalists on this rank in %d rounds: %s", self.t.name, len(indices), self.rounds,
                 "; ".join(f"{self.cands[i].config} {gain:+.2%} (noise band {noise:.2%})"
                           for i, (gain, noise, _) in out.items()) or "every challenger failed")
        out[indices[0]] = (0.0, 0.0, 0.0)
        return out

    def _ready(self) -> None:
        """Before a rank's first timing of a group's search (its share, or the re-timing): the probe and the
        rotated inputs, once."""
        if self._probed:
            return
        self._probed = True
        self.probe()
        self.rotations = self._rotations()

    def _share_timing(self, cand: Candidate) -> Optional[float]:
        """A group rank's checked timing of ``cand`` (its first sample): its ms, or None where it failed or
        its outputs disagree with the reference's (its ``error`` says which)."""
        try:
            self.prepare_check()
            held: list = []
            cand.measurement = self.measure(cand, result=held)
            problem = self.check(cand, held[-1] if held else None)
            if problem is not None:
                cand.measurement = None
                raise _Rejected(f"rejected: {problem}")
        except Exception as exc:  # a failing candidate is skipped on every rank alike
            cand.error = str(exc) if isinstance(exc, _Rejected) else f"{type(exc).__name__}: {exc}"
            log.warning("%s: candidate %s failed: %s", self.t.name, cand.config, cand.error)
            return None
        cand.samples.append(cand.measurement.ms)
        return cand.measurement.ms

    def _finish(self) -> None:
        """After the timing (a search's, or a rank's share): the caller sees one clean run."""
        self.settle()
        timing_events.release_flush_buffers()  # the cache-flush buffers are the search's, not the caller's
        if self.precompiler is not None:
            self.precompiler.stop()
        if self._snapshot is not None:
            import torch

            with torch.no_grad():
                self._snapshot.restore()
        with streams.on_stream(self.stream):
            if self.setup is not None:
                self.setup()  # restore inputs touched by the reps


def ordered(configs: list, default: Optional[Config]) -> list:
    """The configs a search times, in its order: the default first (the reference and the bar; the copy in
    ``configs`` where it has one, else ``default`` itself: it is always timed), then the rest of ``configs``
    in their order, each distinct config once, where it is first listed: a repeat is not timed again, and a
    copy of the default would be a challenger racing the default against itself. Configs are the same where
    the store would keep one row for them and they run the same ``pre_hook``: ``Config(F=1)`` and
    ``Config(F=True)`` are two, as are two configs whose only difference is their ``pre_hook``. A search
    alone and a ``fat.distributed`` group's search both time these, in this order."""
    seen: set = set()
    rest: list = []
    first = None
    mark = _identity(default) if default is not None else None
    for c in configs:
        key = _identity(c)
        if key in seen:
            continue
        seen.add(key)
        if key == mark:
            first = c
        else:
            rest.append(c)
    if default is None:
        return rest
    return [default if first is None else first] + rest


def _identity(c: Config) -> tuple:
    """What makes two configs one candidate: the store's text of the config and the ``pre_hook`` it runs."""
    try:
        text = canonical_config_json(c.to_dict())
    except Exception:  # values JSON cannot hold: the config's repr tells them apart
        text = repr(c)
    return text, _hook_identity(c.pre_hook)


def _hook_identity(hook: Any) -> Any:
    """Which function a ``pre_hook`` runs: a bound method (``obj.method``) is a new object each time it is
    written, so it is its instance and function; any other callable is itself."""
    if hook is None:
        return None
    func, owner = getattr(hook, "__func__", None), getattr(hook, "__self__", None)
    if func is not None and owner is not None:
        return id(owner), id(func)
    return id(hook)


def _copy(t: Any) -> Any:
    """A copy of ``t`` with its strides: ``clone()`` makes a view that is not dense (a slice of a wider
    tensor) contiguous, and a kernel specialized on strides (Triton: stride 1, divisible by 16) would
    then time another build on the copies than the call runs. Rows that share part of their memory are
    copied as they are (each shared element gets the one value both rows hold); a broadcast view is never
    copied (:func:`verify.overlaps_itself`)."""
    import torch

    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _out_of_memory() -> tuple:
    """The errors an allocation that does not fit raises (torch's own, and Python's)."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (MemoryError,) if oom is None else (oom, MemoryError)


def rotates_on(device: Any) -> bool:
    """Whether a search rotates copies of its inputs on ``device``: not on the host (no cache to flush)."""
    return getattr(device, "type", "cpu") not in ("cpu", "meta")


def best_challengers(timed: Any) -> list:
    """The ``FINALISTS`` fastest of ``(challenger, ms)`` pairs, ties in the order given: the challengers a
    search re-times against the default."""
    return [c for c, _ in sorted(timed, key=lambda p: p[1])[:FINALISTS]]


def verdict(default: Any, verdicts: list) -> tuple:
    """``(winner, margin, noise)`` from ``[(challenger, gain, noise), ...]`` over ``default``, the closest
    challenger first: the challenger that beats the default by the most beyond its noise band (the first
    of equals), else the default, with margin ``0.0`` and the band of the closest challenger."""
    wins = [v for v in verdicts if v[1] > v[2]]
    if wins:
        return max(wins, key=lambda v: v[1])
    return default, 0.0, verdicts[0][2] if verdicts else 0.0


def group_verdict(order: list, ranks: list) -> tuple:
    """The decision of a ``fat.distributed`` group's re-timing: ``(winner, margin, noise)`` from every rank's
    ``{finalist: (gain, noise[, least])}`` over the default ``order[0]`` (:meth:`Search.retime_share`), the
    same on every rank; the winner is None where the default failed on some rank (then the fastest of the
    rest wins, as alone). A finalist missing on some rank failed there and cannot win. The ranks' mean gain
    must beat their combined band, which is never below any rank's ``least`` (:func:`judge`): averaging
    narrows the noise of the rounds, not what no rank could measure."""
    d = order[0]
    if any(d not in seen for seen in ranks):
        return None, None, None
    judged = []
    for c in order[1:]:
        per_rank = [seen.get(c) for seen in ranks]
        if any(v is None for v in per_rank):
            continue
        # each rank's gain is a ratio on one device (devices' differences cancel); their mean's band: sqrt(sum b^2)/n
        per_rank = [(v[0], v[1], v[2] if len(v) > 2 else 0.0) for v in per_rank]
        gain = math.fsum(g for g, _, _ in per_rank) / len(per_rank)
        noise = math.sqrt(math.fsum(n * n for _, n, _ in per_rank)) / len(per_rank)
        noise = max(noise, max(least for _, _, least in per_rank))
        # every rank runs the winner: none may have measured it slower than the default beyond its own band
        judged.append((c, gain, noise, any(g < -n for g, n, _ in per_rank)))
    winner = verdict(d, [(c, gain, noise) for c, gain, noise, lost in judged if not lost])
    if winner[0] == d and judged:
        return d, 0.0, judged[0][2]  # the band is still reported, against the closest challenger
    return winner


def judge(c: Candidate, d: Candidate) -> tuple:
    """``(gain, noise, least)`` of challenger ``c`` over default ``d``: relative gain, the band it must beat,
    and the part of that band more evidence cannot narrow (``least``: ``UNKNOWN_SPREAD_NOISE`` where a timing
    has no spread, the gain itself where too few rounds were paired; else 0). A group of ranks averages its
    ranks' gains and bands, but never below any rank's ``least``.

    With ``ROUNDS`` or more rounds timed side by side (the re-timing rounds: the first pass timed
    each candidate at its own moment, with fewer replays, so it pairs with nothing), the gain is
    the median of the per-round ratios and the noise their standard error times Student's t
    (``T_99``: drift that moves both alike cancels, and a tie seldom wins);
    a round whose ratio is more than ``HICCUP`` times off the median is a disturbed
    measurement, not noise, and is left out (while two rounds remain), so one hiccup can
    neither hide a win nor fake one. The noise is never below that of the two medians' own
    samples. With fewer paired rounds (the budget ran out, a finalist failed a round) the
    medians are compared and their noises combined, and the band is at least the gain: such
    evidence can settle a loss, never a win (a timing reused from an earlier search, which no
    round re-times, is judged on it as it is). Either way, where a
    timing reports no spread (a bare number, or a spread of 0: one sample, or a timer too coarse to see
    any), the noise is never below ``UNKNOWN_SPREAD_NOISE``."""
    within = (c.noise(within=True) ** 2 + d.noise(within=True) ** 2) ** 0.5
    least = UNKNOWN_SPREAD_NOISE if any(m is None or not m.spread for m in (c.measurement, d.measurement)) else 0.0
    within = max(within, least)
    rounds_c, rounds_d = c.samples[1:], d.samples[1:]
    n = min(len(rounds_c), len(rounds_d))
    if n >= ROUNDS and not c.reused:
        ratios = [a / b for a, b in zip(rounds_c[:n], rounds_d[:n])]
        mid = statistics.median(ratios)
        kept = [r for r in ratios if mid / HICCUP <= r <= mid * HICCUP]
        ratios = kept if len(kept) >= 2 else ratios
        t = T_99.get(len(ratios) - 1, T_99[max(T_99)])
        return 1.0 - statistics.median(ratios), max(within, t * statistics.stdev(ratios) / len(ratios) ** 0.5), least
    gain = (d.ms - c.ms) / d.ms
    noise = max(within, (c.noise() ** 2 + d.noise() ** 2) ** 0.5)
    if not c.reused:
        least = max(least, gain)
    return gain, max(noise, least), least


def compare(c: Candidate, d: Candidate) -> tuple:
    """``(gain, noise)`` of challenger ``c`` over default ``d`` (:func:`judge`)."""
    return judge(c, d)[:2]





class _Rejected(Exception):
    """A candidate whose outputs disagree with the reference's."""
