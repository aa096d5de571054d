"""``proofgym report RUN_DIR [RUN_DIR2]``: a Markdown or HTML report of evaluation runs, with plots.

For one run, or two side by side: headline metrics, pass@k per category,
verdict counts, Selene's failure taxonomy, cheat reasons and cost as tables,
and matplotlib plots (pass@k against k, per-category bars, the verdict
breakdown, failed first attempts by error type, cheat reasons). The numbers
come from each run's ``summary.json`` (recomputed from ``results.jsonl`` when
the summary is missing, e.g. after a killed run).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.agents.base import require
from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import Task, Verdict

VERDICT_COLORS = {"OK": "#2e7d32", "FAIL": "#f9a825", "ERROR": "#6d4c41", "TIMEOUT": "#1565c0", "CHEATING": "#c62828"}
FAILURE_COLORS = {"logic": "#5c6bc0", "undefined": "#ef6c00", "syntax": "#8d6e63", "other": "#9e9e9e"}
RUN_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]


@dataclass
class RunData:
    """One run as the report needs it."""

    path: Path
    label: str
    summary: dict[str, Any]
    config: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)  # results.jsonl, for example attempts


def load_run(path: str | Path) -> RunData:
    """A run from its folder (``summary.json``, ``config.json``, ``results.jsonl``) or its results file."""
    from proofgym.training.evaluate import RunPaths, read_json_object, read_results, summarize

    path = Path(path)
    if not path.exists():
        raise ProofgymError(f"run {path} does not exist")
    paths = RunPaths.for_out(path)
    if path.is_dir() and not paths.results.exists() and not paths.summary.exists():
        raise ProofgymError(f"{path} holds no results.jsonl or summary.json: is it an eval run dir?")
    config = read_json_object(paths.config) or {}
    rows = read_results(paths.results) if paths.results.exists() else []
    summary = read_json_object(paths.summary)
    if summary is not None and summary.get("results") and Path(summary["results"]).name != paths.results.name:
        summary = None  # summary.json of another results file in the same folder
    if summary is None:
        if not rows:
            raise ProofgymError(f"{paths.results} has no results to report")
        cfg = config.get("config", {})
        k = int(cfg.get("k") or 1)
        n = int(cfg.get("n") or k)
        tasks = _tasks_from_rows(rows)
        max_attempts = max(int(r.get("n_attempts", 1) or 1) for r in rows)
        summary = summarize(rows, tasks, k, n=n, max_attempts=max(max_attempts, 1)).to_dict()
    cfg = config.get("config", {})
    label = path.name if path.is_dir() else path.stem
    if cfg:
        label = " ".join(str(x) for x in (cfg.get("agent"), cfg.get("model"), cfg.get("strategy")) if x)
        label = f"{label} ({path.name if path.is_dir() else path.stem})"
    return RunData(path, label, summary, config, rows)


def _tasks_from_rows(rows: Sequence[dict[str, Any]]) -> list[Task]:
    seen: dict[str, Task] = {}
    for row in rows:
        if row["task_id"] not in seen:
            seen[row["task_id"]] = Task(id=row["task_id"], system=row.get("system", "coq"), context="",
                                        statement="-", reference_proof="", category=row.get("category", ""))
    return list(seen.values())


# -- plots ------------------------------------------------------------------------------------------
def _pyplot():
    matplotlib = require("matplotlib", "report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _ks(stats: dict[str, Any], prefix: str) -> list[tuple[int, float]]:
    out = []
    for key, value in stats.items():
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            out.append((int(key[len(prefix):]), float(value)))
    return sorted(out)


def plot_pass_at_k(runs: Sequence[RunData], path: Path) -> Path:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        cats = run.summary["per_category"]
        for j, (cat, stats) in enumerate(cats.items()):
            if len(runs) > 1 and cat != "all":
                continue
            points = _ks(stats, "pass@")
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            style = {"linewidth": 2.4, "marker": "o"} if cat == "all" else {"linewidth": 1.2, "marker": ".",
                                                                             "alpha": 0.8}
            label = f"{run.label}" if len(runs) > 1 else ("all" if cat == "all" else cat)
            if len(runs) > 1:
                color = RUN_COLORS[i % len(RUN_COLORS)]
            else:
                color = "black" if cat == "all" else palette[(j + 1) % len(palette)]
            line = ax.plot(xs, [100 * y for y in ys], label=label, color=color, **style)
            fixes = _ks(stats, "fix@")
            if fixes and cat == "all":
                fx, fy = zip(*fixes, strict=True)
                ax.plot(fx, [100 * y for y in fy], linestyle="--", color=line[0].get_color(), marker="s",
                        label=f"{label}, after fixing")
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k (%)")
    ax.set_ylim(0, 105)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("pass@k (unbiased estimator, first attempts)")
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


def plot_categories(runs: Sequence[RunData], path: Path) -> Path:
    plt = _pyplot()
    cats = sorted({c for r in runs for c in r.summary["per_category"]}, key=lambda c: (c == "all", c))
    def metrics_of(run: RunData) -> list[str]:
        k = int(run.summary.get("k", 1))
        names = ["pass@1"] + ([f"pass@{k}"] if k > 1 else [])
        return names + (["fix@1"] if int(run.summary.get("max_attempts", 1)) > 1 else [])

    bars = [(r, m) for r in runs for m in metrics_of(r)]
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(min(12.0, 3.0 + len(cats) * (0.6 + 0.3 * len(bars))), 4.0))
    for j, (run, metric) in enumerate(bars):
        metrics = metrics_of(run)
        values = [100 * float(run.summary["per_category"].get(c, {}).get(metric, 0.0)) for c in cats]
        xs = [i + (j - (len(bars) - 1) / 2) * width for i in range(len(cats))]
        label = metric if len(runs) == 1 else f"{run.label}: {metric}"
        color = RUN_COLORS[runs.index(run) % len(RUN_COLORS)] if len(runs) > 1 else None
        alpha = 1.0 - 0.3 * metrics.index(metric)
        drawn = ax.bar(xs, values, width * 0.95, label=label, color=color, alpha=alpha)
        for rect, value in zip(drawn, values, strict=True):
            ax.annotate(f"{value:.0f}", (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                        ha="center", va="bottom", fontsize=7)
    counts = {c: max(int(r.summary["per_category"].get(c, {}).get("n", 0)) for r in runs) for c in cats}
    ax.set_xticks(range(len(cats)), [f"{c}\n(n={counts[c]})" for c in cats])
    ax.set_ylabel("%")
    ax.set_ylim(0, 110)
    ax.set_title("success per category")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


def plot_verdicts(runs: Sequence[RunData], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 1.5 + 0.6 * len(runs)))
    for i, run in enumerate(runs):
        counts = run.summary.get("verdicts", {})
        total = sum(counts.values()) or 1
        left = 0.0
        for verdict in (v.value for v in Verdict):
            value = counts.get(verdict, 0)
            if not value:
                continue
            share = 100 * value / total
            ax.barh(i, share, left=left, color=VERDICT_COLORS[verdict],
                    label=verdict if verdict not in ax.get_legend_handles_labels()[1] else None)
            if share >= 9:
                ax.text(left + share / 2, i, f"{verdict}\n{value}", ha="center", va="center", color="white",
                        fontsize=8)
            elif share >= 3:
                ax.text(left + share / 2, i, str(value), ha="center", va="center", color="white", fontsize=8)
            left += share
    ax.set_yticks(range(len(runs)), [_short(r.label) for r in runs])
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of episodes (final attempt)")
    ax.set_title("verdicts")
    ax.grid(False)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


def plot_failures(runs: Sequence[RunData], path: Path) -> Path | None:
    plt = _pyplot()
    rows = [(run, cat, counts) for run in runs for cat, counts in run.summary.get("failure_taxonomy", {}).items()]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.2, 1.2 + 0.45 * len(rows)))
    for i, (_, _, counts) in enumerate(rows):
        total = counts.get("failures", 0) or 1
        left = 0.0
        for kind, color in FAILURE_COLORS.items():
            share = 100 * counts.get(kind, 0) / total
            if share:
                ax.barh(i, share, left=left, color=color,
                        label=kind if kind not in ax.get_legend_handles_labels()[1] else None)
                if share >= 8:
                    ax.text(left + share / 2, i, str(counts.get(kind, 0)), ha="center", va="center", color="white",
                            fontsize=8)
                left += share
    labels = [f"{cat} ({counts.get('failures', 0)})" if len(runs) == 1 else f"{_short(run.label)}: {cat}"
              for run, cat, counts in rows]
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of failed first attempts")
    ax.set_title("failed first attempts by error type (Selene Table 3)")
    ax.grid(False)
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda i: list(FAILURE_COLORS).index(names[i]))
    ax.legend([handles[i] for i in order], [names[i] for i in order], fontsize=8, loc="center left",
              bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


def plot_cheats(runs: Sequence[RunData], path: Path) -> Path | None:
    plt = _pyplot()
    reasons = sorted({r for run in runs for r in run.summary.get("cheat_reasons", {})},
                     key=lambda r: -sum(run.summary.get("cheat_reasons", {}).get(r, 0) for run in runs))[:15]
    if not reasons:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.35 * len(reasons) * len(runs)))
    height = 0.8 / len(runs)
    for j, run in enumerate(runs):
        values = [run.summary.get("cheat_reasons", {}).get(r, 0) for r in reasons]
        ys = [i + (j - (len(runs) - 1) / 2) * height for i in range(len(reasons))]
        ax.barh(ys, values, height * 0.95, color=RUN_COLORS[j % len(RUN_COLORS)] if len(runs) > 1 else "#c62828",
                label=_short(run.label) if len(runs) > 1 else None)
    ax.set_yticks(range(len(reasons)), [_short(r, 45) for r in reasons])
    ax.invert_yaxis()
    ax.set_xlabel("attempts")
    ax.set_title("cheat reasons")
    if len(runs) > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # a legend outside the axes and the title stay in the image
    plt.close(fig)
    return path


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the document ------------------------------------------------------------------------------------
def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def _blocks(runs: Sequence[RunData], images: dict[str, Path | None]) -> list[tuple]:
    names = [r.label for r in runs]
    blocks: list[tuple] = [("h1", "proofgym evaluation report" + (" — comparison" if len(runs) > 1 else ""))]
    keys = [("suite", "suite"), ("agent", "agent"), ("model", "model"), ("strategy", "strategy"), ("k", "k")]
    rows = []
    for title, key in keys:
        rows.append([title, *[str(r.config.get("config", {}).get(key, r.summary.get(key, "")) or "-") for r in runs]])
    rows.append(["tasks", *[str(r.summary.get("n_tasks", "")) for r in runs]])
    rows.append(["results", *[str(r.summary.get("n_results", "")) for r in runs]])
    rows.append(["run dir", *[str(r.path) for r in runs]])
    blocks += [("h2", "Runs"), ("table", ["", *names], rows)]
    for run in runs:
        for note in run.summary.get("notes", []):
            blocks.append(("p", f"**Note ({_short(run.label)}):** {note}"))
    # headline
    metric_names: list[str] = []
    for run in runs:
        for name in run.summary["per_category"].get("all", {}):
            if name != "n" and name not in metric_names and (name in ("pass@1", f"pass@{run.summary['k']}")
                                                             or name.startswith(("acc#", "fix#")) or name == "fix@1"):
                metric_names.append(name)
    rows = [[m, *[_pct(r.summary["per_category"].get("all", {}).get(m)) for r in runs]] for m in metric_names]
    blocks += [("h2", "Headline (all categories)"), ("table", ["metric", *names], rows)]
    # per category
    cats = sorted({c for r in runs for c in r.summary["per_category"]}, key=lambda c: (c == "all", c))
    header = ["category"]
    for run in runs:
        prefix = f"{_short(run.label, 20)}: " if len(runs) > 1 else ""
        header += [f"{prefix}tasks", f"{prefix}pass@1"]
        if int(run.summary.get("max_attempts", 1)) > 1:
            header.append(f"{prefix}fix@1")
    rows = []
    for cat in cats:
        row = [cat]
        for run in runs:
            stats = run.summary["per_category"].get(cat, {})
            row += [str(stats.get("n", 0)), _pct(stats.get("pass@1"))]
            if int(run.summary.get("max_attempts", 1)) > 1:
                row.append(_pct(stats.get("fix@1")))
        rows.append(row)
    blocks += [("h2", "Per category"), ("table", header, rows)]
    if images.get("pass_at_k"):
        blocks.append(("img", images["pass_at_k"], "pass@k against k"))
    if images.get("categories"):
        blocks.append(("img", images["categories"], "per-category success"))
    # verdicts
    rows = [[v.value, *[str(r.summary.get("verdicts", {}).get(v.value, 0)) for r in runs]] for v in Verdict]
    rows.append(["harness failures", *[str(r.summary.get("harness_failures", 0)) for r in runs]])
    rows.append(["agent failures", *[str(r.summary.get("agent_failures", 0)) for r in runs]])
    blocks += [("h2", "Verdicts"), ("table", ["verdict", *names], rows)]
    if images.get("verdicts"):
        blocks.append(("img", images["verdicts"], "verdict breakdown"))
    # failures
    blocks.append(("h2", "Failed first attempts by error type (Selene Table 3)"))
    header = ["run", "category", "failures", "logic", "undefined", "syntax", "other"]
    rows = []
    for run in runs:
        for cat, counts in run.summary.get("failure_taxonomy", {}).items():
            total = counts.get("failures", 0) or 1
            rows.append([_short(run.label, 30), cat, str(counts.get("failures", 0)),
                         *[f"{counts.get(t, 0)} ({100 * counts.get(t, 0) / total:.0f}%)"
                           for t in ("logic", "undefined", "syntax", "other")]])
    blocks.append(("table", header, rows) if rows else ("p", "No failed first attempts."))
    if images.get("failures"):
        blocks.append(("img", images["failures"], "failure taxonomy"))
    # cheats
    blocks.append(("h2", "Cheat reasons"))
    reasons = sorted({x for r in runs for x in r.summary.get("cheat_reasons", {})})
    if reasons:
        rows = [[reason, *[str(r.summary.get("cheat_reasons", {}).get(reason, 0)) for r in runs]]
                for reason in reasons]
        blocks.append(("table", ["reason", *names], rows))
        if images.get("cheats"):
            blocks.append(("img", images["cheats"], "cheat reasons"))
    else:
        blocks.append(("p", "No cheating attempt."))
    # cost
    cost_keys = ["total_tokens", "prompt_tokens", "completion_tokens", "cost_usd", "verifier_calls",
                 "verifier_cpu_s", "verifier_wall_s", "generation_s", "run_wall_s", "solved_tasks"]
    rows = [[COST_LABELS.get(key, key), *[_fmt(r.summary.get("cost", {}).get(key)) for r in runs]]
            for key in cost_keys]
    for key in ("tokens", "verifier_calls", "verifier_cpu_s", "wall_s", "cost_usd"):
        rows.append([f"per solved task: {key}",
                     *[_fmt((r.summary.get("cost", {}).get("per_solved_task") or {}).get(key)) for r in runs]])
    blocks += [("h2", "Cost"), ("table", ["", *names], rows)]
    blocks += _examples(runs)
    return blocks


COST_LABELS = {
    "verifier_cpu_s": "verifier_cpu_s (summed over checks)",
    "verifier_wall_s": "verifier_wall_s (summed over checks, which overlap on several workers)",
    "generation_s": "generation_s (summed over requests, which overlap when concurrent)",
    "run_wall_s": "run_wall_s (the run's elapsed time)",
}


def _examples(runs: Sequence[RunData], per_run: int = 6, proof_chars: int = 600) -> list[tuple]:
    """Example attempts: for a few tasks, the proof text, its verdict and the prover's first words on it.

    Solved and unsolved tasks alternate so that a reader sees both what works and how things fail.
    """
    blocks: list[tuple] = [("h2", "Example attempts")]
    for run in runs:
        by_task: dict[str, list[dict[str, Any]]] = {}
        for row in run.rows:
            by_task.setdefault(str(row.get("task_id")), []).append(row)
        if not by_task:
            continue
        solved = [t for t, rs in sorted(by_task.items()) if any(r.get("verdict") == "OK" for r in rs)]
        unsolved = [t for t in sorted(by_task) if t not in solved]
        picked = [t for pair in zip(unsolved, solved, strict=False) for t in pair]
        picked += [t for t in unsolved + solved if t not in picked]
        if len(runs) > 1:
            blocks.append(("p", f"**{run.label}**"))
        for task_id in picked[:per_run]:
            rows = by_task[task_id]
            row = next((r for r in rows if r.get("verdict") == "OK"), rows[0])
            why = "; ".join(list(row.get("reasons") or [])[:2] + list(row.get("messages") or [])[:1])
            proof = str(row.get("proof") or "")
            if len(proof) > proof_chars:
                proof = proof[:proof_chars] + f"\n... ({len(proof) - proof_chars} more characters)"
            ok = sum(r.get("verdict") == "OK" for r in rows)
            blocks.append(("p", f"`{task_id}` ({row.get('category')}): {ok}/{len(rows)} OK; "
                                f"sample {row.get('sample')}: **{row.get('verdict')}**"
                                + (f" — {_short(why, 300)}" if why else "")))
            blocks.append(("code", proof or "(empty reply)"))
    return blocks if len(blocks) > 1 else []


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _markdown(blocks: Sequence[tuple], base: Path) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            out.append(f"# {block[1]}\n")
        elif kind == "h2":
            out.append(f"## {block[1]}\n")
        elif kind == "p":
            out.append(f"{block[1]}\n")
        elif kind == "table":
            header, rows = block[1], block[2]
            cell = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            out.append("| " + " | ".join(cell(h) for h in header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out.extend("| " + " | ".join(cell(c) for c in row) + " |" for row in rows)
            out.append("")
        elif kind == "code":
            fence = "````" if "```" in block[1] else "```"
            out.append(f"{fence}\n{block[1]}\n{fence}\n")
        elif kind == "img":
            out.append(f"![{block[2]}]({Path(block[1]).relative_to(base).as_posix()})\n")
    return "\n".join(out)


def _html(blocks: Sequence[tuple]) -> str:
    body = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{html.escape(block[1])}</{kind}>")
        elif kind == "p":
            text = html.escape(block[1])
            while "**" in text:
                text = text.replace("**", "<b>", 1).replace("**", "</b>", 1)
            body.append(f"<p>{text}</p>")
        elif kind == "code":
            body.append(f"<pre><code>{html.escape(block[1])}</code></pre>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(Path(block[1]).read_bytes()).decode()
            body.append(f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .6em;"
             "text-align:right}th:first-child,td:first-child{text-align:left}thead{background:#f3f3f3}"
             "img{max-width:100%}figcaption{color:#666;font-size:.9em}"
             "pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>proofgym report</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_report(run_dirs: Sequence[str | Path], *, out: str | Path | None = None, fmt: str = "md") -> Path:
    """Write the report of one run (or two side by side) and its plots; return the report file.

    Args:
        run_dirs: One or two run directories (or results ``.jsonl`` files).
        out: Output folder (default ``RUN_DIR/report``, or ``RUN_DIR/report_vs_<other>`` for two runs).
        fmt: ``md`` (Markdown + PNG files) or ``html`` (one self-contained file; PNGs are kept beside it).
    """
    if not 1 <= len(run_dirs) <= 4:
        raise ProofgymError("give one run dir, or up to four to compare")
    if fmt not in ("md", "html"):
        raise ProofgymError(f"format must be md or html, got {fmt!r}")
    runs = [load_run(p) for p in run_dirs]
    first = runs[0].path if runs[0].path.is_dir() else runs[0].path.parent
    if out is None:
        out = first / ("report" if len(runs) == 1 else "report_vs_" + "_".join(r.path.name for r in runs[1:]))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = {
        "pass_at_k": plot_pass_at_k(runs, out / "pass_at_k.png"),
        "categories": plot_categories(runs, out / "categories.png"),
        "verdicts": plot_verdicts(runs, out / "verdicts.png"),
        "failures": plot_failures(runs, out / "failures.png"),
        "cheats": plot_cheats(runs, out / "cheat_reasons.png"),
    }
    blocks = _blocks(runs, images)
    target = out / f"report.{fmt}"
    target.write_text(_markdown(blocks, out) if fmt == "md" else _html(blocks), encoding="utf-8")
    return target
