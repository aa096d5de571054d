"""Soak test: many WholeProof-v0 episodes through the verifier pool, mixing honest proofs, cheats, loops
and garbage; then RSS growth of the verifier processes, leftover processes, and verdicts against a
serial run.

Why: a pool that is right for 100 checks can still leak memory in a warm prover, leave a process
behind after a timeout, or give a different verdict under concurrency than alone. This runs the
envs the way training does (many envs in threads sharing one pool) and measures all three.

    python scripts/soak.py --episodes 10000 --workers 2                  # the Coq suites found here
    python scripts/soak.py --episodes 200 --json runs/soak.json          # a short one, machine-readable

Suites (``--systems coq,hol_light``): Coq's ``tests/data/tiny_suite.jsonl`` plus ``coq-stdlib`` when built;
HOL Light's ``hol-light`` suite when built, else a handful of goals (:data:`HOL_TASKS`). Each system brings its
own cheats, loop and garbage.
"Serial" verdicts come from one fresh verifier per system, no pool, one distinct (task, proof) at a
time; every episode's verdicts must equal them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

import proofgym  # noqa: F401 - registers the envs
from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.types import Task
from proofgym.envs.verifiers.sandbox import procfs

ROOT = Path(__file__).resolve().parents[1]
TINY_SUITE = ROOT / "tests" / "data" / "tiny_suite.jsonl"

#: Episode kinds and their weights.
MIX = {"honest": 0.52, "repair": 0.08, "cheat": 0.18, "loop": 0.02, "garbage": 0.20}
LOOP_TIMEOUT_S = 2.0

COQ_CHEATS = (
    "Proof. Admitted.",
    "Admitted.",
    "Proof. admit. Qed.",
    "Proof. give_up. Qed.",
    "Proof. Abort.",
    "Proof. Unset Guard Checking. Qed.",
    "Proof. Axiom soak_cheat : forall P : Prop, P. apply soak_cheat. Qed.",
    'Proof. Redirect "soak" Print nat. Qed.',
    "Proof. exact (False_rect _ soak_undefined). Qed.",
)
COQ_LOOP = "Proof. repeat (idtac; assert True by exact I). Qed."

#: HOL Light tasks used when HOL Light is installed and no HOL suite is built (goal, honest tactic).
HOL_TASKS = (
    ("1 + 1 = 2", "ARITH_TAC"),
    ("!n. n + 0 = n", "REWRITE_TAC[ADD_CLAUSES]"),
    ("!n. n + 0 = n", "INDUCT_TAC THEN ASM_REWRITE_TAC[ADD_CLAUSES]"),
    ("p /\\ q ==> q /\\ p", "MESON_TAC[]"),
    ("!l:A list. APPEND l [] = l", "LIST_INDUCT_TAC THEN ASM_REWRITE_TAC[APPEND]"),
    ("2 EXP 10 = 1024", "CONV_TAC NUM_REDUCE_CONV"),
    ("1 + 1 = 3", "ARITH_TAC"),  # false: its "reference" fails, as tiny.wrong_ref does for Coq
)
HOL_CHEATS = (
    "CHEAT_TAC",
    "REWRITE_TAC[] THEN CHEAT_TAC",
    "List.hd [CHEAT_TAC]",
    "ACCEPT_TAC (mk_thm([], `F`))",
    "ACCEPT_TAC (new_axiom `F`)",
    "let CHEAT_TAC = ALL_TAC in CHEAT_TAC",
)
HOL_LOOP = "let rec f n = if n < 0 then ALL_TAC else f (n + 1) in f 0"


def hol_garbage(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return "".join(rng.choice("abcXYZ_ ()[];`'!~/\\=+*0123") for _ in range(rng.randint(1, 120)))
    if kind == 1:
        return "ARITH_TAC THEN"
    if kind == 2:
        return "REWRITE_TAC[NO_SUCH_THEOREM_SOAK]"
    if kind == 3:
        return "ALL_TAC"  # leaves the goal open: FAIL
    if kind == 4:
        return ""
    return "(" * rng.randint(1, 30)


def hol_tasks() -> list[Task]:
    return [Task(id=f"soak.hol.{i}", system="hol_light", context="", statement=f"`{goal}`", reference_proof=tactic,
                 category="P1", timeout_s=60.0) for i, (goal, tactic) in enumerate(HOL_TASKS)]


def repertoire(system: str) -> tuple[tuple[str, ...], str, Any] | None:
    """(cheats, loop, garbage generator) of a system, or None when the soak has none for it."""
    if system == "coq":
        return COQ_CHEATS, COQ_LOOP, coq_garbage
    if system == "hol_light":
        return HOL_CHEATS, HOL_LOOP, hol_garbage
    return None


def coq_garbage(rng: random.Random) -> str:
    """Text a policy might emit that is not a proof: each kind must come back as a verdict, never a crash."""
    alphabet = "abcdefghijklmnopqrstuvwxyz ABC.;:()[]{}=<>-+*/\n∀∃→ℕλ'\"`~|\\"
    kind = rng.randrange(9)
    if kind == 0:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
    if kind == 1:
        return "Proof. " + "(" * rng.randint(1, 50) + " Qed."
    if kind == 2:
        return "Proof. (* unterminated comment " + "x" * rng.randint(0, 50)
    if kind == 3:
        return "Proof."  # no Qed: the proof never ends
    if kind == 4:
        return "Qed."
    if kind == 5:
        return "Proof. intros; " * rng.randint(1, 20) + "Qed."
    if kind == 6:
        return "\x00\x01binary"
    if kind == 7:
        return ""
    return "Proof. " + "idtac. " * rng.randint(1, 200) + "Qed."


@dataclass(frozen=True)
class Episode:
    """One planned episode: which task, and the proofs of its attempts (2 for a repair episode)."""

    index: int
    kind: str
    task: Task
    proofs: tuple[str, ...]


def load_suites(extra: list[str], systems: tuple[str, ...] = ("coq",), *, built: bool = True) -> list[Task]:
    """Tasks of ``systems``: Coq's tiny suite, built suites present here, ``extra`` paths, and for HOL Light
    (when installed and its suite is not built) :data:`HOL_TASKS`. Only systems with a wired verifier."""
    from proofgym.envs.proof_env import load_task_list
    from proofgym.envs.systems import wired_systems
    from proofgym.envs.tasks.suites import SuiteNotFound

    sources: list[str] = [str(TINY_SUITE)]
    for name in ("coq-stdlib", "hol-light") if built else ():
        try:
            from proofgym.envs.tasks.suites import resolve_suite

            sources.append(str(resolve_suite(name)))
        except SuiteNotFound:
            continue
    sources += extra
    tasks: dict[str, Task] = {}
    for source in dict.fromkeys(sources):
        for task in load_task_list(source):
            if task.system in wired_systems() and task.system in systems:
                tasks.setdefault(task.id, task)
    if "hol_light" in systems and "hol_light" in wired_systems() \
            and not any(t.system == "hol_light" for t in tasks.values()):
        from proofgym.envs.verifiers.hol_light import hol_light_installed

        if hol_light_installed():
            tasks.update((t.id, t) for t in hol_tasks())
    if not tasks:
        raise ProofgymError(f"no tasks for {', '.join(systems)} here (is the prover installed, the suite built?)")
    return list(tasks.values())


def loop_variant(task: Task) -> Task:
    """The task with a short timeout, for loop episodes (a loop costs its whole timeout)."""
    return replace(task, id=f"{task.id}~loop", timeout_s=LOOP_TIMEOUT_S)


def plan(tasks: list[Task], episodes: int, seed: int, mix: dict[str, float] | None = None) -> list[Episode]:
    """A reproducible mix of episodes (the same seed gives the same list)."""
    rng = random.Random(seed)
    kinds, weights = zip(*(mix or MIX).items(), strict=True)
    out = []
    for index in range(episodes):
        task = rng.choice(tasks)
        kind = rng.choices(kinds, weights)[0]
        moves = repertoire(task.system)
        if moves is None:
            kind = "honest"  # no cheat/loop/garbage repertoire for this system here
            cheats, loop, garbage = (), "", None
        else:
            cheats, loop, garbage = moves
        if kind == "honest":
            proofs: tuple[str, ...] = (task.reference_proof,)
        elif kind == "repair":  # the fixing round: garbage first, then the reference proof
            proofs = (garbage(rng), task.reference_proof)
        elif kind == "cheat":
            qualid = task.metadata.get("qualid")
            extra = (f"Proof. exact {qualid}. Qed.",) if qualid and task.system == "coq" else ()
            proofs = (rng.choice(cheats + extra),)
        elif kind == "loop":
            task = loop_variant(task)
            proofs = (loop,)
        else:
            proofs = (garbage(rng),)
        out.append(Episode(index, kind, task, proofs))
    return out


# -- processes ------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def _is_resource_tracker(pid: int) -> bool:
    """multiprocessing's resource tracker: one per parent process, exits with it; not a verifier process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"multiprocessing.resource_tracker" in fh.read()
    except OSError:
        return False


def verifier_processes(pid: int, before: set[int]) -> list[int]:
    """The pool's processes (workers and their provers) below ``pid``: new since ``before``."""
    return [p for p in descendants(pid) if p not in before and not _is_resource_tracker(p)]


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) descendants of ``pid``."""
    return procfs.descendants(pid, zombies=False)


def zombies_of(pid: int) -> list[int]:
    return [child for child in procfs.children(pid) if (_stat(child) or (0, ""))[1] == "Z"]


rss_bytes = procfs.rss_bytes


# -- running --------------------------------------------------------------------------------------


@dataclass
class SoakReport:
    """What a soak run measured; ``ok`` is the verdict of the run as a whole."""

    episodes: int
    checks: int
    workers: int
    wall_s: float
    suites_tasks: int
    kinds: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    harness_failures: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    distinct_checks: int = 0
    rss_samples: list[tuple[int, int]] = field(default_factory=list)  # (episodes done, bytes)
    worker_rss_samples: list[tuple[int, int]] = field(default_factory=list)  # the pool's Python workers only
    rss_start_bytes: int = 0
    rss_end_bytes: int = 0
    rss_peak_bytes: int = 0
    processes_peak: int = 0
    leftover_processes: list[int] = field(default_factory=list)
    zombies: list[int] = field(default_factory=list)
    worker_restarts: int = 0

    @property
    def rss_growth_bytes(self) -> int:
        return self.rss_end_bytes - self.rss_start_bytes

    @property
    def rss_second_half_growth_bytes(self) -> int:
        """Growth over the second half of the run: a leak keeps growing, warm-up does not."""
        if not self.rss_samples:
            return 0
        half = self.episodes // 2
        mid = next((rss for done, rss in self.rss_samples if done >= half), self.rss_samples[-1][1])
        return self.rss_end_bytes - mid

    @staticmethod
    def _slope_mib_per_1000(samples: list[tuple[int, int]], after: int) -> float:
        """Least-squares slope of RSS over episodes (after warm-up): MiB per 1000 episodes. A leak is a positive
        slope that stands out of the noise of sessions being recycled; a flat line is none."""
        points = [(done, rss / 1024**2) for done, rss in samples if done >= after]
        if len(points) < 3:
            return 0.0
        mx = sum(d for d, _ in points) / len(points)
        my = sum(r for _, r in points) / len(points)
        var = sum((d - mx) ** 2 for d, _ in points)
        return 1000 * sum((d - mx) * (r - my) for d, r in points) / var if var else 0.0

    @property
    def rss_slope_mib_per_1000(self) -> float:
        return self._slope_mib_per_1000(self.rss_samples, self.episodes // 10)

    @property
    def worker_rss_slope_mib_per_1000(self) -> float:
        return self._slope_mib_per_1000(self.worker_rss_samples, self.episodes // 10)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.harness_failures and not self.leftover_processes and not self.zombies

    def _first(self, samples: list[tuple[int, int]]) -> int:
        return next((rss for done, rss in samples if done >= self.episodes // 10), samples[0][1] if samples else 0)

    @staticmethod
    def _last(samples: list[tuple[int, int]]) -> int:
        return samples[-1][1] if samples else 0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("rss_samples", "worker_rss_samples")}
        out["rss_slope_mib_per_1000_episodes"] = round(self.rss_slope_mib_per_1000, 2)
        out["worker_rss_slope_mib_per_1000_episodes"] = round(self.worker_rss_slope_mib_per_1000, 2)
        out["worker_rss_samples"] = self.worker_rss_samples[:: max(1, len(self.worker_rss_samples) // 50)]
        out["rss_growth_bytes"] = self.rss_growth_bytes
        out["rss_second_half_growth_bytes"] = self.rss_second_half_growth_bytes
        out["episodes_per_s"] = round(self.episodes / self.wall_s, 3) if self.wall_s else 0.0
        out["checks_per_s"] = round(self.checks / self.wall_s, 3) if self.wall_s else 0.0
        out["rss_samples"] = self.rss_samples[:: max(1, len(self.rss_samples) // 50)]
        out["ok"] = self.ok
        out["mismatches"] = self.mismatches[:20]
        return out

    def render(self) -> str:
        mib = 1024**2
        return "\n".join([
            f"soak: {self.episodes} episodes ({self.checks} checks) on {self.workers} workers in {self.wall_s:.0f} s "
            f"= {self.episodes / max(self.wall_s, 1e-9):.2f} episodes/s",
            f"  tasks: {self.suites_tasks}; kinds: {dict(sorted(self.kinds.items()))}",
            f"  verdicts: {dict(sorted(self.verdicts.items()))}; harness failures: {self.harness_failures}",
            f"  verdicts vs serial run ({self.distinct_checks} distinct checks): {len(self.mismatches)} mismatches",
            f"  verifier RSS (workers + provers): {self.rss_start_bytes / mib:.0f} MiB after warm-up -> "
            f"{self.rss_end_bytes / mib:.0f} MiB at the end (growth {self.rss_growth_bytes / mib:+.0f} MiB; "
            f"{self.rss_second_half_growth_bytes / mib:+.0f} MiB over the second half; "
            f"peak {self.rss_peak_bytes / mib:.0f} MiB, at most {self.processes_peak} processes); "
            f"trend after warm-up {self.rss_slope_mib_per_1000:+.1f} MiB per 1000 episodes",
            f"  pool workers (Python) RSS: {self._first(self.worker_rss_samples) / mib:.0f} MiB -> "
            f"{self._last(self.worker_rss_samples) / mib:.0f} MiB, trend {self.worker_rss_slope_mib_per_1000:+.2f} MiB "
            f"per 1000 episodes",
            f"  worker restarts: {self.worker_restarts}; leftover processes after close: "
            f"{len(self.leftover_processes)}; zombies: {len(self.zombies)}",
            f"  result: {'PASS' if self.ok else 'FAIL'}",
        ])


def _key(task: Task, proof: str) -> tuple[str, float, str]:
    return task.id, task.timeout_s, proof


def serial_verdicts(episodes: list[Episode], verifier_kwargs: dict[str, Any]) -> dict[tuple[str, float, str], str]:
    """Each distinct (task, timeout, proof) checked once by a fresh verifier of its system, no pool."""
    from proofgym.envs.verifiers.base import make_verifier

    distinct: dict[tuple[str, float, str], Task] = {}
    for episode in episodes:
        for proof in episode.proofs:
            distinct.setdefault(_key(episode.task, proof), episode.task)
    verdicts: dict[tuple[str, float, str], str] = {}
    verifiers: dict[str, Any] = {}
    try:
        for key, task in distinct.items():
            if task.system not in verifiers:
                verifiers[task.system] = make_verifier(task.system, **verifier_kwargs)
            verdicts[key] = verifiers[task.system].check(task, key[2]).verdict.value
    finally:
        for verifier in verifiers.values():
            verifier.close()
    return verdicts


def run_soak(episodes: int = 1000, *, workers: int = 2, threads: int | None = None, seed: int = 0,
             extra_suites: list[str] | None = None, engine: str = "local", sample_every: int = 0,
             progress: bool = False, verifier_kwargs: dict[str, Any] | None = None,
             mix: dict[str, float] | None = None, systems: tuple[str, ...] = ("coq",),
             built_suites: bool = True) -> SoakReport:
    """Run the soak and return its report (see the module docstring)."""
    from proofgym.envs.verifiers.pool import make_pool

    tasks = load_suites(extra_suites or [], systems, built=built_suites)
    planned = plan(tasks, episodes, seed, mix)
    kwargs = dict(verifier_kwargs or {})
    me = os.getpid()
    before = set(descendants(me))
    results: list[tuple[Episode, list[str]]] = []
    harness = 0
    lock = threading.Lock()
    cursor = iter(planned)
    done = 0
    sample_every = sample_every or max(1, episodes // 100)
    report = SoakReport(episodes=episodes, checks=0, workers=workers, wall_s=0.0, suites_tasks=len(tasks))
    warm_rss_at = max(1, episodes // 10)  # RSS growth is measured from here: after every context is warm

    pool = make_pool(engine, workers=workers, verifier_kwargs=kwargs)
    systems = sorted({t.system for t in tasks})

    def sample() -> None:
        tree = verifier_processes(me, before)
        rss = rss_bytes(tree)
        report.rss_samples.append((done, rss))
        if hasattr(pool, "worker_pids"):
            report.worker_rss_samples.append((done, rss_bytes(pool.worker_pids())))
        report.rss_peak_bytes = max(report.rss_peak_bytes, rss)
        report.processes_peak = max(report.processes_peak, len(tree))
        if report.rss_start_bytes == 0 and done >= warm_rss_at:
            report.rss_start_bytes = rss

    env_tasks = tasks + [loop_variant(t) for t in tasks if repertoire(t.system) is not None]

    def run_thread() -> None:
        nonlocal done, harness
        envs = {s: gym.make("proofgym/WholeProof-v0", tasks=[t for t in env_tasks if t.system == s], max_attempts=2,
                            verifier=pool.as_verifier(s)) for s in systems}
        while True:
            with lock:
                episode = next(cursor, None)
            if episode is None:
                break
            env = envs[episode.task.system]
            env.reset(seed=episode.index, options={"task_id": episode.task.id})
            verdicts: list[str] = []
            for proof in episode.proofs:
                try:
                    _, _, terminated, truncated, info = env.step(proof)
                except VerifierError:
                    with lock:
                        harness += 1
                    verdicts.append("HARNESS")
                    break
                verdicts.append(info["verdict"])
                if terminated or truncated:
                    break
            with lock:
                results.append((episode, verdicts))
                done += 1
                if done % sample_every == 0:
                    sample()
                if progress and done % max(1, episodes // 20) == 0:
                    print(f"  {done}/{episodes} episodes", file=sys.stderr, flush=True)
        for env in envs.values():
            env.close()

    started = time.monotonic()
    try:
        workers_threads = [threading.Thread(target=run_thread, name=f"soak-{i}")
                           for i in range(threads or 2 * workers)]
        for thread in workers_threads:
            thread.start()
        for thread in workers_threads:
            thread.join()
        report.wall_s = time.monotonic() - started
        with lock:
            sample()
        report.rss_end_bytes = report.rss_samples[-1][1]
        if report.rss_start_bytes == 0:
            report.rss_start_bytes = report.rss_samples[0][1]
        report.worker_restarts = int(pool.stats().get("worker_restarts", 0))
    finally:
        pool.close()
    time.sleep(0.5)  # bwrap's --die-with-parent children exit asynchronously after their parent
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and verifier_processes(me, before):
        time.sleep(0.2)
    report.leftover_processes = verifier_processes(me, before)
    report.zombies = zombies_of(me)

    expected = serial_verdicts(planned, kwargs)
    report.distinct_checks = len(expected)
    kinds: Counter[str] = Counter()
    verdict_counts: Counter[str] = Counter()
    for episode, verdicts in results:
        kinds[episode.kind] += 1
        for proof, verdict in zip(episode.proofs, verdicts, strict=False):
            report.checks += 1
            verdict_counts[verdict] += 1
            want = expected[_key(episode.task, proof)]
            if verdict != want:
                report.mismatches.append({"episode": episode.index, "task_id": episode.task.id, "kind": episode.kind,
                                          "proof": proof[:120], "pool": verdict, "serial": want})
    report.kinds = dict(kinds)
    report.verdicts = dict(verdict_counts)
    report.harness_failures = harness
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000, help="WholeProof-v0 episodes (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="pool worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=0, help="env threads (default 2 x workers)")
    parser.add_argument("--engine", choices=["local", "ray"], default="local")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--suite", action="append", default=[], help="another suite to include (repeatable)")
    parser.add_argument("--systems", default="coq", help="comma-separated systems to soak (default coq; "
                                                          "e.g. coq,hol_light)")
    parser.add_argument("--no-built-suites", action="store_true", help="only the tiny suite (and --suite ones)")
    parser.add_argument("--json", help="also write the report as JSON here")
    args = parser.parse_args(argv)
    try:
        report = run_soak(args.episodes, workers=args.workers, threads=args.threads or None, seed=args.seed,
                          extra_suites=args.suite, engine=args.engine, progress=True,
                          systems=tuple(s.strip() for s in args.systems.split(",") if s.strip()),
                          built_suites=not args.no_built_suites)
    except ProofgymError as exc:
        print(f"soak: error: {exc}", file=sys.stderr)
        return 2
    print(report.render())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
