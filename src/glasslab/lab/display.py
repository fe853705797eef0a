"""How the executor shows itself on a terminal: the plan as a table, progress lines, a summary."""

from __future__ import annotations

import os
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from glasslab.lab.outcome import RunReport
from glasslab.lab.plan import Plan

ACTION_STYLE = {"run": "bold yellow", "cached": "green"}
OUTCOME_STYLE = {
    "succeeded": "green", "cached": "dim green", "failed": "bold red", "skipped": "yellow",
    "interrupted": "red", "lost": "red",
}


def _path(path: os.PathLike) -> str:
    """Relative to the working folder when inside it, else absolute."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if relative.startswith("..") else relative


def plan_table(plan: Plan) -> Table:
    table = Table(title=f"plan: {len(plan.to_run())} to run, {len(plan.cached())} cached "
                  f"(lab {_path(plan.lab_root)})", title_justify="left")
    for column in ("step", "action", "why", "output folder", "depends on"):
        table.add_column(column, overflow="fold")
    for node in plan.steps:
        style = ACTION_STYLE[node.action]
        table.add_row(node.name, f"[{style}]{node.action}[/]", escape(node.reason), _path(node.folder),
                      ", ".join(d.key for d in node.deps.values()))
    return table


def report_table(report: RunReport) -> Table:
    table = Table(title="result", title_justify="left")
    for column in ("step", "outcome", "attempts", "seconds", "output folder", "error"):
        table.add_column(column, overflow="fold")
    for node in report.plan.steps:
        outcome = report.outcomes.get(node.key)
        if outcome is None:
            continue
        style = OUTCOME_STYLE.get(outcome.status, "")
        seconds = f"{outcome.duration_s:.1f}" if outcome.duration_s is not None else ""
        table.add_row(node.name, f"[{style}]{outcome.status}[/]", str(outcome.attempts or ""), seconds,
                      _path(node.folder), escape(outcome.error or ""))
    return table


class ProgressPrinter:
    """One timestamped line per step event, on stderr (stdout stays for tables and results)."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.enabled = enabled

    def line(self, symbol: str, key: str, text: str, style: str = "") -> None:
        if self.enabled:
            stamp = time.strftime("%H:%M:%S")
            head = f"[{style or 'default'}]{symbol} {escape(key)}[/]"
            self.console.print(f"[dim]{stamp}[/] {head} {escape(text)}")
