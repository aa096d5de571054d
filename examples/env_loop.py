"""Quick start 1: the Gymnasium loop. Make ``WholeProof-v0``, reset to a task, step proofs, read the verdicts.

    python examples/env_loop.py

Runs on the ``coq-tiny`` suite that ships with proofgym (needs ``coqc``: ``make setup`` installs it).
Two episodes: a wrong proof then a right one (FAIL with the prover's feedback, then OK: terminated), and a
proof that cheats with ``Admitted`` (CHEATING, reward -1, with the reason; the episode goes on, so the next
attempt can be an honest one, until ``max_attempts``).
"""

from __future__ import annotations

import gymnasium as gym

import proofgym  # noqa: F401  (registers proofgym/WholeProof-v0 and proofgym/Tactic-v0)


def main() -> None:
    env = gym.make("proofgym/WholeProof-v0", tasks="coq-tiny", max_attempts=2)
    try:
        obs, info = env.reset(seed=0, options={"task_id": "coq.tiny.add_0_r"})
        print("task:", obs["task_id"], "|", obs["statement"])
        for proof in ("Proof. reflexivity. Qed.",              # n + 0 does not reduce for a variable n
                      "Proof. induction n; simpl; congruence. Qed."):
            obs, reward, terminated, truncated, info = env.step(proof)
            print("verdict:", info["verdict"], "reward:", reward, "terminated:", terminated)
            if not terminated:  # the observation's feedback is what the next attempt is told
                print("feedback:", obs["feedback"].splitlines()[2])

        env.reset(options={"task_id": "coq.tiny.and_comm"})
        obs, reward, terminated, truncated, info = env.step("Proof. Admitted.")
        print("verdict:", info["verdict"], "reward:", reward, "terminated:", terminated, "|", info["reasons"][0])
    finally:
        env.close()


if __name__ == "__main__":
    main()
