"""Suite files: JSONL, one :class:`~proofgym.envs.types.Task` per line.

A suite is either a file (``.jsonl``, or ``.json`` holding one task object or a
list of them) or the name of a built suite, such as ``coq-stdlib``, which
lives in :func:`suite_dir` once ``proofgym build coq-stdlib`` has written it.
``datasets.load_dataset("json", data_files=path)`` reads the same files.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from proofgym.envs.errors import ProofgymError, TaskFormatError
from proofgym.envs.systems import buildable_suites
from proofgym.envs.types import Task

SUITE_SUFFIXES = (".jsonl", ".json")
BUILDABLE_SUITES = tuple(buildable_suites())  # what `proofgym build NAME` makes (envs/systems.py)
_PACKAGED_DIR = Path(__file__).resolve().parent / "data"


class SuiteNotFound(ProofgymError, FileNotFoundError):
    """A suite name or path that names nothing on disk. The message says how to build it."""


def suite_dir() -> Path:
    """The folder of built suites: ``$PROOFGYM_CACHE/suites``, else ``~/.cache/proofgym/suites``.

    The environment is read at each call, so that tests and users can redirect it.
    """
    cache = os.environ.get("PROOFGYM_CACHE")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache" / "proofgym"
    return base / "suites"


def resolve_suite(name_or_path: str | os.PathLike[str]) -> Path:
    """The file of a suite, given a path to it or the name of a built (or packaged) suite.

    A name ``NAME`` (no folder, no ``.jsonl``/``.json`` suffix) is looked up as
    ``suite_dir()/NAME.jsonl``, then among the suites shipped in the package.

    Raises:
        SuiteNotFound: if neither exists; the message says how to build it.
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    text = str(name_or_path)
    is_name = path.suffix not in SUITE_SUFFIXES and os.sep not in text and "/" not in text
    if not is_name:
        raise SuiteNotFound(f"suite file {path} does not exist")
    for candidate in (suite_dir() / f"{text}.jsonl", _PACKAGED_DIR / f"{text}.jsonl"):
        if candidate.is_file():
            return candidate
    if text in BUILDABLE_SUITES:
        elsewhere = _built_elsewhere(text)
        hint = (f"; a build of it is at {elsewhere}: use it with PROOFGYM_CACHE={elsewhere.parent.parent} "
                f"(`make eval` and `make suite` build into the checkout's .cache/proofgym)") if elsewhere else (
                f"; run `proofgym build {text}` first, or pass the path of a .jsonl file")
        raise SuiteNotFound(f"suite {text!r} is not built (looked for {suite_dir() / f'{text}.jsonl'}){hint}")
    known = ", ".join(known_suites()) or "none yet"
    raise SuiteNotFound(
        f"no suite named {text!r}. Suites here: {known}; buildable with `proofgym build NAME`: "
        f"{', '.join(BUILDABLE_SUITES)}; or pass the path of a .jsonl file"
    )


def _built_elsewhere(name: str) -> Path | None:
    """A build of suite ``name`` in another cache folder than :func:`suite_dir`: the checkout's ``.cache``
    (where the Makefile builds), the current folder's, or the home default."""
    checkout = Path(__file__).resolve().parents[2]
    for base in (checkout / ".cache" / "proofgym", Path.cwd() / ".cache" / "proofgym",
                 Path.home() / ".cache" / "proofgym"):
        candidate = base / "suites" / f"{name}.jsonl"
        if candidate.is_file() and candidate.parent.resolve() != suite_dir().resolve():
            return candidate
    return None


def known_suites() -> list[str]:
    """The names of the suites that load now: built ones in :func:`suite_dir`, then packaged ones."""
    names: list[str] = []
    for folder in (suite_dir(), _PACKAGED_DIR):
        if folder.is_dir():
            names += [p.stem for p in sorted(folder.glob("*.jsonl")) if p.stem not in names]
    return names


def unknown_task_message(task_id: str, ids: Iterable[str], suite: str | os.PathLike[str] | None = None) -> str:
    """What to say about a task id that is not in a suite: the closest ids, and how to list them all."""
    ids = list(ids)
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    how = f"`proofgym tasks {suite}`" if suite is not None else "`proofgym tasks SUITE`"
    return f"unknown task_id {task_id!r} ({len(ids)} tasks{hint}); list the ids with {how}"


def load_tasks(path_or_name: str | os.PathLike[str]) -> list[Task]:
    """Read a suite: a JSONL file (blank lines allowed), a ``.json`` file, or a built suite's name.

    Raises:
        SuiteNotFound: if the suite does not exist.
        TaskFormatError: on malformed JSON, a malformed task or a repeated id;
            the message starts with ``file:line``.
    """
    path = resolve_suite(path_or_name)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if path.suffix == ".json":
        items = _json_items(path, text)
    else:
        items = list(_jsonl_items(path, text))
    tasks: list[Task] = []
    first_seen: dict[str, str] = {}
    for source, raw in items:
        task = Task.from_dict(raw, source=source)
        if task.id in first_seen:
            raise TaskFormatError(f"{source}: duplicate task id {task.id!r} (first at {first_seen[task.id]})")
        first_seen[task.id] = source
        tasks.append(task)
    return tasks


def write_tasks(path: str | os.PathLike[str], tasks: Iterable[Task]) -> Path:
    """Write ``tasks`` as JSONL, atomically: a reader sees the old file or the whole new one.

    Returns:
        The path written.
    """
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for task in tasks:
                f.write(task.to_json())
                f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _jsonl_items(path: Path, text: str) -> Iterable[tuple[str, object]]:
    # Split on "\n" only: str.splitlines() would also cut at U+2028 and friends, which
    # ``ensure_ascii=False`` JSON keeps raw inside strings.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        source = f"{path}:{lineno}"
        try:
            yield source, json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFormatError(f"{source}: invalid JSON at column {exc.colno}: {exc.msg}") from exc


def _json_items(path: Path, text: str) -> list[tuple[str, object]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{path}:{exc.lineno}: invalid JSON at column {exc.colno}: {exc.msg}") from exc
    if isinstance(data, dict):
        line = text.count("\n", 0, len(text) - len(text.lstrip())) + 1
        return [(f"{path}:{line}", data)]
    if isinstance(data, list):
        return [(f"{path}:{line}", item) for line, item in zip(_item_lines(text), data, strict=True)]
    raise TaskFormatError(
        f"{path}:1: a .json suite must hold a task object or a list of them, got {type(data).__name__}"
    )


def _item_lines(text: str) -> list[int]:
    """1-based line of each element of the top-level JSON list in ``text`` (already known valid)."""
    decoder = json.JSONDecoder()
    lines: list[int] = []
    i = text.index("[") + 1
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "]":
            return lines
        lines.append(text.count("\n", 0, i) + 1)
        _, i = decoder.raw_decode(text, i)


def load_task_index(suite: str | None) -> dict[str, Task]:
    """Tasks by id from a suite name or path (``None``: no index), for the verifier service's ``task_id`` lookups."""
    if not suite:
        return {}
    return {t.id: t for t in load_tasks(suite)}
