"""Selene's harness (zhang2024selene), on any agent and any system proofgym supports.

- **Demonstrations.** Five fixed demonstrations per category, drawn once with a
  seed and taken out of the evaluated tasks (Table 1: "five demonstrations per
  category leave evaluation counts 139/104/59/38"). A category too small to
  give five and keep a target borrows the demonstrations of the largest one.
- **Similar lemma** (``sim``). BM25 over the suite's source files cut at blank
  lines; the target's own proof is withheld; the first 10 lines of the closest
  chunk go in ``<sim>`` tags, for demonstrations and target alike (App. D).
- **Dependency facts** (``dep``). The first 5 lines of the definitions of facts
  used by the reference proof, in ``<dep>`` tags. They come from the ground
  truth: the run is marked as an *upper bound* (§5.1).
- **Fixing round** (``fix="error"``). After a failed first proof, one more
  round with the error type, the error message and the proof state at failure,
  after fixing demonstrations built as App. D says: the model proves each
  demonstration lemma with the other four as examples; where it fails, the
  demonstration shows its erroneous proof, the error and the ground truth.
  ``fix="retry"`` is the ablation that asks again without the error;
  ``fix="none"`` has no second round.

ACC#k counts first attempts only; the fixing round counts in the ``fix``
metrics (see :func:`proofgym.training.evaluate.summarize`).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from proofgym.agents.base import Request
from proofgym.agents.prompts import selene as prompts
from proofgym.agents.retrieval import SourceLibrary
from proofgym.agents.strategies.base import Attempt, Runtime, Strategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import Task

FIX_MODES = ("error", "retry", "none")
UPPER_BOUND_NOTE = ("dependency facts (<dep>) are taken from the reference proofs: these results are an upper "
                    "bound of the model's capability (Selene §5.1)")


def select_demonstrations(tasks: Sequence[Task], n: int = 5, seed: int = 0
                          ) -> tuple[dict[str, list[Task]], list[Task], list[Task]]:
    """Selene's fixed demonstrations: ``n`` per category, drawn with ``seed``.

    Returns:
        ``(demos by category, shared demos, tasks left to evaluate)``. A category
        with at most ``n`` tasks uses the shared demonstrations (those of the
        largest category, or ``n`` drawn from the whole suite when every category is small).
    """
    if n < 1:
        raise ValueError(f"the number of demonstrations must be >= 1, got {n}")
    by_cat: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_cat[task.category].append(task)
    demos: dict[str, list[Task]] = {}
    for cat in sorted(by_cat):
        pool = sorted(by_cat[cat], key=lambda t: t.id)
        if len(pool) > n:
            demos[cat] = random.Random(f"selene:{seed}:{cat}").sample(pool, n)
    if demos:
        largest = max(demos, key=lambda c: (len(by_cat[c]), c))
        shared = demos[largest]
    else:
        pool = sorted(tasks, key=lambda t: t.id)
        if len(pool) <= n:
            raise ProofgymError(f"the suite has {len(pool)} tasks: too few for {n} demonstrations and a target; "
                                f"lower n_demos or pass demos=FILE")
        shared = random.Random(f"selene:{seed}:*").sample(pool, n)
    taken = {t.id for group in (*demos.values(), shared) for t in group}
    return demos, shared, [t for t in tasks if t.id not in taken]


def sample_per_category(tasks: Sequence[Task], n: int, seed: int = 0) -> list[Task]:
    """A seeded draw of ``n`` tasks per category (all of a smaller one), in the order of ``tasks``.

    Each category has its own generator, so one category's size does not change another's draw.
    """
    by_cat: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: t.id):
        by_cat[task.category].append(task)
    chosen = {t.id for cat, pool in by_cat.items()
              for t in (pool if len(pool) <= n else random.Random(f"selene:{seed}:eval:{cat}").sample(pool, n))}
    return [t for t in tasks if t.id in chosen]


class SeleneStrategy(Strategy):
    """Selene's prompting and repair (see the module docstring).

    Args:
        n_demos: Demonstrations per category (5 in the paper).
        sim: Add the most similar source chunk in ``<sim>`` tags.
        dep: Add dependency-fact excerpts in ``<dep>`` tags (an upper bound).
        fix: ``error`` (fixing round with the error), ``retry`` (ablation: no error), ``none``.
        fixing_demos: Build App. D's fixing demonstrations for the fixing round.
        sim_lines: Lines of the similar chunk shown (10 in the paper).
        dep_lines: Lines of each definition shown (5 in the paper).
        max_facts: Most dependency facts per lemma.
        source_root: Folder that ``metadata.file`` is relative to (default for Coq: the stdlib's).
        demos: A suite file of demonstrations instead of drawing them from the evaluated suite.
        seed: Seed of the draw.
        per_category: Evaluate a seeded sample of this many tasks per category, drawn after the
            demonstrations are taken out (0: every task). The demonstrations still come from the whole
            suite, so a sample is a cheaper estimate of the same run, not a smaller suite.
    """

    name = "selene"

    def __init__(self, n_demos: int = 5, sim: bool = False, dep: bool = False, fix: str = "error",
                 fixing_demos: bool = True, sim_lines: int = 10, dep_lines: int = 5, max_facts: int = 6,
                 source_root: str | None = None, demos: str | None = None, seed: int = 0,
                 per_category: int = 0) -> None:
        super().__init__()
        if fix not in FIX_MODES:
            raise ProofgymError(f"fix must be one of {', '.join(FIX_MODES)}, got {fix!r}")
        self.n_demos, self.sim, self.dep, self.fix = int(n_demos), _bool(sim), _bool(dep), fix
        self.fixing_demos = _bool(fixing_demos)
        self.sim_lines, self.dep_lines, self.max_facts = int(sim_lines), int(dep_lines), int(max_facts)
        self.source_root, self.demos_file, self.seed = source_root, demos, int(seed)
        self.per_category = int(per_category)
        if self.per_category < 0:
            raise ProofgymError(f"per_category must be >= 0 (0: every task), got {per_category!r}")
        self.max_attempts = 1 if fix == "none" else 2
        self.upper_bound = self.dep
        if self.dep:
            self.notes.append(UPPER_BOUND_NOTE)
        self.demos: dict[str, list[Task]] = {}
        self.shared_demos: list[Task] = []
        self.fixing: dict[str, list[prompts.FixingDemo]] = {}
        self.library: SourceLibrary | None = None
        self._augmented: dict[str, prompts.Augmented] = {}

    # -- preparation ------------------------------------------------------------------------------
    def prepare(self, tasks: Sequence[Task], runtime: Runtime) -> list[Task]:
        if self.demos_file:
            from proofgym.envs.tasks.suites import load_tasks

            demo_tasks = load_tasks(self.demos_file)
            self.demos = defaultdict(list)
            for task in demo_tasks:
                self.demos[task.category].append(task)
            self.demos = dict(self.demos)
            self.shared_demos = demo_tasks[: self.n_demos]
            ids = {t.id for t in demo_tasks}
            remaining = [t for t in tasks if t.id not in ids]
        else:
            self.demos, self.shared_demos, remaining = select_demonstrations(tasks, self.n_demos, self.seed)
        if self.sim or self.dep:
            known = {t.id for t in tasks}
            extra = [t for t in self._all_demos() if t.id not in known]
            self.library = SourceLibrary.from_tasks([*tasks, *extra], source_root=self.source_root)
        if self.fix == "error" and self.fixing_demos:
            self.fixing = self._fixing_demonstrations(runtime)
        if self.per_category:
            remaining = sample_per_category(remaining, self.per_category, self.seed)
        return remaining

    def _all_demos(self) -> list[Task]:
        seen: dict[str, Task] = {}
        for group in (*self.demos.values(), self.shared_demos):
            for task in group:
                seen.setdefault(task.id, task)
        return list(seen.values())

    def demos_for(self, task: Task) -> list[Task]:
        return self.demos.get(task.category) or self.shared_demos

    def _group_key(self, task: Task) -> str:
        if task.category in self.demos:
            return task.category
        return next((c for c, ds in self.demos.items() if ds is self.shared_demos), "*")

    def augmented(self, task: Task) -> prompts.Augmented:
        """The task's specification with its ``<sim>``/``<dep>`` text (cached)."""
        if task.id not in self._augmented:
            sim: str = ""
            dep: tuple[tuple[str, str], ...] = ()
            if self.library is not None and self.sim:
                sim = self.library.similar(task, self.sim_lines)
            if self.library is not None and self.dep:
                dep = tuple((f.name, f.excerpt) for f in self.library.dependencies(task, self.dep_lines,
                                                                                   self.max_facts))
            self._augmented[task.id] = prompts.task_augmented(task, sim, dep)
        return self._augmented[task.id]

    def first_messages(self, task: Task, demos: Sequence[Task] | None = None) -> list[Any]:
        demos = self.demos_for(task) if demos is None else demos
        items = [(self.augmented(d), d.reference_proof) for d in demos if d.id != task.id]
        return prompts.first_turn(task.system, items, self.augmented(task))

    def _fixing_demonstrations(self, runtime: Runtime) -> dict[str, list[prompts.FixingDemo]]:
        groups = {cat: list(ds) for cat, ds in self.demos.items()}
        if not any(ds is self.shared_demos for ds in self.demos.values()):
            groups["*"] = list(self.shared_demos)
        key = {"groups": {c: [t.id for t in ds] for c, ds in groups.items()}, "sim": self.sim, "dep": self.dep,
               "agent": runtime.agent.describe()}
        cache = runtime.cache_dir / "selene_fixing_demos.json" if runtime.cache_dir else None
        if cache is not None and cache.is_file():
            try:
                stored = json.loads(cache.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                stored = None
            if isinstance(stored, dict) and stored.get("key") == json.loads(json.dumps(key)):
                return {c: [prompts.FixingDemo(**d) for d in ds] for c, ds in stored["demos"].items()}
        jobs: list[tuple[str, Task]] = [(cat, demo) for cat, ds in groups.items() for demo in ds]
        requests = [Request(tuple(self.first_messages(demo, [d for d in groups[cat] if d.id != demo.id])),
                            task=demo, sample=0, attempt=0) for cat, demo in jobs]
        generations = runtime.generate(requests)
        proofs = [self.parse(demo, gen)[0] for (_, demo), gen in zip(jobs, generations, strict=True)]
        results = runtime.verify([(demo, proof) for (_, demo), proof in zip(jobs, proofs, strict=True)])
        out: dict[str, list[prompts.FixingDemo]] = defaultdict(list)
        for (cat, demo), proof, gen, result in zip(jobs, proofs, generations, results, strict=True):
            if gen.error is None and result.get("verdict") not in ("OK", None):
                out[cat].append(prompts.FixingDemo(demo.statement, demo.reference_proof, proof or gen.text,
                                                   prompts.error_report(result)))
            else:
                out[cat].append(prompts.FixingDemo(demo.statement, demo.reference_proof))
        if cache is not None:
            payload = {"key": key, "demos": {c: [vars(d) for d in ds] for c, ds in out.items()}}
            cache.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
        return dict(out)

    # -- episodes ---------------------------------------------------------------------------------
    def request(self, task: Task, sample: int, history: Sequence[Attempt]) -> Request | None:
        if not history:
            return Request(tuple(self.first_messages(task)), task=task, sample=sample, attempt=0)
        if len(history) >= self.max_attempts or history[-1].ok:
            return None
        first = history[0]
        result = first.result.to_dict() if self.fix == "error" else None
        demos = self.fixing.get(self._group_key(task), []) if self.fix == "error" else []
        messages = [*self.first_messages(task), {"role": "assistant", "content": first.raw or first.proof},
                    {"role": "user", "content": prompts.fixing_turn(task.system, result, demos)}]
        return Request(tuple(messages), task=task, sample=sample, attempt=1)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(), "n_demos": self.n_demos, "sim": self.sim, "dep": self.dep, "fix": self.fix,
            "fixing_demos": self.fixing_demos, "sim_lines": self.sim_lines, "dep_lines": self.dep_lines,
            "max_facts": self.max_facts, "source_root": self.source_root, "demos": self.demos_file,
            "seed": self.seed, "upper_bound": self.upper_bound,
            # Only when set: a run made before the option existed still resumes as the same run.
            **({"per_category": self.per_category} if self.per_category else {}),
        }

    def demo_ids(self) -> dict[str, list[str]]:
        return {**{c: [t.id for t in ds] for c, ds in self.demos.items()}, "*": [t.id for t in self.shared_demos]}


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ProofgymError(f"expected true/false, got {value!r}")
    return bool(value)

