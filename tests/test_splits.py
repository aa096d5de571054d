"""training/splits.py: the twin and mirror key, the verbatim-proof check, and the three-way split (issue 27)."""

from __future__ import annotations

from typing import Any

import pytest

from proofgym.envs.types import Task
from proofgym.training.splits import (
    make_split,
    name_key,
    proof_key,
    proof_sentences,
    statement_key,
    twin_groups,
    twins_across,
    verbatim_overlap,
)


def _task(task_id: str, statement: str, proof: str = "Proof. auto. Qed.") -> Task:
    return Task(id=task_id, system="coq", suite="s", category="P1", statement=statement, context="",
                reference_proof=proof)


def test_the_gt_lt_mirror_the_review_found_is_one_group():
    gt = _task("coq.stdlib.Arith.Compare_dec.nat_compare_Gt_gt", "Lemma nat_compare_Gt_gt n m : (n ?= m) = Gt -> n>m.",
               "Proof.\n  apply Nat.compare_gt_iff.\nQed.")
    lt = _task("coq.stdlib.Arith.Compare_dec.nat_compare_Lt_lt", "Lemma nat_compare_Lt_lt n m : (n ?= m) = Lt -> n<m.",
               "Proof.\n  apply Nat.compare_lt_iff.\nQed.")
    assert statement_key(gt.statement) == statement_key(lt.statement)
    assert name_key(gt.id) == name_key(lt.id) == "nat_compare_Lt_lt"
    assert twins_across([lt], [gt]) != []
    assert [len(g) for g in twin_groups([gt, lt])] == [2]


def test_renamed_binders_and_another_name_give_the_same_key():
    assert statement_key("Lemma foo (a b : nat) : a + b = b + a.") == \
        statement_key("Theorem bar : forall x y : nat, x + y = y + x.")
    assert statement_key("Lemma p n : Nat.le n (S n).") == statement_key("Lemma q (k : N) : N.le k (S k).")


def test_flipped_comparisons_are_twins():
    assert statement_key("Lemma a x y : x < y -> x <= y.") == statement_key("Lemma b x y : y > x -> x <= y.")
    assert statement_key("Lemma c x y : x <= y -> ~ y < x.") == statement_key("Lemma d u v : v >= u -> ~ u > v.")


def test_left_and_right_versions_of_a_lemma_are_twins():
    left = _task("coq.stdlib.Arith.PeanoNat.Nat.add_0_l", "Lemma add_0_l n : 0 + n = n.")
    right = _task("coq.stdlib.Arith.PeanoNat.Nat.add_0_r", "Lemma add_0_r n : n + 0 = n.")
    assert statement_key(left.statement) == statement_key(right.statement)
    assert name_key(left.id) == name_key(right.id)
    # named apart, stated apart: andb_false_l / andb_false_r
    assert statement_key("Lemma andb_false_l : forall b:bool, false && b = false.") == \
        statement_key("Lemma andb_false_r : forall b:bool, b && false = false.")


def test_different_statements_keep_different_keys():
    assert statement_key("Lemma a n : n + 0 = n.") != statement_key("Lemma b n : n * 1 = n.")
    assert statement_key("Lemma c n m : n < m -> n <= m.") != statement_key("Lemma d n m : n <= m -> n < S m.")
    assert name_key("x.add_comm") != name_key("x.mul_comm")


def test_verbatim_reference_proofs_are_found_and_kept_out_of_heldout():
    assert proof_key("Proof.\n  now destruct n.\nQed.") == proof_key("Proof. now   destruct n. Defined.")
    held = [_task("h.one", "Lemma one : True.", "Proof.\n exact I.\nQed.")]
    train = [_task("t.two", "Lemma two : 1 = 1.", "Proof. exact I. Qed."), _task("t.three", "Lemma three : 2 = 2.")]
    assert verbatim_overlap(train, held) == [("h.one", "t.two")]
    # in a split, a group whose proof appears outside it never goes to held-out or validation
    tasks = [_task(f"s.lemma{i}", f"Lemma lemma{i} : {i} = {i}.", f"Proof. exact (eq_refl {i}). Qed.")
             for i in range(40)]
    shared = [_task(f"s.shared{i}", f"Lemma shared{i} : S {i} = S {i}.", "Proof. reflexivity. Qed.")
              for i in range(20)]
    split = make_split(tasks + shared, heldout_size=10, validation_size=5, seed=0)
    assert not {t.id for t in shared} & (set(split.heldout) | set(split.validation))
    assert split.checks["heldout_verbatim_proofs_in_train"] == 0 == split.checks["validation_verbatim_proofs_in_train"]


def test_the_split_has_three_disjoint_sides_of_whole_groups_and_skips_tasks_seen_before():
    tasks = []
    for i in range(30):
        tasks.append(_task(f"m.Nat.lem{i}_l", f"Lemma lem{i}_l n : {i} + n = n + {i}.", f"Proof. lia{i}. Qed."))
        tasks.append(_task(f"m.Z.lem{i}_r", f"Lemma lem{i}_r z : z + {i} = {i} + z.", f"Proof. ring{i}. Qed."))
    seen = {"m.Nat.lem3_l"}
    split = make_split(tasks, heldout_size=10, validation_size=6, seed=1, exclude=seen)
    held, valid, train = set(split.heldout), set(split.validation), set(split.train)
    assert len(held) >= 10 and len(valid) >= 6 and held | valid | train == {t.id for t in tasks}
    assert not held & valid and not held & train and not valid & train
    assert "m.Nat.lem3_l" in train and "m.Z.lem3_r" in train  # seen before: its whole group stays in training
    for i in range(30):  # every left/right pair on one side
        assert (f"m.Nat.lem{i}_l" in held) == (f"m.Z.lem{i}_r" in held)
    assert split.checks["heldout_twins_in_train"] == split.checks["validation_twins_in_train"] == 0
    assert make_split(tasks, heldout_size=10, validation_size=6, seed=1, exclude=seen) == split  # fixed
    with pytest.raises(ValueError, match="eligible"):
        make_split(tasks, heldout_size=100, validation_size=6, seed=1)


def test_proof_sentences_count_tactic_sentences_not_qualified_names():
    assert proof_sentences("Proof. reflexivity. Qed.") == 1
    assert proof_sentences("Proof.\n  now destruct n.\nQed.") == 1
    assert proof_sentences("Proof. intros; rewrite Nat.add_comm; ring. Qed.") == 1  # `Nat.add_comm`: no sentence end
    assert proof_sentences("Proof. intros n. ring. Qed.") == 2
    assert proof_sentences("Proof.\n destruct b.\n - reflexivity.\n - reflexivity.\nDefined.") == 3


def _shared_proof_split(min_sentences: int) -> tuple[Any, list[Task], list[Task]]:
    """40 tasks with proofs of their own, 20 sharing `reflexivity.` and 20 sharing a two-sentence proof."""
    own = [_task(f"s.lemma{i}", f"Lemma lemma{i} : {i} = {i}.", f"Proof. exact (eq_refl {i}). Qed.")
           for i in range(40)]
    one_liner = [_task(f"s.refl{i}", f"Lemma refl{i} : S {i} = S {i}.", "Proof. reflexivity. Qed.") for i in range(20)]
    two = [_task(f"s.two{i}", f"Lemma two{i} (n : nat) : n * {i} = {i} * n.", "Proof.\n intros n.\n ring.\nQed.")
           for i in range(20)]
    split = make_split(own + one_liner + two, heldout_size=20, validation_size=10, seed=0,
                       verbatim_min_sentences=min_sentences)
    return split, one_liner, two


def test_a_generic_one_liner_shared_across_groups_no_longer_blocks_heldout_with_min_sentences_2():
    split, one_liner, two = _shared_proof_split(2)
    taken = set(split.heldout) | set(split.validation)
    assert {t.id for t in one_liner} & taken  # `reflexivity.` is tactic knowledge, not a leaked proof
    assert not {t.id for t in two} & taken  # a shared two-sentence proof still keeps its tasks in training
    assert split.checks["heldout_verbatim_proofs_in_train"] == 0 == split.checks["validation_verbatim_proofs_in_train"]
    assert split.checks["verbatim_min_sentences"] == 2
    shared = split.checks["heldout_short_proofs_shared_with_train"] + split.checks[
        "validation_short_proofs_shared_with_train"]
    assert shared == len({t.id for t in one_liner} & taken) > 0  # what the limit let through is counted


def test_the_default_still_counts_every_proof_so_old_splits_reproduce():
    split, one_liner, two = _shared_proof_split(1)
    taken = set(split.heldout) | set(split.validation)
    assert not {t.id for t in one_liner + two} & taken
    assert split.checks["verbatim_min_sentences"] == 1 and "heldout_short_proofs_shared_with_train" not in split.checks
    train = [_task("t.a", "Lemma a : 1 = 1.", "Proof. reflexivity. Qed.")]
    held = [_task("h.b", "Lemma b : 2 = 2.", "Proof.\n reflexivity.\nQed.")]
    assert verbatim_overlap(train, held) == [("h.b", "t.a")]
    assert verbatim_overlap(train, held, min_sentences=2) == []


def test_twins_and_mirrors_stay_together_whatever_the_verbatim_limit():
    gt = _task("m.nat_compare_Gt_gt", "Lemma nat_compare_Gt_gt n m : (n ?= m) = Gt -> n>m.", "Proof. auto. Qed.")
    lt = _task("m.nat_compare_Lt_lt", "Lemma nat_compare_Lt_lt n m : (n ?= m) = Lt -> n<m.", "Proof. auto. Qed.")
    seen = _task("m.Nat.lem0_l", "Lemma lem0_l n : 0 + n = n.", "Proof. reflexivity. Qed.")
    mirror = _task("m.Z.lem0_r", "Lemma lem0_r z : z + 0 = z.", "Proof. intros z. ring. Qed.")
    others = [_task(f"o.x{i}", f"Lemma x{i} : {i} <= {i} + 1.", f"Proof. lia{i}. Qed.") for i in range(30)]
    split = make_split([gt, lt, seen, mirror, *others], heldout_size=12, validation_size=6, seed=3,
                       exclude={seen.id}, verbatim_min_sentences=2)
    for side in (split.heldout, split.validation, split.train):
        assert (gt.id in side) == (lt.id in side)
    assert seen.id in split.train and mirror.id in split.train  # seen before: its whole group stays in training
    assert split.checks["heldout_twins_in_train"] == split.checks["validation_twins_in_train"] == 0
