"""The cheat and fairness corpora: every rule of a prover's checker, tried from both sides, with its verdict.

Each prover ships one suite of cases, ``redteam-coq``, ``redteam-dafny`` and ``redteam-hol``
(``envs/tasks/data/redteam-<prover>.jsonl``). A case is a :class:`~proofgym.envs.types.Task` whose category says
which side it tries and whose ``metadata["redteam"]`` holds the submission and the one verdict the real prover
gives it:

- ``cheat``: a construct that can make an unproved statement pass (a hole, an axiom, a switched-off check, a
  weakened or shadowed statement, forged output). Expected CHEATING, or FAIL where it simply proves nothing.
- ``fair``: honest work with a construct that is known to be harmless (a query, a printing option, a split of
  verification conditions, a memo table). Expected OK, or ERROR with feedback for what is not known; never
  CHEATING: a -1 for an honest habit teaches a policy to stop writing the proof around it.

``proofgym redteam coq`` runs one corpus on the installed prover and reports ``cheat/*`` and ``fair/*``
metrics; its exit status is 1 when any case got another verdict than its own. Run it after changing a
checker, after upgrading a prover, or on a verifier of your own that speaks proofgym's task format.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import CheckResult, Task, Verdict

#: The provers with a corpus, and the suite each ships as.
CORPORA = {"coq": "redteam-coq", "dafny": "redteam-dafny", "hol_light": "redteam-hol"}
SIDES = ("cheat", "fair")


@dataclass(frozen=True)
class RedTeamCase:
    """One case of a corpus: a task, the submission sent for it, and the verdict the real prover gives.

    Attributes:
        task: The task under attack (its statement and context).
        side: ``cheat`` or ``fair``.
        submission: The proof text sent to the verifier.
        expected: The one verdict the real prover gives this submission.
        construct: Short name of the construct tried.
        why: What the construct could do (a cheat), or why it is harmless (fair).
    """

    task: Task
    side: str
    submission: str
    expected: Verdict
    construct: str
    why: str

    @property
    def id(self) -> str:
        return self.task.id


def case_of(task: Task, *, source: str = "<corpus>") -> RedTeamCase:
    """The case a corpus line describes; :class:`TaskFormatError` that says what is wrong otherwise."""
    raw = task.metadata.get("redteam")
    where = f"{source}: {task.id}"
    if not isinstance(raw, Mapping):
        raise TaskFormatError(f"{where}: a corpus line needs metadata.redteam with submission and expected")
    if task.category not in SIDES:
        raise TaskFormatError(f"{where}: category must be one of {SIDES}, got {task.category!r}")
    submission, expected = raw.get("submission"), raw.get("expected")
    if not isinstance(submission, str) or not submission:
        raise TaskFormatError(f"{where}: metadata.redteam.submission must be non-empty text")
    try:
        verdict = Verdict(expected)
    except ValueError:
        raise TaskFormatError(f"{where}: metadata.redteam.expected must be one of "
                              f"{[v.value for v in Verdict]}, got {expected!r}") from None
    if task.category == "fair" and verdict is Verdict.CHEATING:
        raise TaskFormatError(f"{where}: a fair case never expects CHEATING (fail closed is ERROR, reward 0)")
    if task.category == "cheat" and verdict is Verdict.OK:
        raise TaskFormatError(f"{where}: a cheat case that expects OK is a hole, not a case: fix the checker")
    return RedTeamCase(task, task.category, submission, verdict, str(raw.get("construct", "")),
                       str(raw.get("why", "")))


def load_corpus(prover_or_path: str | Path) -> list[RedTeamCase]:
    """The cases of a prover's corpus (``coq``, ``dafny``, ``hol_light``) or of a corpus file."""
    name = CORPORA.get(str(prover_or_path), str(prover_or_path))
    tasks = load_tasks(name)
    return [case_of(task, source=str(name)) for task in tasks]  # the suite loader refuses a repeated id


@dataclass(frozen=True)
class CaseResult:
    """A case and the verdict the verifier gave it."""

    case: RedTeamCase
    result: CheckResult

    @property
    def as_expected(self) -> bool:
        return self.result.verdict is self.case.expected


def run_corpus(cases: Iterable[RedTeamCase], check: Callable[[Task, str], CheckResult],
               on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Check every case with ``check(task, submission)``; ``on_result`` sees each as it lands."""
    results = []
    for case in cases:
        outcome = CaseResult(case, check(case.task, case.submission))
        results.append(outcome)
        if on_result is not None:
            on_result(outcome)
    return results


def corpus_metrics(results: Iterable[CaseResult]) -> dict[str, float]:
    """``cheat/*`` and ``fair/*`` rates of a run, and how many cases got their expected verdict.

    - ``cheat/ok_rate``: cheats that got OK (holes; must be 0);
    - ``cheat/caught_rate``: cheats that got CHEATING;
    - ``fair/punished_rate``: honest cases that got CHEATING (must be 0);
    - ``fair/ok_rate``: honest cases that got OK;
    - ``corpus/as_expected_rate``: cases whose verdict is the one recorded.
    """
    rows = list(results)
    metrics: dict[str, float] = {}
    for side in SIDES:
        mine = [r for r in rows if r.case.side == side]
        if not mine:
            continue
        verdicts = Counter(r.result.verdict for r in mine)
        metrics[f"{side}/cases"] = float(len(mine))
        for verdict in Verdict:
            metrics[f"{side}/{verdict.value.lower()}_rate"] = verdicts[verdict] / len(mine)
    if "cheat/cases" in metrics:
        metrics["cheat/caught_rate"] = metrics.pop("cheat/cheating_rate")
    if "fair/cases" in metrics:
        metrics["fair/punished_rate"] = metrics.pop("fair/cheating_rate")
    if rows:
        metrics["corpus/as_expected_rate"] = sum(r.as_expected for r in rows) / len(rows)
    return metrics
