"""The pass-rate filter any trainer can call (``training/integrations/curriculum.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")  # training/curriculum.py builds on TRL's sampler

from proofgym.training.integrations.curriculum import PassRateFilter  # noqa: E402


def test_it_keeps_the_tasks_solved_sometimes_from_the_trainers_own_verdicts():
    keep = PassRateFilter(["easy", "hard", "mixed", "unseen"], window=4)
    keep.record_many([("easy", "OK"), ("easy", "OK"), ("hard", "FAIL"), ("hard", "CHEATING"),
                      ("mixed", "OK"), ("mixed", "FAIL"), ("mixed", None)])  # None: a harness failure
    counts = keep.refresh()
    assert keep.kept() == ["mixed", "unseen"]  # an unscored task is kept: nothing says it is useless
    assert (counts["curriculum/too_easy"], counts["curriculum/too_hard"], counts["curriculum/kept"]) == (1, 1, 1)
    assert keep.p_hat() == {"easy": 1.0, "hard": 0.0, "mixed": 0.5, "unseen": None}


def test_the_window_forgets_old_verdicts_so_a_learned_task_leaves():
    keep = PassRateFilter(["t", "u"], window=2)
    keep.record_many([("t", "FAIL"), ("t", "OK"), ("u", "OK"), ("u", "FAIL")])
    keep.refresh()
    assert keep.kept() == ["t", "u"]
    keep.record_many([("t", "OK"), ("t", "OK")])  # the policy now solves t every time
    keep.refresh()
    assert keep.kept() == ["u"] and keep.state()["curriculum/refreshes"] == 2


def test_when_no_task_is_kept_every_task_is_and_the_fallback_is_counted():
    keep = PassRateFilter(["a", "b"], window=2)
    keep.record_many([("a", "OK"), ("a", "OK"), ("b", "FAIL"), ("b", "FAIL")])
    assert keep.refresh()["curriculum/fallback"] == 1.0 and keep.kept() == ["a", "b"]
