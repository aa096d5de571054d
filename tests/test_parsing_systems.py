"""The output parser keeps a Dafny program's spec (the answer is the whole program)."""

from __future__ import annotations

from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.types import Task

SPEC = "method Abs(x: int) returns (y: int)\n  ensures y >= 0"
PROGRAM = SPEC + "\n{\n  if x < 0 { y := -x; } else { y := x; }\n}"


def test_dafny_program_keeps_its_header():
    task = Task(id="d", system="dafny", context="", statement=SPEC, reference_proof=PROGRAM, category="simple",
                timeout_s=30)
    reply = f"Here it is:\n```dafny\n{PROGRAM}\n```"
    assert statement_to_strip(task) == ""
    assert parse_proof(reply, statement=statement_to_strip(task)).proof.startswith("method Abs")


def test_coq_reply_keeps_the_statement_for_the_verifier():
    # One rule for every path: the Coq verifier drops a repeated statement itself, in any layout.
    from proofgym.envs.verifiers.coq.proof import normalize_proof

    task = Task(id="c", system="coq", context="", statement="Lemma t : True.", reference_proof="exact I.",
                category="P1", timeout_s=30)
    parsed = parse_proof("```coq\nTheorem t :\n  True.\nProof. exact I. Qed.\n```",
                         statement=statement_to_strip(task))
    assert parsed.proof.startswith("Theorem t")
    assert normalize_proof(parsed.proof, task.statement).sentences == ("Proof.", "(exact I).", "Qed.")
