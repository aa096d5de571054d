"""Selene's strategy: demonstrations, BM25 similar lemmas with the target withheld, dependency facts, fixing round."""

from __future__ import annotations

import json

import pytest

from proofgym.agents import ScriptedAgent
from proofgym.agents.prompts import selene as prompts
from proofgym.agents.retrieval import SourceLibrary, code_tokens, split_chunks
from proofgym.agents.strategies import make_strategy
from proofgym.agents.strategies.selene import (
    UPPER_BOUND_NOTE,
    SeleneStrategy,
    sample_per_category,
    select_demonstrations,
)
from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import Task
from proofgym.training.evaluate import EvalOptions, read_results, run_eval
from tests.conftest import requires_coq
from tests.test_eval_fakes import FAKE

SOURCE = """\
Require Import Arith.

Definition double (n : nat) := n + n.

Lemma double_0 : double 0 = 0.
Proof. reflexivity. Qed.

Lemma double_S (n : nat) : double (S n) = S (S (double n)).
Proof.
  unfold double. simpl.

  rewrite Nat.add_succ_r. reflexivity.
Qed.

Lemma double_plus (n m : nat) : double (n + m) = double n + double m.
Proof. unfold double. lia. Qed.
"""


def _task(tid: str, statement: str, proof: str, cat: str = "P1", **meta) -> Task:
    return Task(id=tid, system="coq", context="", statement=statement, reference_proof=proof, category=cat,
                metadata=meta)


DOUBLE_S = _task("src.double_S", "Lemma double_S (n : nat) : double (S n) = S (S (double n)).",
                 "Proof.\n  unfold double. simpl.\n\n  rewrite Nat.add_succ_r. reflexivity.\nQed.", "P2")


def test_chunks_split_at_blank_lines_with_line_numbers():
    chunks = split_chunks(SOURCE, "doc")
    assert [c.start_line for c in chunks] == [1, 3, 5, 8, 12, 15]
    assert chunks[3].text == "Lemma double_S (n : nat) : double (S n) = S (S (double n)).\nProof.\n  unfold double. simpl."
    assert chunks[3].head(1) == "Lemma double_S (n : nat) : double (S n) = S (S (double n))."
    assert "nat.add_succ_r" in code_tokens("rewrite Nat.add_succ_r") and "succ" in code_tokens("Nat.add_succ_r")


def test_similar_lemma_never_shows_the_targets_own_proof():
    library = SourceLibrary({"doc": SOURCE}, own_docs={DOUBLE_S.id: "doc"})
    # The target's statement and both halves of its proof (split by a blank line) are withheld ...
    found = library.search(DOUBLE_S.statement, k=10, withhold=DOUBLE_S)
    texts = [chunk.text for chunk, _ in found]
    assert texts and not any("double_S" in t or "add_succ_r" in t for t in texts)
    # ... but without withholding, the target's own chunk is the best match: the test can fail.
    assert "Lemma double_S" in library.search(DOUBLE_S.statement, k=1)[0][0].text
    assert library.similar(DOUBLE_S).startswith("Lemma double_")
    assert len(library.similar(DOUBLE_S, n_lines=1).split("\n")) == 1


def test_similar_lemma_withholds_copies_in_other_documents():
    copy = f"(* a copy *)\n{DOUBLE_S.statement}\n{DOUBLE_S.reference_proof}\n"
    library = SourceLibrary({"doc": SOURCE, "other": copy}, own_docs={DOUBLE_S.id: "doc"})
    assert "double_S" not in library.similar(DOUBLE_S)


def test_dependency_facts_come_from_the_reference_proof_and_stop_before_the_target():
    plus = _task("src.double_plus", "Lemma double_plus (n m : nat) : double (n + m) = double n + double m.",
                 "Proof. unfold double. lia. Qed.")
    library = SourceLibrary({"doc": SOURCE, "nat": "Lemma add_succ_r n m : n + S m = S (n + m).\nProof.\n  auto.\n"
                             "Qed.\n\nLemma other : True.\nProof. exact I. Qed.\n"},
                            own_docs={DOUBLE_S.id: "doc", plus.id: "doc"})
    facts = library.dependencies(DOUBLE_S, n_lines=10)
    assert [f.name for f in facts] == ["double", "add_succ_r"]  # tactics (unfold, simpl, rewrite...) are no facts
    double, add = facts
    # Ten lines from the definition would run into the target: the excerpt stops just before it.
    assert double.excerpt.startswith("Definition double (n : nat) := n + n.\n")
    assert double.excerpt.endswith("Proof. reflexivity. Qed.") and "double_S" not in double.excerpt
    assert add.excerpt.startswith("Lemma add_succ_r")
    assert len(library.dependencies(DOUBLE_S, n_lines=2)[1].excerpt.split("\n")) == 2
    assert [f.name for f in library.dependencies(plus)] == ["double"]


def test_demonstrations_are_fixed_per_category_and_left_out_of_evaluation():
    tasks = [_task(f"p1.{i}", f"Lemma p1_{i} : True.", "Proof. exact I. Qed.", "P1") for i in range(8)]
    tasks += [_task(f"p2.{i}", f"Lemma p2_{i} : True.", "Proof. exact I. Qed.", "P2") for i in range(7)]
    tasks += [_task("d.0", "Lemma d0 : True.", "Proof. exact I. Qed.", "D")]
    demos, shared, rest = select_demonstrations(tasks, n=5, seed=0)
    assert set(demos) == {"P1", "P2"} and all(len(d) == 5 for d in demos.values())
    assert shared is demos["P1"]  # the one-task category borrows the largest category's demonstrations
    assert len(rest) == 16 - 10 and not {t.id for d in demos.values() for t in d} & {t.id for t in rest}
    again, _, _ = select_demonstrations(list(reversed(tasks)), n=5, seed=0)
    assert {c: [t.id for t in d] for c, d in again.items()} == {c: [t.id for t in d] for c, d in demos.items()}
    other, _, _ = select_demonstrations(tasks, n=5, seed=1)
    assert [t.id for t in other["P1"]] != [t.id for t in demos["P1"]]
    with pytest.raises(ProofgymError, match="too few"):
        select_demonstrations(tasks[:3], n=5)


def test_prompt_is_instruction_demonstrations_then_target_with_tags():
    demo = prompts.Augmented("Lemma a : True.", sim="Lemma b : True.", dep=(("c", "Definition c := 1."),))
    (message,) = prompts.first_turn("coq", [(demo, "Proof. exact I. Qed.")] * 5, prompts.Augmented("Lemma t : True."))
    text = message["content"]
    assert text.startswith("You are given specifications from Coq sources")
    assert text.count("### Example") == 5 and text.index("### Example 5") < text.index("### Target")
    assert "<sim>\nLemma b : True.\n</sim>" in text and "<dep>\nDefinition c := 1.\n</dep>" in text
    assert text.rstrip().endswith("Specification:\n```coq\nLemma t : True.\n```\nProof:")


def test_fixing_turn_has_error_type_message_and_state_and_the_ablation_has_none():
    result = {"verdict": "FAIL", "error_category": "logic", "messages": ["No more subgoals."],
              "remaining_goals": ["n : nat\n====\nn = n"]}
    demo = prompts.FixingDemo("Lemma d : True.", "Proof. exact I. Qed.", "Proof. auto. Qed.", "Error type: logic")
    text = prompts.fixing_turn("coq", result, [demo, prompts.FixingDemo("Lemma e : True.", "Proof. trivial. Qed.")])
    assert "Error type: logic" in text and "No more subgoals." in text and "Proof state at failure:\nn : nat" in text
    assert text.count("### Fixing example") == 1 and "Proof. auto. Qed." in text  # only failed demos show a fix
    retry = prompts.fixing_turn("coq", None, [demo])
    assert "Try again" in retry and "logic" not in retry and "Fixing example" not in retry


# -- end to end, with a fake verifier ---------------------------------------------------------------------------
def _suite(n_per_cat: int = 4) -> list[Task]:
    tasks = [_task(f"s.p1_{i}", f"Lemma p1_{i} (n : nat) : n + {i} = {i} + n.", f"Proof. good_p1_{i}. Qed.", "P1")
             for i in range(n_per_cat)]
    tasks += [_task(f"s.p2_{i}", f"Lemma p2_{i} (l : list nat) : length l >= {i}.", f"Proof. good_p2_{i}. Qed.", "P2")
              for i in range(n_per_cat)]
    return tasks


def test_fixed_in_round_two_counts_in_fixing_not_in_acc1(tmp_path):
    tasks = _suite()
    strategy = SeleneStrategy(n_demos=2, sim=True, fix="error", seed=0)
    _, _, targets = select_demonstrations(tasks, n=2, seed=0)
    target = targets[0]
    script = {t.id: "```coq\nProof. good. Qed.\n```" for t in targets}
    script[target.id] = ["```coq\nProof. nope. Qed.\n```", "```coq\nProof. good. Qed.\n```"]
    script["*"] = "```coq\nProof. wrong. Qed.\n```"  # demonstrations: the model fails on them
    agent = ScriptedAgent(script)
    out = tmp_path / "run" / "results.jsonl"
    summary = run_eval(tasks, agent=agent, out=out, options=EvalOptions(k=1, verifier=FAKE, progress=False),
                       strategy=strategy)
    cat = target.category
    assert summary.per_category[cat]["pass@1"] == pytest.approx(0.5)  # ACC#1: the target failed first
    assert summary.per_category[cat]["fix@1"] == 1.0                   # fixing: it counts here
    assert summary.per_category["all"]["n"] == len(targets) == 4
    row = next(r for r in read_results(out) if r["task_id"] == target.id)
    assert [a["verdict"] for a in row["attempts"]] == ["FAIL", "OK"] and row["first_verdict"] == "FAIL"
    fix_request = next(r for r in agent.calls if r.task.id == target.id and r.attempt == 1)
    assert [m["role"] for m in fix_request.messages] == ["user", "assistant", "user"]
    fixing = fix_request.messages[-1]["content"]
    assert "Error type: logic" in fixing and "Attempt to save an incomplete proof" in fixing
    assert "### Fixing example" in fixing and "Proof. wrong. Qed." in fixing  # App. D demonstrations
    assert "<sim>" in fix_request.messages[0]["content"]
    # Demonstrations were generated once, verified, cached; a resumed run does not redo them.
    cache = json.loads((tmp_path / "run" / "selene_fixing_demos.json").read_text())
    assert all(d["failed_proof"] == "Proof. wrong. Qed." for ds in cache["demos"].values() for d in ds)
    again = ScriptedAgent(script)
    run_eval(tasks, agent=again, out=out, options=EvalOptions(k=1, verifier=FAKE, progress=False),
             strategy=SeleneStrategy(n_demos=2, sim=True))
    assert again.calls == []


def test_retry_ablation_and_no_fix(tmp_path):
    tasks = _suite()
    retry_agent = ScriptedAgent({"*": ["nope", "good"]})
    summary = run_eval(tasks, agent=retry_agent, out=tmp_path / "a.jsonl",
                       options=EvalOptions(k=1, verifier=FAKE, progress=False),
                       strategy=make_strategy("selene", n_demos=2, fix="retry"))
    assert summary.per_category["all"]["pass@1"] == 0.0 and summary.per_category["all"]["fix@1"] == 1.0
    second = next(r for r in retry_agent.calls if r.attempt == 1).messages[-1]["content"]
    assert "Try again" in second and "Error" not in second
    none = run_eval(tasks, agent=ScriptedAgent({"*": ["nope", "good"]}), out=tmp_path / "b.jsonl",
                    options=EvalOptions(k=1, verifier=FAKE, progress=False),
                    strategy=make_strategy("selene", n_demos=2, fix="none"))
    assert none.max_attempts == 1 and "fix@1" not in none.per_category["all"]


def test_a_seeded_sample_per_category_is_evaluated_after_the_demonstrations_are_drawn(tmp_path):
    tasks = _suite(n_per_cat=9)
    _, _, targets = select_demonstrations(tasks, n=2, seed=0)  # 7 targets per category
    chosen = sample_per_category(targets, 3, seed=0)
    assert sorted(t.category for t in chosen) == ["P1"] * 3 + ["P2"] * 3
    assert [t.id for t in sample_per_category(list(reversed(targets)), 3, seed=0)] == \
        [t.id for t in reversed(chosen)]  # the draw does not depend on the order, only on the seed
    assert {t.id for t in sample_per_category(targets, 3, seed=1)} != {t.id for t in chosen}
    assert len(sample_per_category(targets, 50, seed=0)) == len(targets)  # a smaller category is taken whole
    agent = ScriptedAgent({"*": "good"})
    summary = run_eval(tasks, agent=agent, out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, verifier=FAKE, progress=False),
                       strategy=make_strategy("selene", n_demos=2, fix="none", per_category=3))
    assert {r["task_id"] for r in read_results(tmp_path / "r.jsonl")} == {t.id for t in chosen}
    assert summary.per_category["all"]["n"] == 6 and summary.per_category["P1"]["n"] == 3
    with pytest.raises(ProofgymError, match="per_category"):
        make_strategy("selene", per_category=-1)
    # Described only when set, so a run made before the option resumes as the same run.
    assert "per_category" not in make_strategy("selene").describe()
    assert make_strategy("selene", per_category=3).describe()["per_category"] == 3


def test_dependency_augmentation_marks_the_run_as_an_upper_bound(tmp_path):
    summary = run_eval(_suite(), agent=ScriptedAgent({"*": "good"}), out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, verifier=FAKE, progress=False),
                       strategy=make_strategy("selene", n_demos=2, dep=True, fix="none"))
    assert summary.upper_bound and UPPER_BOUND_NOTE in summary.notes
    assert summary.to_dict()["upper_bound"] is True


# -- with Coq ----------------------------------------------------------------------------------------------------
@pytest.mark.prover
@requires_coq
def test_selene_fixing_round_with_real_coq(tiny_suite, tmp_path):
    tasks = load_tasks(tiny_suite)
    wrong = "```coq\nProof. reflexivity. Qed.\n```"
    right = "```coq\nProof. induction n; simpl; [reflexivity | now rewrite IHn]. Qed.\n```"
    agent = ScriptedAgent({"tiny.add_0_r": [wrong, right], "*": "```coq\nProof. auto. Qed.\n```"})
    strategy = SeleneStrategy(n_demos=2, sim=True, seed=3)
    summary = run_eval(tasks, agent=agent, out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, workers=2, progress=False), strategy=strategy)
    assert "tiny.add_0_r" not in strategy.demo_ids()["P1"], "pick a seed that keeps the target"
    row = next(r for r in read_results(tmp_path / "r.jsonl") if r["task_id"] == "tiny.add_0_r")
    assert [a["verdict"] for a in row["attempts"]] == ["FAIL", "OK"]
    fixing = next(r for r in agent.calls if r.task.id == "tiny.add_0_r" and r.attempt == 1).messages[-1]["content"]
    assert "Error type: logic" in fixing and "Proof state at failure" in fixing
    assert summary.harness_failures == 0 and summary.max_attempts == 2
    assert summary.per_category["all"]["fix@1"] > summary.per_category["all"]["pass@1"]


@pytest.mark.prover
@requires_coq
def test_library_over_real_stdlib_sources_withholds_the_target():
    from proofgym.envs.tasks.coq_extract import extract_lemmas, lemma_to_task, stdlib_root

    root = stdlib_root()
    lemmas = extract_lemmas(root / "Lists" / "List.v", "Coq.Lists.List")
    tasks = [lemma_to_task(lem, task_id=f"coq.stdlib.Lists.List.{lem.name}", rel_path="Lists/List.v")
             for lem in lemmas[:200]]
    library = SourceLibrary.from_tasks(tasks)
    assert list(library.docs) == [str(root / "Lists" / "List.v")]
    checked = 0
    for task in tasks:
        sim = library.similar(task)
        assert task.statement not in sim
        if len(task.reference_proof) > 60:
            assert task.reference_proof not in sim
            checked += 1
    assert checked > 10
    uses = next(t for t in tasks if "app_nil_r" in t.reference_proof and not t.statement.startswith("Lemma app_nil_r"))
    assert any(f.name == "app_nil_r" for f in library.dependencies(uses))


@pytest.mark.prover
@requires_coq
def test_library_of_an_installed_project_suite_reads_its_sources_under_user_contrib():
    from proofgym.envs.tasks.coq_extract import stdlib_root

    source = stdlib_root().parent / "user-contrib" / "stdpp" / "list.v"
    if not source.is_file():
        pytest.skip("stdpp is not installed: apt-get install -y libcoq-stdpp (scripts/setup.sh installs it)")
    # A suite built before metadata.source_path names its file as stdpp/list.v, under user-contrib.
    task = _task("coq.stdpp.list.x", "Lemma x : True.", "Proof. exact I. Qed.", file="stdpp/list.v")
    library = SourceLibrary.from_tasks([task])
    assert list(library.docs) == [str(source)] and "Lemma" in library.similar(task)
