"""Verification that overlaps generation: a chunk's proofs go to the verifier as soon as it is decoded.

Where proofgym generates itself (the curriculum's pass-rate estimates and expert iteration's sampling, through
:func:`~proofgym.training.sampling.sample_and_check`; the repair rollout's turns,
:class:`~proofgym.training.rollout.RepairRollout`), it used to generate a chunk, check it, then generate the
next: the verifier idled while the model generated, and the model while the verifier checked.
:func:`check_while_generating` pulls the chunks from a lazy iterable (pulling one generates it) and hands each
chunk's proofs to the verifier in a background thread at once, so the next chunk generates while they are
checked. It is bounded: at most ``depth`` chunks are being checked while the next one generates (generation waits
for the oldest beyond that), and the results come back in chunk order, so a caller sees exactly what the
unpipelined loop (``depth=0``) gives. The checks run on whatever the checker checks on (a local pool, the node's
verifier service, Ray): its ``check_batch`` is called from the thread, the pool's own back-pressure applies.

The local agent's evaluation (:mod:`proofgym.training.eval_engine`) already overlaps the two: it generates the
next batch in a background thread while the env steps of the last one wait on the pool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from proofgym.envs.types import Task

Payload = TypeVar("Payload")
Result = TypeVar("Result")

#: Chunks being checked while the next generates, by default.
DEFAULT_DEPTH = 1


def check_while_generating(chunks: Iterable[tuple[Payload, Sequence[Task], Sequence[str]]],
                           check: Callable[[Sequence[Task], Sequence[str]], list[Result]], *,
                           depth: int = DEFAULT_DEPTH) -> Iterator[tuple[Payload, list[Result]]]:
    """Each chunk with its checks' results, in chunk order; a chunk's checks run while the next chunk generates.

    Args:
        chunks: ``(payload, tasks, proofs)`` per chunk, made lazily (pulling the next one generates it).
            ``payload`` comes back with the chunk's results (its texts, ids...).
        check: Checks one chunk: ``check(tasks, proofs)`` -> one result per proof, in order (e.g.
            :meth:`~proofgym.training.rewards.VerifierReward.check`, which never raises for a harness failure).
        depth: Chunks being checked while the next one generates (0: check each chunk before generating the next,
            the unpipelined loop).

    Example (a checker that checks at once; with a real pool the checks of chunk 1 run while chunk 2 generates)::

        >>> parts = (((i,), [], [f"proof {i}"]) for i in range(3))
        >>> list(check_while_generating(parts, lambda tasks, proofs: [len(p) for p in proofs]))
        [((0,), [7]), ((1,), [7]), ((2,), [7])]
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    if depth == 0:
        for payload, tasks, proofs in chunks:
            yield payload, check(tasks, proofs)
        return
    inflight: deque[tuple[Payload, Future[list[Result]]]] = deque()
    # One thread more than depth: the newest chunk's checks start at once, beside the ones being waited for.
    executor = ThreadPoolExecutor(max_workers=depth + 1, thread_name_prefix="proofgym-check")
    try:
        for payload, tasks, proofs in chunks:  # pulling a chunk generates it while the earlier chunks' checks run
            inflight.append((payload, executor.submit(check, list(tasks), list(proofs))))
            while inflight and (len(inflight) > depth or inflight[0][1].done()):
                done_payload, future = inflight.popleft()
                yield done_payload, future.result()
        while inflight:
            done_payload, future = inflight.popleft()
            yield done_payload, future.result()
    finally:  # an error, Ctrl-C or a caller that stops early: checks not started are dropped, and a running one
        # is not waited for (its result is dropped; a pool closed under it makes it a harness failure, not an error)
        executor.shutdown(wait=False, cancel_futures=True)


def check_nonempty(check: Callable[[Sequence[Task], Sequence[str]], list[Any]]
                   ) -> Callable[[Sequence[Task], Sequence[str]], list[Any]]:
    """``check`` that answers an empty chunk (a rank's padding rows only) without calling the verifier."""
    def checked(tasks: Sequence[Task], proofs: Sequence[str]) -> list[Any]:
        return check(tasks, proofs) if tasks else []

    return checked
