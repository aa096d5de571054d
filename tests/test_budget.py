"""One owner of the time budget: a prover's config makes a frozen :class:`Budget`, validated once; the pool's
deadline for a check is the one its worker's verifier reports (see also tests/redteam/test_pool_verdicts.py's CPU clock)."""

from __future__ import annotations

import dataclasses

import pytest

from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.base import Budget
from proofgym.envs.verifiers.coq.verifier import CoqConfig
from proofgym.envs.verifiers.dafny.verifier import DafnyConfig
from proofgym.envs.verifiers.hol_light.verifier import HolLightConfig
from tests.test_pool import fake_pool, fake_task


def test_every_provers_config_makes_its_budget() -> None:
    assert CoqConfig().budget == HolLightConfig().budget == DafnyConfig().budget == Budget("wall", 4.0)
    assert CoqConfig(timeout_clock="cpu", wall_backstop=3).budget.wall_s(10) == 30.0
    assert HolLightConfig(timeout_clock="cpu").budget.wall_s(10) == 40.0
    assert DafnyConfig(rlimit=100000).budget == Budget("rlimit", 4.0)  # z3's units; the wall clock a backstop
    assert DafnyConfig(rlimit=100000).budget.wall_s(10) == 40.0


@pytest.mark.parametrize(("config", "field", "value", "message"), [
    (CoqConfig, "timeout_clock", "gpu", "timeout_clock must be"),
    (HolLightConfig, "timeout_clock", "gpu", "timeout_clock must be"),
    (CoqConfig, "wall_backstop", 0.5, "wall_backstop must be >= 1"),
    (DafnyConfig, "wall_backstop", 0.5, "wall_backstop must be >= 1"),
    (HolLightConfig, "wall_backstop", "4", "wall_backstop must be >= 1"),
])
def test_a_budget_is_validated_when_the_config_is_made(config: type, field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**{field: value})
    with pytest.raises(ValueError, match=message):  # and when a verifier's overrides replace a field
        dataclasses.replace(config(), **{field: value})


def test_the_pools_deadline_is_the_budget_its_worker_reports(tmp_path) -> None:
    """Dafny's z3 budget (``rlimit``) gives a check up to ``wall_backstop * timeout_s`` of wall time; the pool
    re-derived the budget from ``timeout_clock`` alone and answered TIMEOUT at ``timeout_s``. Here the check
    answers OK once the task's ``timeout_s`` has surely passed: the fake waits for the test's gate."""
    gate = tmp_path / "go"
    task = dataclasses.replace(fake_task(0), timeout_s=0.5)
    with fake_pool(1, context_allowance_s=0.0, verifier_kwargs={"budget": Budget("rlimit", 1000.0)}) as pool:
        future = pool.submit(task, f"wait:{gate}")
        with pytest.raises(TimeoutError):
            future.result(timeout=2.0)  # past timeout_s + context_allowance_s: where the old pool answered TIMEOUT
        gate.write_text("go")
        assert future.result(timeout=120).verdict is Verdict.OK
