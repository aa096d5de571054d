"""Red team, the verifier pool: the verdict cache's key covers everything that decides a verdict, and with a
CPU-time budget the pool's deadline is the verifier's own (not ``timeout_s`` of wall time).

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
rounds 4 and 6.
"""

from __future__ import annotations

from proofgym.envs.types import Task, Verdict


def _task(tid: str, context: str, statement: str, reference: str, **metadata: object) -> Task:
    return Task(id=f"rt4.{tid}", system="coq", context=context, statement=statement, reference_proof=reference,
                category="P1", timeout_s=20, metadata=dict(metadata))


def test_the_verdict_cache_key_covers_what_decides_a_verdict():
    """A pool's repeat is answered from its verdict cache only for the same task in every field (its allow-list,
    context, deadline), the same proof text and the same verifier settings (fast tier)."""
    from dataclasses import replace

    from proofgym.envs.verifiers.pool.cache import cache_key

    task = _task("vc", "Require Import Classical.\n", "Lemma em (P : Prop) : P \\/ ~ P.", "Proof. apply classic. Qed.")
    proof, settings = "Proof. apply classic. Qed.", repr(("coq", [("audit", "never")]))
    key = cache_key(task, proof, settings)
    assert cache_key(replace(task), proof, settings) == key
    others = [replace(task, metadata={"allowed_axioms": ["Coq.Logic.Classical_Prop.classic"]}),
              replace(task, context="Require Import Classical.\nSection S.\n"), replace(task, timeout_s=5)]
    assert len({key, *(cache_key(t, proof, settings) for t in others)}) == 4
    assert cache_key(task, proof + " ", settings) != key
    assert cache_key(task, proof, repr(("coq", [("audit", "always")]))) != key


# ---------------------------------------------------------------------------------------------
# The verifier pool


def test_the_pool_deadline_is_the_cpu_clocked_verifiers_own(tmp_path):
    """Was a hole (fixed): with ``timeout_clock="cpu"`` a verifier gives a check ``timeout_s`` of CPU and up to
    ``wall_backstop * timeout_s`` of wall time (a loaded machine), but the pool answered TIMEOUT at ``timeout_s``
    of wall time: the verdict depended on the load again. Here the check answers OK once the old deadline has
    surely passed (the test waits for it, no timing threshold)."""
    import dataclasses
    import time as clock

    from tests.test_pool import fake_pool, fake_task

    gate = tmp_path / "go"
    task = dataclasses.replace(fake_task(0), timeout_s=0.5)
    kwargs = {"timeout_clock": "cpu", "wall_backstop": 1000.0}
    with fake_pool(1, context_allowance_s=0.0, verifier_kwargs=kwargs) as pool:
        future = pool.submit(task, f"wait:{gate}")
        clock.sleep(2.0)  # past timeout_s + context_allowance_s: where the old pool answered TIMEOUT
        gate.write_text("go")
        assert future.result(timeout=120).verdict is Verdict.OK
    with fake_pool(1, context_allowance_s=0.0) as pool:  # the wall clock: timeout_s is the verifier's deadline
        gate.unlink()
        future = pool.submit(task, f"wait:{gate}")
        assert future.result(timeout=120).verdict is Verdict.TIMEOUT
        gate.write_text("go")
