"""Held-out splits that leak nothing: twin and mirror groups, verbatim proof overlap, a validation split.

A held-out task is worth nothing as a measure of learning if training holds its twin. The review of
docs/learning.md's first run (issue 27) found three ways the old twin check (same short name, or the same
statement once module qualifiers are dropped) let one through:

- **mirrors**: ``nat_compare_Gt_gt : (n ?= m) = Gt -> n > m`` held out while
  ``nat_compare_Lt_lt : (n ?= m) = Lt -> n < m`` was trained on;
- **renamed or flipped statements**: ``a < b`` against ``b > a``, ``0 + n = n`` against ``n + 0 = n``
  (the ``_l``/``_r`` pairs), the same statement with other variable names;
- **verbatim proofs**: 9 held-out reference proofs appeared word for word in training.

:func:`statement_key` is a key that survives all of those: the statement without its header and
qualifiers, bound variables renamed to one placeholder, ``>``/``>=``/``Gt``/``gt``/``ge`` mapped to
their mirrors, and the tokens taken as a multiset (so operand order, and with it ``a < b`` / ``b > a``
and the left/right versions of a lemma, does not count). :func:`name_key` does the same for names
(``Gt_gt`` and ``Lt_lt``, ``_l`` and ``_r``). Both err towards joining: a false twin only keeps two
tasks on one side, a missed one leaks. :func:`make_split` puts whole groups on one side and keeps a
group out of held-out and validation when one of its reference proofs appears verbatim outside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.envs.tasks.suites import load_tasks, resolve_suite

_QUALIFIER = re.compile(r"\b(?:Coq|Init|Arith|Nat|N|Z|Pos|BinNat|BinInt|BinPos|Pnat|PeanoNat|NArith|ZArith|PArith|"
                        r"Peano|Logic|Datatypes|List|Bool)\.")
_HEADER = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)?(?:Local\s+|Global\s+)?(?:Lemma|Theorem|Corollary|Proposition|Fact|"
                     r"Remark|Example|Definition|Instance)\s+[\w']+", re.S)
_TOKEN = re.compile(r"[A-Za-z_][\w']*|\d+|[(){}\[\],;]|[^\s\w(){}\[\],;]+")
_BINDER_OPENERS = frozenset({"forall", "exists", "exists2", "fun", "let"})
# Mirrors: a comparison and its flipped form get one token (with operands as a multiset, `a > b` is `b < a`).
_MIRROR_TOKENS = {">": "<", ">=": "<=", "Gt": "Lt", "gt": "lt", "ge": "le", "Ge": "Le", "GT": "LT", "GE": "LE"}
_MIRROR_NAME_PARTS = {**_MIRROR_TOKENS, "r": "l", "R": "L", "right": "left", "rev": "", "reverse": ""}


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _split_at_top_colon(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(binders, body)``: the tokens before the statement's top-level ``:`` (outside brackets) and after."""
    depth = 0
    for i, tok in enumerate(tokens):
        if tok in "({[":
            depth += 1
        elif tok in ")}]":
            depth -= 1
        elif tok == ":" and depth == 0:
            return list(tokens[:i]), list(tokens[i + 1:])
    return [], list(tokens)


def _binder_names(tokens: Sequence[str]) -> set[str]:
    """Names bound in a binder list: bare names, and the names before ``:`` in each bracketed group."""
    names: set[str] = set()
    in_type = False
    for tok in tokens:
        if tok in "({[)}]":
            in_type = False
        elif tok == ":":
            in_type = True
        elif not in_type and re.fullmatch(r"[A-Za-z_][\w']*", tok) and tok != "_":
            names.add(tok)
    return names


def _drop_binders(tokens: Sequence[str]) -> tuple[list[str], set[str]]:
    """``tokens`` without the binder lists of ``forall``/``exists``/``fun``/``let`` (up to their ``,``, ``=>``
    or ``:=``), and the names those lists bind. ``forall`` itself goes too: ``forall n, P`` is ``n : P``."""
    out: list[str] = []
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok not in _BINDER_OPENERS:
            out.append(tok)
            i += 1
            continue
        j, depth = i + 1, 0
        while j < len(tokens) and not (depth == 0 and tokens[j] in (",", "=>", ":=")):
            depth += 1 if tokens[j] in "({[" else -1 if tokens[j] in ")}]" else 0
            j += 1
        names |= _binder_names(tokens[i + 1:j])
        if tok != "forall":
            out.append(tok)
        i = j + 1
    return out, names


def statement_key(statement: str) -> str:
    """A key equal for twins: renamed binders, another lemma name, flipped comparisons, left/right versions.

    Binder types are left out with the binders (the Nat/N/Z versions of a lemma are twins too).

    >>> statement_key("Lemma nat_compare_Gt_gt n m : (n ?= m) = Gt -> n>m.") == \\
    ...     statement_key("Lemma nat_compare_Lt_lt a b : forall (c:nat), (a ?= b) = Lt -> a<b.")
    True
    """
    text = _QUALIFIER.sub("", _HEADER.sub("", statement, count=1)).strip().rstrip(".")
    binders, body = _split_at_top_colon(_tokens(text))
    body, bound = _drop_binders(body)
    bound |= _binder_names(binders)
    counts = Counter("_v" if tok in bound else _MIRROR_TOKENS.get(tok, tok) for tok in body)
    return " ".join(f"{tok}*{n}" if n > 1 else tok for tok, n in sorted(counts.items()))


def name_key(task_id: str) -> str:
    """A lemma's short name with mirrored parts mapped (``nat_compare_Gt_gt`` and ``nat_compare_Lt_lt`` agree;
    so do ``add_0_l`` and ``add_0_r``)."""
    name = task_id.rsplit(".", 1)[-1]
    parts = [_MIRROR_NAME_PARTS.get(part, part) for part in name.split("_")]
    return "_".join(p for p in parts if p)


def proof_key(proof: str) -> str:
    """A reference proof without ``Proof.``/``Qed.`` and whitespace: verbatim equal proofs share it."""
    body = re.sub(r"^\s*Proof\b\s*(?:with\b[^.]*)?\.", "", proof.strip())
    body = re.sub(r"\b(?:Qed|Defined|Admitted)\s*\.\s*$", "", body.strip())
    return " ".join(body.split())


_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def proof_sentences(proof: str) -> int:
    """How many sentences (a period before a space or the end) a reference proof has, bar ``Proof.``/``Qed.``:
    ``reflexivity.``, ``now destruct n.`` and ``intros; ring.`` have one; ``intros n. ring.`` has two."""
    return len(_SENTENCE_END.findall(proof_key(proof)))


def _counts_as_verbatim(proof: str, min_sentences: int) -> bool:
    return min_sentences <= 1 or proof_sentences(proof) >= min_sentences


def twin_keys(task: Any) -> set[str]:
    """Keys that make two tasks twins (either one shared joins them)."""
    return {f"name:{name_key(task.id)}", f"stmt:{statement_key(task.statement)}"}


def twin_groups(tasks: Sequence[Any]) -> list[list[Any]]:
    """Tasks joined (transitively) by any shared :func:`twin_keys` key, in suite order."""
    parent = list(range(len(tasks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, task in enumerate(tasks):
        for key in twin_keys(task):
            if key in first:
                parent[find(i)] = find(first[key])
            else:
                first[key] = i
    groups: dict[int, list[Any]] = defaultdict(list)
    for i, task in enumerate(tasks):
        groups[find(i)].append(task)
    return list(groups.values())


def twins_across(train: Iterable[Any], heldout: Iterable[Any]) -> list[tuple[str, str]]:
    """Pairs (held-out id, training id) that share a twin key: a sound split has none."""
    by_key: dict[str, list[str]] = defaultdict(list)
    for task in train:
        for key in twin_keys(task):
            by_key[key].append(task.id)
    return sorted({(t.id, other) for t in heldout for key in twin_keys(t) for other in by_key.get(key, [])})


def verbatim_overlap(train: Iterable[Any], heldout: Iterable[Any], *, min_sentences: int = 1) -> list[tuple[str, str]]:
    """Pairs (held-out id, training id) whose reference proofs are the same text (bar Proof./Qed. and spacing).

    ``min_sentences``: only proofs of at least that many sentences count (see :func:`make_split`).
    """
    by_proof: dict[str, list[str]] = defaultdict(list)
    for task in train:
        if _counts_as_verbatim(task.reference_proof, min_sentences):
            by_proof[proof_key(task.reference_proof)].append(task.id)
    return sorted({(t.id, other) for t in heldout for other in by_proof.get(proof_key(t.reference_proof), [])})


@dataclass
class Split:
    """Task ids on each side, and the checks that were run on them."""

    train: list[str]
    validation: list[str]
    heldout: list[str]
    seed: int
    checks: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "checks": self.checks, "heldout_ids": self.heldout,
                "validation_ids": self.validation, "train_ids": self.train}


def make_split(tasks: Sequence[Any], *, heldout_size: int, validation_size: int, seed: int = 0,
               exclude: Collection[str] = (), verbatim_min_sentences: int = 1) -> Split:
    """Whole twin groups, in seeded-hash order, to held-out, then validation; the rest is training.

    A group may go to held-out or validation only when none of its tasks is in ``exclude`` (tasks
    looked at before) and none of its reference proofs appears verbatim outside the group.

    ``verbatim_min_sentences``: only reference proofs of at least that many sentences count as verbatim
    leaks (1, the default: every proof). The check is there to stop a model scoring by memorising a
    *specific* proof; a generic one-sentence proof (``reflexivity.``, ``now destruct n.``,
    ``intros; ring.``) shared by many unrelated tasks is tactic knowledge, and with 2 it no longer keeps
    a group out. Twins and mirrors are joined as before whatever the value.
    """
    groups = twin_groups(tasks)
    proof_groups: dict[str, set[int]] = defaultdict(set)
    for g, group in enumerate(groups):
        for task in group:
            if _counts_as_verbatim(task.reference_proof, verbatim_min_sentences):
                proof_groups[proof_key(task.reference_proof)].add(g)
    excluded = set(exclude)

    def eligible(g: int) -> bool:
        group = groups[g]
        return not any(t.id in excluded for t in group) and all(
            proof_groups[proof_key(t.reference_proof)] == {g} for t in group
            if _counts_as_verbatim(t.reference_proof, verbatim_min_sentences))

    def rank(g: int) -> str:
        return hashlib.blake2b(f"{seed}:{min(t.id for t in groups[g])}".encode(), digest_size=8).hexdigest()

    held: list[str] = []
    valid: list[str] = []
    for g in sorted((g for g in range(len(groups)) if eligible(g)), key=rank):
        side = held if len(held) < heldout_size else valid if len(valid) < validation_size else None
        if side is None:
            break
        side.extend(t.id for t in groups[g])
    if len(held) < heldout_size or len(valid) < validation_size:
        raise ValueError(f"only {len(held)} held-out and {len(valid)} validation tasks are eligible "
                         f"(asked {heldout_size} and {validation_size})")
    taken = set(held) | set(valid)
    by_id = {t.id: t for t in tasks}
    train = [t.id for t in tasks if t.id not in taken]
    train_tasks = [by_id[i] for i in train]
    checks = {}
    for name, ids in (("heldout", held), ("validation", valid)):
        side_tasks = [by_id[i] for i in ids]
        checks[f"{name}_twins_in_train"] = len(twins_across(train_tasks, side_tasks))
        checks[f"{name}_verbatim_proofs_in_train"] = len(
            verbatim_overlap(train_tasks, side_tasks, min_sentences=verbatim_min_sentences))
        if verbatim_min_sentences > 1:  # what the limit let through, counted: generic proofs shared with training
            checks[f"{name}_short_proofs_shared_with_train"] = len({h for h, _ in verbatim_overlap(train_tasks, side_tasks)})
    checks["heldout_twins_in_validation"] = len(twins_across([by_id[i] for i in valid], [by_id[i] for i in held]))
    checks["verbatim_min_sentences"] = verbatim_min_sentences
    checks["groups"] = len(groups)
    checks["largest_group"] = max(len(g) for g in groups)
    return Split(train=train, validation=valid, heldout=held, seed=seed, checks=checks)


WHOLE_STDLIB = "coq-stdlib-all"
"""A suite name :func:`load_suite_tasks` extracts on the spot: every lemma of the installed Coq standard
library (3,279 P1 and 3,036 P2 with Coq 8.16), unvalidated, deterministic, in about 5 s."""


def load_suite_tasks(suite: str) -> list[Any]:
    """The tasks of a suite name or file, or of the whole stdlib extraction (:data:`WHOLE_STDLIB`)."""
    if suite == WHOLE_STDLIB:
        from proofgym.envs.tasks.coq_extract import extract_stdlib

        return extract_stdlib()[0]

    return load_tasks(resolve_suite(suite))


def build_split_file(suite: str, *, categories: Sequence[str], heldout_size: int, validation_size: int,
                     train_pool: int, seed: int, exclude_files: Sequence[str] = (), validate: bool = True,
                     workers: int = 1, verbatim_min_sentences: int = 1) -> dict[str, Any]:
    """The record a split file holds: ids per side, the checks, and how it was made.

    ``train_pool``: how many training tasks (seeded-hash order) the record lists and validates (0: all);
    the learning curve trains on a prefix of them. With ``validate``, each listed task's reference proof
    is checked by the real prover in isolation and a task that fails leaves the split (it is counted).
    """
    tasks = [t for t in load_suite_tasks(suite) if "all" in categories or t.category in categories]
    exclude: set[str] = set()
    for path in exclude_files:
        old = json.loads(Path(path).read_text(encoding="utf-8"))
        exclude |= {i for key in ("heldout_ids", "validation_ids", "train_ids") for i in old.get(key, [])}
    split = make_split(tasks, heldout_size=heldout_size, validation_size=validation_size, seed=seed,
                       exclude=exclude, verbatim_min_sentences=verbatim_min_sentences)

    def rank(task_id: str) -> str:
        return hashlib.blake2b(f"{seed}:train:{task_id}".encode(), digest_size=8).hexdigest()

    pool = sorted(split.train, key=rank)[:train_pool] if train_pool else split.train
    listed = set(split.heldout) | set(split.validation) | set(pool)
    failed: dict[str, int] = {}
    if validate:
        from proofgym.envs.tasks.build import validate_tasks

        kept, reasons, _ = validate_tasks([t for t in tasks if t.id in listed], workers=workers, progress=False)
        ok = {t.id for t in kept}
        failed = dict(reasons)
    else:
        ok = listed
    record = Split(train=[i for i in pool if i in ok], validation=[i for i in split.validation if i in ok],
                   heldout=[i for i in split.heldout if i in ok], seed=seed, checks=split.checks).to_dict()
    record.update(suite=suite, categories=list(categories), validated=validate, validation_failures=failed,
                  excluded_as_seen=len(exclude), train_total=len(split.train),
                  dropped_by_validation=len(listed) - len(ok & listed))
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m proofgym.training.splits --suite S --out split.json ...``: build and check a split file."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, help=f"suite name or .jsonl, or {WHOLE_STDLIB} (the whole stdlib extraction)")
    p.add_argument("--category", action="append", help="categories (repeatable; default P1 and P2)")
    p.add_argument("--heldout-size", type=int, default=230, help="held-out tasks before validation")
    p.add_argument("--validation-size", type=int, default=80, help="validation tasks before validation")
    p.add_argument("--train-pool", type=int, default=400, help="training tasks listed and validated (0: all)")
    p.add_argument("--seed", type=int, default=27, help="seed of the group hash")
    p.add_argument("--exclude", action="append", default=[], help="an earlier split file: its tasks were looked "
                   "at, so they (and their twins) stay out of held-out and validation (repeatable)")
    p.add_argument("--verbatim-min-sentences", type=int, default=1, help="only reference proofs of at least N "
                   "sentences (bar Proof./Qed.) count as verbatim leaks; 2 lets a generic one-liner such as "
                   "`reflexivity.` shared by many tasks into held-out (default 1: every proof counts)")
    p.add_argument("--no-validate", action="store_true", help="skip checking the reference proofs")
    p.add_argument("--workers", type=int, default=1, help="validation workers")
    p.add_argument("--out", required=True, help="the split file to write")
    args = p.parse_args(argv)
    record = build_split_file(args.suite, categories=args.category or ["P1", "P2"], heldout_size=args.heldout_size,
                              validation_size=args.validation_size, train_pool=args.train_pool, seed=args.seed,
                              exclude_files=args.exclude, validate=not args.no_validate, workers=args.workers,
                              verbatim_min_sentences=args.verbatim_min_sentences)
    record["command"] = "python -m proofgym.training.splits " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if not k.endswith("_ids")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
