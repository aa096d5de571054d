"""training/splits.py: the twin and mirror key, the verbatim-proof check, and the three-way split (issue 27)."""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task
from proofgym.training.splits import (
    make_split,
    name_key,
    proof_key,
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
