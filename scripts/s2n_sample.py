#!/usr/bin/env python3
"""Validate a seeded sample of s2n-bignum-bench problems on real HOL Light, by hand (the README's numbers).

For one architecture: import the checkout as ``proofgym build s2n-bignum`` does (both architectures, so
the ids and de-duplication are the bench's), draw ``--per-category`` problems of each category with
``--seed`` among those on the architecture's own base whose context is small (``--max-context-kib`` of
cheated pieces, loads included; the bench's native time at most ``--max-bench-s``), build the object
files they read, load the base once, and check each problem three times: ``ALL_TAC`` (FAIL expected;
its time includes loading the context), ``CHEAT_TAC`` (CHEATING) and the reference proof (OK).
Prints one line per check and writes everything (verdicts, times, base load, RSS and private memory of
the root and of each zygote, machine load) to ``--json``.

    nice -n 10 python scripts/s2n_sample.py --checkout ~/s2n-bignum --hol-dir ~/hol-light \\
        --timeout-map timeout-map.json --arch x86 --json s2n-x86.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from proofgym.envs.tasks.hol_inline import SourceTree
from proofgym.envs.tasks.hol_s2n import build_objects, import_s2n, s2n_bases
from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import ContextLoadError

CATEGORIES = ("generic", "bit_vector", "program_state", "functional_correctness")
EXPECTED = (("ALL_TAC", "FAIL"), ("CHEAT_TAC", "CHEATING"), ("reference", "OK"))
_LOAD = re.compile(r'(?:loadt|needs|loads)\s+"(/[^"]+)"')
_LIBRARY = re.compile(r'(?:loadt|needs|loads)\s+"([^/"][^"]*)"')


def category(task: Task) -> str:
    return "functional_correctness" if task.category.startswith("functional_correctness") else task.category


def context_cost(context: str, seen: set[str] | None = None) -> tuple[int, set[str]]:
    """Bytes of the cheated pieces a context loads, with what they load in turn (each file once), and
    the HOL Light files it loads by a relative name (``needs "Library/isum.ml"``: minutes in bytecode,
    unless the base has loaded them)."""
    seen = set() if seen is None else seen
    total, libraries = 0, set(_LIBRARY.findall(context))
    for path in _LOAD.findall(context):
        if path in seen or not Path(path).is_file():
            continue
        seen.add(path)
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        size, libs = context_cost(text, seen)
        total += len(text) + size
        libraries |= libs
    return total, libraries


def context_bytes(context: str) -> int:
    return context_cost(context)[0]


def base_libraries(checkout: str, arch: str) -> set[str]:
    """The HOL Light files (relative names, not checkout files) the architecture's base loads."""
    tree = SourceTree(checkout)
    found: set[str] = set()
    for rel in tree.closure(f"{arch}/proofs/base.ml"):
        text = (tree.root / rel).read_text(encoding="utf-8", errors="replace")
        found |= {lib for lib in _LIBRARY.findall(text) if not (tree.root / lib).is_file()}
    return found


def draw(tasks: list[Task], arch: str, per_category: int, seed: int, max_context: int,
         max_bench_s: float, allowed: set[str]) -> tuple[dict[str, list[Task]], dict[str, int]]:
    """The seeded sample per category (at most one problem per source file, so that one file with many
    small lemmas does not fill a category, unless there are too few files), and how many candidates each category had."""
    pools: dict[str, list[Task]] = {c: [] for c in CATEGORIES}
    for task in sorted(tasks, key=lambda t: t.id):
        if task.metadata.get("base") != arch:
            continue
        if float(task.metadata.get("bench_prove_s", 0.0)) > max_bench_s:
            continue
        size, libs = context_cost(task.context)
        if size > max_context or libs - allowed:
            continue
        pools[category(task)].append(task)
    rng = random.Random(seed)
    sample: dict[str, list[Task]] = {}
    for cat, pool in pools.items():
        files: set[str] = set()
        sample[cat] = []
        order = rng.sample(pool, len(pool))
        for task in order:
            if len(sample[cat]) < per_category and task.metadata["source"] not in files:
                files.add(task.metadata["source"])
                sample[cat].append(task)
        for task in order:  # too few files: fill up from those drawn
            if len(sample[cat]) < per_category and task not in sample[cat]:
                sample[cat].append(task)
    return sample, {c: len(pool) for c, pool in pools.items()}


def memory(server) -> dict[str, list[int]]:  # noqa: ANN001 - a HolLightServer
    """Context key (and ``root``) -> [RSS MiB, private MiB]."""
    return {k: [rss >> 20, private >> 20] for k, (rss, private) in server.stats().items()}


def check_problem(verifier, task: Task, failed: dict[tuple[str, str], str]) -> dict:  # noqa: ANN001 - a HolLightVerifier
    """One problem's row: its three checks, or ``context_did_not_load`` and no check at all.

    A context that does not load fails the same way for every proof (and may cost the 600 s context
    deadline each time), so the first :class:`ContextLoadError` is recorded once in ``failed`` (keyed by
    base and context text) and the problem's other checks, and every later problem with that context,
    are skipped."""
    row: dict = {"id": task.id, "category": category(task), "context_kib": context_bytes(task.context) >> 10,
                 "bench_prove_s": task.metadata.get("bench_prove_s"), "timeout_s": task.timeout_s}
    key = (str(task.metadata.get("base", "")), task.context)
    if key in failed:
        row["context_did_not_load"] = failed[key]
        print(f"{task.id:70s} skipped: {failed[key]}", flush=True)
        return row
    for name, expected in EXPECTED:
        proof = task.reference_proof if name == "reference" else name
        t = time.monotonic()
        try:
            result = verifier.check(task, proof)
            verdict, why = result.verdict.value, " | ".join(result.reasons)[:300]
        except ContextLoadError as exc:
            failed[key] = f"context did not load: {str(exc)[:300]} (after {time.monotonic() - t:.1f} s; id {task.id})"
            row["context_did_not_load"] = failed[key]
            print(f"{task.id:70s} {name:9s} {failed[key]}", flush=True)
            return row
        except Exception as exc:  # noqa: BLE001 - a broken check is a row of the table, not a stop
            verdict, why = "EXCEPTION", f"{type(exc).__name__}: {str(exc)[:300]}"
        row[name] = {"verdict": verdict, "expected": expected, "s": round(time.monotonic() - t, 2)}
        if verdict != expected:
            row[name]["why"] = why
        print(f"{task.id:70s} {name:9s} {verdict:9s} (expected {expected}) {row[name]['s']:8.2f} s"
              + (f"  {why}" if verdict != expected else ""), flush=True)
    return row


def as_expected(row: dict) -> bool:
    return all(name in row and row[name]["verdict"] == expected for name, expected in EXPECTED)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", required=True, help="an s2n-bignum checkout")
    ap.add_argument("--hol-dir", required=True, help="HOL Light new enough for s2n-bignum (Debian or upstream)")
    ap.add_argument("--timeout-map", required=True, help="the bench's timeout-map.json")
    ap.add_argument("--arch", choices=("arm", "x86"), required=True)
    ap.add_argument("--per-category", type=int, default=5)
    ap.add_argument("--categories", nargs="+", choices=CATEGORIES, default=CATEGORIES,
                    help="check only these categories (the draw is the same: the seed draws every category)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-context-kib", type=int, default=512, help="skip problems whose context loads more")
    ap.add_argument("--max-bench-s", type=float, default=0.5, help="skip problems the bench proves slower")
    ap.add_argument("--library", action="append", default=[],
                    help="a HOL Light file a drawn problem's context may load beyond the base's (none by default: "
                    "Divstep/divstep_bounds.ml, 4 proofs, loads more of Divstep/ and ran past the 600 s context "
                    "deadline)")
    ap.add_argument("--min-timeout-s", type=float, default=0.0,
                    help="raise each check's timeout to at least this (the bench's are for native code)")
    ap.add_argument("--only", nargs="*", default=(), help="check only these ids of the sample (a rerun)")
    ap.add_argument("--dry-run", action="store_true", help="print the sample and stop")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    tasks, report = import_s2n(args.checkout, hol_dir=args.hol_dir, timeout_map=args.timeout_map, progress=False)
    out: dict = {"arch": args.arch, "seed": args.seed, "per_category": args.per_category,
                 "import_s": round(time.monotonic() - t0, 1), "tasks": len(tasks),
                 "per_arch_category": report.per_arch_category,
                 "bench": {k: report.bench[k] for k in ("bench_total", "matched", "missing", "extra")},
                 "nproc": os.cpu_count(), "loadavg_start": os.getloadavg()}
    print(report.render(), flush=True)
    out["base_libraries"] = sorted(base_libraries(args.checkout, args.arch))
    sample, pools = draw(tasks, args.arch, args.per_category, args.seed, args.max_context_kib * 1024,
                         args.max_bench_s, base_libraries(args.checkout, args.arch) | set(args.library))
    out["candidates"] = pools
    chosen = [replace(t, timeout_s=max(t.timeout_s, args.min_timeout_s))
              for c in args.categories for t in sample[c] if not args.only or t.id in args.only]
    for t in chosen:
        print(f"sample {category(t):24s} {t.id}  context {context_bytes(t.context) >> 10} KiB, "
              f"bench {t.metadata.get('bench_prove_s', '?')} s, timeout {t.timeout_s:.0f} s", flush=True)
    if args.dry_run:
        return 0
    objects = sorted({o for t in chosen for o in t.metadata.get("objects", ())
                      if not Path(args.checkout, o).is_file()})
    if objects:
        out["objects_built"] = build_objects(args.checkout, objects)
        print(f"object files: {out['objects_built']}", flush=True)

    from proofgym.envs.verifiers.hol_light import HolLightVerifier

    rows = []
    with HolLightVerifier(hol_dir=args.hol_dir, bases=s2n_bases(args.checkout)) as verifier:  # heartbeats on stderr
        t = time.monotonic()
        server = verifier.server(args.arch)
        out["base_load_s"] = round(time.monotonic() - t, 1)
        out["whitelist_size"] = server.info.get("whitelist_size")
        out["loadavg_after_base"] = os.getloadavg()
        print(f"base {args.arch} READY after {out['base_load_s']} s; load average {out['loadavg_after_base']}",
              flush=True)
        out["memory_base"] = memory(server)
        failed: dict[tuple[str, str], str] = {}
        for task in chosen:
            rows.append(check_problem(verifier, task, failed))
            out["rows"] = rows
            if args.json:  # after each problem: a long run stopped early keeps what it did
                Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
        out["memory_end"] = memory(server)
        out["stats"] = dict(verifier.stats)
    out["loadavg_end"] = os.getloadavg()
    out["rows"] = rows
    out["all_as_expected"] = all(as_expected(r) for r in rows)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(f"all as expected: {out['all_as_expected']} ({len(rows)} problems)", flush=True)
    return 0 if out["all_as_expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
