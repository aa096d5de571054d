#!/usr/bin/env python3
"""Benchmark the HOL Light fork server, all in one run.

- cold start: a fresh server (HOL Light loaded in the toplevel) plus its first check;
- warm latency: the median of checks on a warm zygote; the ratio cold / warm (goal >= 1000x);
- fork overhead: a warm check's time minus the tactic's own time, as the worker clocks it (goal <= 5 ms);
  and, of that, what the fork server itself costs (fork, pipes, frames, exit: the worker's goal parsing,
  vetting and compiling of the submission left out too);
- throughput: checks per second with 1 and with 2 concurrent workers;
- memory: RSS and private memory of the root and of each zygote.

    python scripts/bench_hol_light.py [--warm 30] [--throughput 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light import HolLightVerifier, hol_light_installed

WARM = [("1 + 1 = 2", "ARITH_TAC"), ("!n. n + 0 = n", "REWRITE_TAC[ADD_CLAUSES]"), ("p /\\ q ==> q /\\ p", "MESON_TAC[]")]
CONTEXTS = ["", "let BENCH_A = prove(`!n. n + 0 = n`, CHEAT_TAC);;",
            "let BENCH_B = prove(`!n. 0 + n = n`, CHEAT_TAC);;\nlet BENCH_TAC = ARITH_TAC;;"]


def task(goal: str, context: str = "") -> Task:
    return Task(id="bench", system="hol_light", context=context, statement=f"`{goal}`", reference_proof="",
                timeout_s=60)


def fork_overhead(samples: list[tuple[float, float]]) -> dict[str, float]:
    """p50/p90 in ms of (a check's time minus its tactic's, the same minus the worker's preparation too)."""
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)
    over = [a for a, _ in samples]
    server = [b for _, b in samples]
    return {"overhead_p50_ms": pct(over, 0.5), "overhead_p90_ms": pct(over, 0.9),
            "fork_server_p50_ms": pct(server, 0.5), "fork_server_p90_ms": pct(server, 0.9)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm", type=int, default=30, help="warm checks for the latency median")
    ap.add_argument("--throughput", type=int, default=40, help="checks per throughput measurement")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    if not hol_light_installed():
        print("HOL Light is not installed: apt-get install hol-light libnum-ocaml-dev", file=sys.stderr)
        return 2
    out: dict = {}
    with HolLightVerifier(progress=False) as verifier:
        t0 = time.monotonic()
        server = verifier.server("plain")
        out["load_s"] = round(time.monotonic() - t0, 2)
        first = verifier.check(task(*WARM[0][:1]), WARM[0][1])
        out["cold_start_s"] = round(time.monotonic() - t0, 2)
        assert first.verdict is Verdict.OK, first  # noqa: S101 - a benchmark of wrong answers is worthless
        out["prover_version"] = first.prover_version
        out["whitelist_size"] = int(server.info.get("whitelist_size", 0))

        latencies = []
        overheads: list[tuple[float, float]] = []
        for i in range(args.warm):
            goal, proof = WARM[i % len(WARM)]
            t = time.monotonic()
            result = verifier.check(task(goal), proof)
            latencies.append(time.monotonic() - t)
            assert result.ok, result  # noqa: S101
            times = verifier.worker_times()
            assert times is not None, "the worker did not report its times"  # noqa: S101
            overheads.append((result.wall_s - times[1], result.wall_s - times[0] - times[1]))
        warm = statistics.median(latencies)
        out["warm_median_ms"] = round(warm * 1000, 1)
        out["warm_p90_ms"] = round(sorted(latencies)[int(0.9 * (len(latencies) - 1))] * 1000, 1)
        out["cold_over_warm"] = round(out["cold_start_s"] / warm)
        out.update(fork_overhead(overheads))

        for workers in (1, 2):
            jobs = [WARM[i % len(WARM)] for i in range(args.throughput)]
            t = time.monotonic()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(lambda j: verifier.check(task(j[0]), j[1]), jobs))
            elapsed = time.monotonic() - t
            assert all(r.ok for r in results)  # noqa: S101
            out[f"checks_per_s_{workers}_workers"] = round(len(jobs) / elapsed, 2)

        for context in CONTEXTS[1:]:
            assert verifier.check(task("1 + 1 = 2", context), "ARITH_TAC").ok  # noqa: S101
        stats = server.stats()
        out["root_rss_mb"] = round(stats.pop("root")[0] / 2**20, 1)
        out["zygotes"] = [{"rss_mb": round(rss / 2**20, 1), "private_mb": round(private / 2**20, 1)}
                          for rss, private in stats.values()]
    print(f"HOL Light load: {out['load_s']} s; cold start (load + first check): {out['cold_start_s']} s")
    print(f"warm check: median {out['warm_median_ms']} ms, p90 {out['warm_p90_ms']} ms "
          f"-> cold/warm = {out['cold_over_warm']}x (goal >= 1000x)")
    print(f"fork overhead (warm check - the tactic's own time): p50 {out['overhead_p50_ms']} ms, p90 "
          f"{out['overhead_p90_ms']} ms (goal <= 5 ms); of it the fork server's own (fork, pipes, frames, exit; "
          f"not the worker's goal parsing and vetting): p50 {out['fork_server_p50_ms']} ms, "
          f"p90 {out['fork_server_p90_ms']} ms")
    print(f"throughput: {out['checks_per_s_1_workers']} checks/s with 1 worker, "
          f"{out['checks_per_s_2_workers']} with 2")
    print(f"memory: root {out['root_rss_mb']} MB RSS; per zygote (RSS / private MB): "
          + ", ".join(f"{z['rss_mb']}/{z['private_mb']}" for z in out["zygotes"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
