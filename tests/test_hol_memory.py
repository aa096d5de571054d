"""HOL Light memory and overhead: the zygote budget counts private memory, the worker clocks its tactic.

The prover-tier tests run on the session's warm server (the ``hol`` fixture in conftest.py): a zygote is a
fork of the root, so most of its RSS is the root's pages, shared copy-on-write. The budget counts what is
a zygote's own (USS, ``/proc/<pid>/smaps_rollup``); these tests set budgets between a zygote's private
memory and its RSS, where the two ways of counting disagree. The ``hol`` fixture skips them where HOL Light
is not installed. Tests never assert on timings.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light.verifier import context_key, zygote_bytes


def T(goal: str, context: str = "", timeout: float = 60.0) -> Task:
    return Task(id="mem", system="hol_light", context=context, statement=f"`{goal}`", reference_proof="ARITH_TAC",
                timeout_s=timeout)


def _fresh_context(tag: str) -> str:
    """A small context no other test loads (a zygote of its own, whatever ran before in this session)."""
    return f"let PG_MEM_{tag}_{os.urandom(4).hex()} = 1;;"


# ---------------------------------------------------------------------------------------------
# the accounting rule (no prover)


@pytest.mark.parametrize(("rss", "private", "counted"), [
    (800 << 20, 60 << 20, 60 << 20),  # a fork: its own pages only
    (800 << 20, 800 << 20, 800 << 20),  # nothing shared
    (800 << 20, 0, 800 << 20),  # smaps_rollup unreadable: the full RSS, never 0
    (800 << 20, 900 << 20, 800 << 20),  # a private figure above the RSS is wrong: the RSS
    (0, 0, 0),  # a zygote that is gone
])
def test_a_zygote_counts_its_private_memory_or_else_its_rss(rss, private, counted):
    assert zygote_bytes(rss, private) == counted


# ---------------------------------------------------------------------------------------------
# the budget on the real server


@pytest.fixture
def budget(hol):
    """Set the zygote budget of the session verifier for one test; restored after it."""
    saved = hol.config

    def set_budget(nbytes: int) -> None:
        hol.config = replace(saved, zygote_budget_bytes=nbytes)

    yield set_budget
    hol.config = saved


@pytest.mark.prover
def test_a_budget_below_one_zygotes_rss_holds_two_contexts(hol, budget):
    """A budget of half a zygote's RSS: at full RSS it would hold one context (each load evicting the other);
    counted privately, two stay warm."""
    server = hol.server("plain")
    probe = _fresh_context("PROBE")
    assert hol.check(T("1 + 1 = 2", probe), "ARITH_TAC").ok
    rss, private = server.stats()[context_key(probe)]
    assert 0 < private and 4 * private < rss, f"a zygote's own memory is not a small part of its RSS: {private} of {rss}"
    assert server.zygotes[context_key(probe)] < rss  # the budget counts it below its RSS
    budget(rss // 2)
    a, b = _fresh_context("A"), _fresh_context("B")
    loaded = hol.stats["contexts_loaded"]
    assert hol.check(T("1 + 1 = 2", a), "ARITH_TAC").ok
    assert hol.check(T("1 + 1 = 2", b), "ARITH_TAC").ok
    assert context_key(a) in server.zygotes and context_key(b) in server.zygotes
    # both are warm: checking on either loads nothing, evicts nothing
    evictions = hol.stats["evictions"]
    assert hol.check(T("2 + 2 = 4", a), "ARITH_TAC").ok and hol.check(T("2 + 2 = 4", b), "ARITH_TAC").ok
    assert hol.stats["contexts_loaded"] == loaded + 2 and hol.stats["evictions"] == evictions
    sizes = server.stats()
    assert sum(server.zygotes.values()) <= rss // 2 < min(sizes[context_key(a)][0], sizes[context_key(b)][0])


@pytest.mark.prover
def test_private_memory_over_the_budget_still_evicts(hol, budget):
    """A budget just below what two loaded zygotes hold privately: loading a third evicts the least recently used."""
    server = hol.server("plain")
    a, b, c = _fresh_context("EA"), _fresh_context("EB"), _fresh_context("EC")
    assert hol.check(T("1 + 1 = 2", a), "ARITH_TAC").ok
    assert hol.check(T("1 + 1 = 2", b), "ARITH_TAC").ok
    held = server.zygotes[context_key(a)] + server.zygotes[context_key(b)]
    budget(held - 1)
    evictions = hol.stats["evictions"]
    assert hol.check(T("1 + 1 = 2", c), "ARITH_TAC").ok
    assert context_key(a) not in server.zygotes  # the least recently used
    assert context_key(c) in server.zygotes
    assert hol.stats["evictions"] > evictions
    assert sum(server.zygotes.values()) <= held - 1 or len(server.zygotes) == 1
    assert hol.check(T("1 + 1 = 2", a), "ARITH_TAC").ok  # evicted is not broken: it loads again


# ---------------------------------------------------------------------------------------------
# the worker's own clock


@pytest.mark.prover
def test_the_worker_reports_its_tactics_time_and_none_where_no_tactic_ran(hol):
    for proof, verdict in (("ARITH_TAC", Verdict.OK), ("ALL_TAC", Verdict.FAIL), ("REFL_TAC", Verdict.FAIL)):
        result = hol.check(T("1 + 1 = 2"), proof)
        assert result.verdict is verdict
        times = hol.worker_times()
        assert times is not None, proof
        prep_s, tactic_s = times
        assert prep_s >= 0 and tactic_s >= 0 and prep_s + tactic_s < result.wall_s, (proof, times, result.wall_s)
    # refused before any tactic ran: a parse error, names off the whitelist, a screened-out submission
    for proof, verdict in (("ARITH_TAC THEN (", Verdict.ERROR), ("CHEAT_TAC", Verdict.CHEATING),
                           ("mk_thm", Verdict.CHEATING), ("\x00", Verdict.ERROR)):
        result = hol.check(T("1 + 1 = 2"), proof)
        assert result.verdict is verdict, proof
        assert hol.worker_times() is None, proof
    before = hol.stats["tactic_us"]
    assert hol.check(T("1 + 1 = 2"), "ARITH_TAC").ok
    assert hol.stats["tactic_us"] >= before


@pytest.mark.prover
def test_the_timeline_of_a_check_names_every_phase_and_agrees_with_the_workers_clock(hol):
    assert hol.check(T("1 + 1 = 2"), "ARITH_TAC").ok
    timeline, times = hol.worker_timeline(), hol.worker_times()
    assert timeline is not None and times is not None
    assert set(timeline) == {"to_zygote", "fork", "worker_start", "prep", "tactic", "reply", "exit", "reap",
                             "to_client"}
    assert (timeline["prep"], timeline["tactic"]) == times
    assert hol.check(T("1 + 1 = 2"), "CHEAT_TAC").verdict is Verdict.CHEATING  # refused before any tactic ran
    assert hol.worker_timeline() is None


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process under ``pid``, from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


@pytest.mark.prover
def test_workers_are_all_reaped(hol):
    """A worker closes its pipes before its exit (the slow part of it), and the zygote answers once it is reaped:
    after a run of checks no worker is left, and no zombie."""
    import time

    task = T("1 + 1 = 2", _fresh_context("REAP"))
    verdicts = [hol.check(task, proof).verdict for proof in ("ARITH_TAC", "ALL_TAC", "REFL_TAC") * 5]
    assert verdicts == [Verdict.OK, Verdict.FAIL, Verdict.FAIL] * 5
    server = hol.server("plain")
    keep = len(server.zygotes) + 2  # bwrap's init (its child: the root), the root's zygotes, and the root
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_descendants(server.proc.pid)) > keep:
        time.sleep(0.05)
    left = _descendants(server.proc.pid)
    assert len(left) <= keep and not [p for p in left if p[1] == "Z"], left


# ---------------------------------------------------------------------------------------------
# recycling: the rule, on a server whose root is a stand-in process (no HOL Light load)


class _Root:
    """A HolLightServer's state with a `sleep` for its root: what after_check and worn_out read and do."""

    def __init__(self, tmp_path, zygotes: dict[str, tuple[int, int]]):
        import threading
        from collections import Counter, OrderedDict

        from proofgym.envs.verifiers.hol_light.verifier import HolLightServer
        from proofgym.envs.verifiers.sandbox import Sandbox
        from proofgym.envs.verifiers.sandbox.warm import WarmProcess

        self.server = server = object.__new__(HolLightServer)
        server.base = type("Base", (), {"name": "plain"})()
        server._state_lock = threading.Lock()  # noqa: SLF001 - the rule's own state, set by hand here
        server.zygotes = OrderedDict((k, private) for k, (_, private) in zygotes.items())
        server.inflight, server.uses = Counter(), Counter()
        server.loaded_private = {k: private for k, (_, private) in zygotes.items()}
        server._pending, server._loading = {}, {}  # noqa: SLF001
        self.now = dict(zygotes)  # what STATS says now: key -> (rss, private)
        self.asked: list[tuple[str, list[str]]] = []
        server.stats = lambda: (self.asked.append(("STATS", [])), dict(self.now))[1]
        server.request = lambda tag, fields, timeout_s: (self.asked.append((tag, list(fields))), ("EVICTED", []))[1]
        server._warm = WarmProcess(Sandbox(use_bwrap=False), ["sleep", "120"], workdir=tmp_path,  # noqa: SLF001
                                   name="the stand-in root", read=lambda stream: iter(stream.readline, b""))
        server.ready_rss = 0

    def close(self) -> None:
        self.server._warm.kill()  # noqa: SLF001


@pytest.fixture
def stand_in(tmp_path):
    made: list[_Root] = []

    def make(zygotes: dict[str, tuple[int, int]]) -> _Root:
        made.append(_Root(tmp_path, zygotes))
        return made[-1]

    yield make
    for root in made:
        root.close()


def _cfg(**kw):
    from proofgym.envs.verifiers.hol_light import HolLightConfig

    return HolLightConfig(**{"zygote_max_checks": 0, "zygote_max_growth_bytes": 0, "server_max_checks": 0,
                             "server_max_growth_bytes": 0, **kw})


def test_a_zygote_is_replaced_after_its_checks_and_not_while_another_attempt_runs_on_it(stand_in):
    root = stand_in({"k": (800 << 20, 40 << 20)})
    cfg = _cfg(zygote_max_checks=3)
    assert [root.server.after_check("k", cfg) for _ in range(2)] == [None, None]
    root.server.inflight["k"] = 1  # the third check's neighbour still runs there: not now
    assert root.server.after_check("k", cfg) is None and "k" in root.server.zygotes
    root.server.inflight["k"] = 0
    why = root.server.after_check("k", cfg)
    assert why is not None and "4 checks" in why
    assert "k" not in root.server.zygotes and root.asked == [("EVICT", ["k"])]
    assert root.server.after_check("k", cfg) is None  # gone: the next check loads it again


def test_a_zygote_is_replaced_when_its_private_memory_grew_past_the_bound(stand_in):
    root = stand_in({"k": (800 << 20, 40 << 20), "other": (800 << 20, 40 << 20)})
    cfg = _cfg(zygote_max_growth_bytes=64 << 20, memory_check_every=2)
    assert root.server.after_check("k", cfg) is None and root.asked == []  # not due: no STATS
    root.now["k"] = (800 << 20, 100 << 20)  # +60 MiB: under the bound
    assert root.server.after_check("k", cfg) is None and root.asked == [("STATS", [])]
    root.now["k"] = (800 << 20, 105 << 20)  # +65 MiB
    assert root.server.after_check("k", cfg) is None  # the third check is not a reading
    why = root.server.after_check("k", cfg)
    assert why is not None and "65 MiB" in why
    assert root.asked[-1] == ("EVICT", ["k"]) and list(root.server.zygotes) == ["other"]
    # an unreadable private figure counts the full RSS: far past the bound, never 0
    root.now["other"] = (800 << 20, 0)
    root.server.uses["other"] = 1
    assert root.server.after_check("other", cfg) is not None


def test_the_root_is_worn_out_by_its_checks_or_its_memory_and_not_otherwise(stand_in):
    root = stand_in({"k": (800 << 20, 40 << 20)})
    assert root.server.worn_out(_cfg()) is None
    for _ in range(3):
        root.server.after_check("k", _cfg())
    assert root.server.worn_out(_cfg(server_max_checks=4)) is None
    assert "3 checks" in root.server.worn_out(_cfg(server_max_checks=3))
    rss = root.server._warm.rss()  # noqa: SLF001 - the stand-in root's resident memory now
    assert rss > 0
    root.server.ready_rss = rss - 2  # it has grown by a little more than 1 byte since it was ready
    assert "MiB" in root.server.worn_out(_cfg(server_max_growth_bytes=1))
    assert root.server.worn_out(_cfg(server_max_growth_bytes=1 << 30)) is None
    assert not root.server.busy()
    root.server.inflight["k"] = 1
    assert root.server.busy()  # server() restarts a worn root only when nothing runs on it


@pytest.mark.prover
def test_a_worn_zygote_reloads_on_the_real_server_and_verdicts_stay_right(hol):
    saved = hol.config
    hol.config = replace(saved, zygote_max_checks=2)
    try:
        context = _fresh_context("WORN")
        loaded, recycled = hol.stats["contexts_loaded"], hol.stats["zygote_recycles"]
        verdicts = [hol.check(T("1 + 1 = 2", context), proof).verdict
                    for proof in ("ARITH_TAC", "ALL_TAC", "ARITH_TAC", "CHEAT_TAC")]
        assert verdicts == [Verdict.OK, Verdict.FAIL, Verdict.OK, Verdict.CHEATING]
        assert hol.stats["zygote_recycles"] - recycled == 2
        assert hol.stats["contexts_loaded"] - loaded == 2  # loaded, replaced after 2 checks, loaded again
        assert context_key(context) not in hol.server("plain").zygotes  # replaced after the 4th too
    finally:
        hol.config = saved


@pytest.mark.slow
@pytest.mark.prover
def test_a_worn_root_restarts_between_checks(hol):
    """Slow tier: the restart loads HOL Light again (minutes). Verdicts before and after are right."""
    saved = hol.config
    server = hol.server("plain")
    starts, recycles = hol.stats["server_starts"], hol.stats["server_recycles"]
    hol.config = replace(saved, server_max_checks=server._warm.uses + 1)  # noqa: SLF001 - worn after one more check
    try:
        assert hol.check(T("1 + 1 = 2"), "ARITH_TAC").ok  # the last check on the old server
        assert hol.server("plain") is not server and server.dead  # restarted before the next one
        assert hol.check(T("1 + 1 = 2"), "ALL_TAC").verdict is Verdict.FAIL
    finally:
        hol.config = saved
    assert hol.stats["server_recycles"] - recycles == 1 and hol.stats["server_starts"] - starts == 1
