"""One fence rule for every prover and every way a proof enters (issue 26).

A model's reply wraps its code in Markdown fences, sometimes opened mid-line (``Sure: ```coq``) or closed at the
end of the last code line (``Qed.```\u200b``). The reply parser (eval, the service's ``parse``, the TRL rewards)
and the verifiers (``proofgym check``, ``env.step``) read the fence with the same function,
:func:`proofgym.envs.parsing.last_code_block`, so a correct fenced proof is checked as the proof it is on every
path, never ERROR ("EOF expected") and never an empty proof.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from proofgym.envs.parsing import last_code_block, parse_proof
from proofgym.envs.tasks.suites import load_tasks as load_suite
from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.base import FENCE_NOTE
from tests.conftest import requires_coq
from tests.test_dafny_common import dafny_verifier, requires_dafny

COQ_PROOF = "Proof. induction l; simpl; congruence. Qed."

#: (reply, the code the rule takes out): every way of fencing seen in model output.
REPLIES = [
    (f"```coq\n{COQ_PROOF}\n```", COQ_PROOF),
    (f"Sure: ```coq\n{COQ_PROOF}\n```\nDone.", COQ_PROOF),           # opened mid-line
    (f"Here it is:```coq\n{COQ_PROOF}\n```", COQ_PROOF),             # opened right after a colon
    (f"```coq\n{COQ_PROOF}```", COQ_PROOF),                           # closed at the end of the code line
    (f"{COQ_PROOF}\n```\n", COQ_PROOF),                               # a closer with no opener
    (f"~~~\n{COQ_PROOF}\n~~~", COQ_PROOF),
    (f"```coq\n{COQ_PROOF}\n", COQ_PROOF),                            # cut at the token limit
    ('```coq\nProof. idtac "```". Qed.\n```', 'Proof. idtac "```". Qed.'),  # backquotes inside code stay
]


@pytest.mark.parametrize(("reply", "code"), REPLIES)
def test_the_reply_parser_and_the_verifier_boundary_read_a_fence_alike(reply, code):
    assert parse_proof(reply).proof == code
    assert last_code_block(reply)[0].strip() == code


def test_text_without_a_fence_is_left_alone():
    assert last_code_block(COQ_PROOF) == (COQ_PROOF, False, True)


def _coq_task():
    return next(t for t in load_suite("coq-tiny") if t.id == "coq.tiny.app_nil")


@requires_coq
@pytest.mark.prover
@pytest.mark.parametrize(("reply", "code"), REPLIES[:7])
def test_a_fenced_coq_proof_is_checked_as_its_code(coq_verifier, reply, code):
    result = coq_verifier.check(_coq_task(), reply)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
    assert result.messages[0] == FENCE_NOTE


@requires_coq
@pytest.mark.prover
def test_a_hole_inside_a_fence_is_still_a_hole(coq_verifier):
    result = coq_verifier.check(_coq_task(), "Sure: ```coq\nProof. Admitted.\n```")
    assert result.verdict is Verdict.CHEATING, result.reasons


@requires_coq
@pytest.mark.prover
def test_an_empty_fence_is_an_error_that_says_so(coq_verifier):
    result = coq_verifier.check(_coq_task(), "Here is the proof:\n```coq\n```\n")
    assert result.verdict is Verdict.ERROR
    assert "fenced code block is empty" in result.reasons[0]


def _dafny_task():
    return next(t for t in load_suite("dafny-nl") if t.id == "dafny.nl.abs")


@requires_dafny
@pytest.mark.prover
def test_a_fenced_dafny_program_is_ok_in_check_and_in_the_env():
    verifier = dafny_verifier()
    task = _dafny_task()
    reply = f"Sure: ```dafny\n{task.reference_proof}```"
    result = verifier.check(task, reply)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
    env = gym.make("proofgym/WholeProof-v0", tasks="dafny-nl", verifier=verifier, disable_env_checker=True)
    try:
        env.reset(seed=0, options={"task_id": task.id})
        _, reward, terminated, _, info = env.step(f"```dafny\n{task.reference_proof}\n```")
    finally:
        env.close()
    assert (info["verdict"], reward, terminated) == ("OK", 1.0, True)


@requires_dafny
@pytest.mark.prover
def test_proofgym_check_reads_a_fenced_dafny_reply(tmp_path: Path):
    task = _dafny_task()
    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(task.to_dict()))
    reply = tmp_path / "reply.md"
    reply.write_text(f"Here is the program:\n```dafny\n{task.reference_proof}\n```\nIt verifies.\n")
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "check", str(task_file), "--proof", str(reply),
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "OK"
