"""Agents without a model: the reference agent (a suite's upper bound) and scripted replies (for tests)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Generation, Request
from proofgym.envs.errors import ProofgymError


class ReferenceAgent(Agent):
    """Submits each task's reference proof: the upper bound of a suite, and a check that it is valid."""

    name = "reference"

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        out = []
        for request in requests:
            if request.task is None:
                raise ProofgymError("the reference agent needs the task of each request")
            out.append(Generation(request.task.reference_proof, is_proof=True))
        return out


Script = Mapping[str, str | Sequence[str]] | Callable[[Request], str]


class ScriptedAgent(Agent):
    """Replies from a script, like a model would (the replies go through the output parser).

    The script maps a task id to one reply, or to a list of replies by attempt
    (the last one repeats); the key ``"*"`` is the reply for tasks not listed.
    A callable ``(request) -> reply`` may stand instead of the mapping.

    >>> agent = ScriptedAgent({"t1": ["```coq\\nProof. auto. Qed.\\n```", "Proof. lia. Qed."]})
    """

    name = "scripted"

    def __init__(self, script: Script, *, default: str = "", model: str = "") -> None:
        self.script = script
        self.default = default
        self.model = model
        self.calls: list[Request] = []

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedAgent:
        """A script from a JSON file: ``{"task id": "reply" | ["attempt 1", "attempt 2"], "*": "default"}``."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ProofgymError(f"cannot read the script {path}: {exc}") from None
        if not isinstance(data, dict) or not all(isinstance(v, (str, list)) for v in data.values()):
            raise ProofgymError(f"{path}: a script is a JSON object of task id -> reply or list of replies")
        return cls(data, default=str(data.get("*", "")), model=path.stem)

    def reply(self, request: Request) -> str:
        if callable(self.script):
            return self.script(request)
        task_id = request.task.id if request.task else ""
        entry: Any = self.script.get(task_id, self.script.get("*", self.default))
        if isinstance(entry, str):
            return entry
        if not entry:
            return self.default
        return str(entry[min(request.attempt, len(entry) - 1)])

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        self.calls.extend(requests)
        out = []
        for request in requests:
            text = self.reply(request)
            prompt_chars = sum(len(m["content"]) for m in request.messages)
            # A rough token count (4 characters a token) so that cost accounting has numbers to add up.
            out.append(Generation(text, prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4))
        return out
