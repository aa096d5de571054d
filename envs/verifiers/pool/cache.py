"""A verdict cache for the verifier pools: an identical submission is never checked twice.

GRPO samples several completions per prompt and small policies repeat themselves, so a batch
holds many identical (task, proof) pairs; a prover's verdict on one of them is a pure function of
the task, the proof text and the verifier's settings. The pool keys each check by

    sha256(task as JSON, proof text, the pool's verifier settings)

and answers a repeat from here (``CheckResult.cached`` is true, ``wall_s``/``cpu_s`` 0: nothing
ran). A repeat submitted while the first is still running waits for it instead of running too
(*coalescing*). What is never stored: a harness failure (the prover broke, nothing was learned
about the proof) and a TIMEOUT (it depends on the deadline and the machine's load, and the next
try may finish). The cache is in memory, per pool, bounded (least recently used entries go first).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from proofgym.envs.types import CheckResult, Task, Verdict

#: Entries a pool keeps by default (a CheckResult is a few KB: tens of MB at most).
DEFAULT_VERDICT_CACHE_ENTRIES = 20_000


def cache_key(task: Task, proof: str, settings: str) -> str:
    """The key of one check: the task (every field), the exact proof text, and the verifier settings."""
    digest = hashlib.sha256()
    for part in (task.to_json(), proof, settings):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))  # length-prefixed: no two part lists collide
        digest.update(data)
    return digest.hexdigest()


def cacheable(result: CheckResult | None) -> bool:
    """Whether a result may answer a later identical check: a verdict, and not a TIMEOUT."""
    return result is not None and result.verdict is not Verdict.TIMEOUT


class VerdictCache:
    """A thread-safe LRU map of check key -> :class:`CheckResult`, with hit counters."""

    def __init__(self, max_entries: int = DEFAULT_VERDICT_CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = int(max_entries)
        self._entries: OrderedDict[str, CheckResult] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.coalesced = 0

    def get(self, key: str) -> CheckResult | None:
        """The stored result as a cache answer (``cached=True``, no time spent), or ``None``."""
        with self._lock:
            result = self._entries.get(key)
            if result is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return answer_from(result)

    def put(self, key: str, result: CheckResult) -> None:
        if not cacheable(result):
            return
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            lookups = self.hits + self.misses
            return {"entries": len(self._entries), "max_entries": self.max_entries, "hits": self.hits,
                    "misses": self.misses, "coalesced": self.coalesced,
                    "hit_rate": (self.hits + self.coalesced) / (lookups + self.coalesced)
                    if lookups + self.coalesced else 0.0}


def answer_from(result: CheckResult) -> CheckResult:
    """``result`` as the answer to another identical check: marked cached, and nothing ran for it."""
    return replace(result, cached=True, wall_s=0.0, cpu_s=0.0)
