"""An experiment card as a person reads it: rich tables on a terminal, or Markdown for an issue or a post.

Both draw the dict of :func:`glasslab.lab.card_results.card_results` and print its pre-formatted
numbers, so the terminal, the Markdown and the observatory's card page show the same digits. With a
``site_url`` (where ``glasslab publish`` output is hosted) the Markdown links runs, fits and data
reports to their pages there, the card to its own page, and shows the fits' figures the site carries
(the file names are the publisher's); without it, figures are paths under the lab.
"""

from __future__ import annotations

import time
from typing import Any

from glasslab.observatory.publish import figure_file, page_file

VERDICT_STYLE = {"confirmed": "bold green", "refuted": "bold red", "open": "bold yellow"}


def page_url(site_url: str | None, page: str | None, item_id: str | None) -> str | None:
    """The published page of ``page``/``item_id`` under ``site_url`` (None without either)."""
    if not site_url or not page:
        return None
    return f"{site_url.rstrip('/')}/{page_file(page, item_id)}"


class CardMarkdownWriter:
    """The card's Markdown sections, with links to the published pages under ``site_url`` (code spans
    without one) and each source numbered once as a footnote."""

    def __init__(self, site_url: str | None) -> None:
        self.site_url = site_url
        self.notes: list[dict[str, Any]] = []

    def linked(self, text: str, page: str | None, item_id: str | None) -> str:
        url = page_url(self.site_url, page, item_id)
        return f"[{_md(text)}]({url})" if url else f"`{text}`"

    def note(self, source: dict[str, Any] | None) -> str:
        """A footnote mark for ``source`` (each source numbered once); empty without one."""
        if not source:
            return ""
        if source not in self.notes:
            self.notes.append(source)
        return f"[^{self.notes.index(source) + 1}]"

    def expectations(self, r: dict[str, Any]) -> list[str]:
        if not r["expectations"]:
            return ["_The card states no expectations._"]
        lines = ["| expectation | metric | source | predicted | band | actual | result |",
                 "|---|---|---|---|---|---|---|"]
        for e in r["expectations"]:
            step = self.linked(e["step"], e["page"], e["folder"]) if e["folder"] else _md(e["step"])
            unit = f" {e['unit']}" if e["unit"] else ""
            actual = _md(e["actual_display"]) + self.note(e["sources"].get("actual"))
            predicted = (e["point_text"] or "–") + self.note(e["sources"].get("predicted"))
            lines.append(f"| {_md(e['name'])} | `{e['metric']}` of {step} | {_md(e['source'])} | "
                         f"{predicted} | {e['band_text']}{unit} | {actual} | {e['inside_text']} |")
        return lines

    def runs(self, r: dict[str, Any]) -> list[str]:
        """The steps' table, the totals and the figures the steps drew."""
        lines = ["", "## Runs", "", "| step | folder | status | attempts | seconds |", "|---|---|---|---|---|"]
        for s in r["steps"]:
            seconds = f"{s['seconds']:.1f}" if s["seconds"] is not None else "–"
            lines.append(f"| {_md(s['name'])} | {self.linked(s['folder'], s['page'], s['folder'])} | "
                         f"{s['status']} | {s['attempts'] or '–'} | {seconds} |")
        lines += ["", f"Total: {r['totals']['text']}.{self.note(r['totals'].get('source'))}"]
        figures = [(s["folder"], name) for s in r["steps"] for name in s["figures"]]
        if figures:
            lines += ["", "## Figures", ""]
            base = self.site_url.rstrip("/") if self.site_url else None
            for folder, name in figures:
                url = f"{base}/{figure_file(folder, name)}" if base else f"{folder}/{name}"
                lines.append(f"![{_md(folder)}: {_md(name)}]({url})")
        return lines

    def incidents(self, r: dict[str, Any]) -> list[str]:
        lines = ["", "## Incidents", ""]
        for i in r["incidents"]:
            at = f" at step {i['at_step']}" if i["at_step"] is not None else ""
            lines.append(f"- **{i['word']}**{at} in {self.linked(i['folder'], i['page'], i['folder'])}: "
                         f"{_md(i['title'])}")
        return lines if r["incidents"] else [*lines, "none"]

    def sources(self) -> list[str]:
        if not self.notes:
            return []
        # Where each number comes from: run the commands in the folder that holds the lab.
        lines = ["", "## Sources", "", "Commands run in the folder that holds the lab; files are named under it.", ""]
        return lines + [f"[^{i}]: " + ("" if n["kind"] == "command" else "read from ") + f"`{n['text']}`"
                        for i, n in enumerate(self.notes, 1)]


def card_markdown(results: dict[str, Any], site_url: str | None = None) -> str:
    """The card as GitHub-flavoured Markdown: question, design, expectations, steps, incidents, totals,
    verdict, conclusions."""
    r = results
    writer = CardMarkdownWriter(site_url)
    own = page_url(site_url, "experiment", r["name"])
    lines = [f"# {_md(r['title'])}", ""]
    if own:
        lines += [f"Card page: {own}", ""]
    lines += [f"**Verdict: {r['verdict']}** — {_md(r['verdict_text'])}", ""]
    lines += ["## Question", "", _md(r["question"]) or "_none stated_", ""]
    lines += ["## Design", ""]
    if r["design"]:
        lines += [_md(r["design"]), ""]
    lines += [f"Steps: {', '.join(writer.linked(s['name'], s['page'], s['folder']) for s in r['steps'])}", ""]
    lines += ["## Expectations", "", *writer.expectations(r), *writer.runs(r), *writer.incidents(r)]
    if r["conclusions"]:
        lines += ["", "## Conclusion", ""] + [f"- {_md(c['text'])} ({c['time']})" for c in r["conclusions"]]
    lines += writer.sources()
    version = f"card v{r['version']}" if r["version"] else "no card declared"
    lines += ["", f"_{version} of experiment `{r['name']}`, {len(r['versions'])} version(s) stored; "
              f"filled in {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._", ""]
    return "\n".join(lines)


def card_console(results: dict[str, Any]) -> list[Any]:
    """Rich renderables for the terminal: a header, expectations, runs, incidents, verdict."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    r = results
    out: list[Any] = [Text(r["title"], style="bold"), Text(f"question: {r['question']}")]
    if r["design"]:
        out.append(Text(f"design: {r['design']}", style="dim"))
    expectations = Table(title="expectations", title_justify="left")
    for column in ("expectation", "metric", "step", "predicted", "band", "actual", "result"):
        expectations.add_column(column)
    for e in r["expectations"]:
        style = {True: "green", False: "red", None: "yellow"}[e["inside"]]
        actual = e["actual_display"]
        expectations.add_row(escape(e["name"]), e["metric"], e["folder"] or e["step"], e["point_text"] or "–",
                             e["band_text"] + (f" {e['unit']}" if e["unit"] else ""), escape(actual),
                             f"[{style}]{e['inside_text']}[/]")
    out.append(expectations)
    out.extend(Text(f"floor of {e['name']}: {e['floor']}", style="dim") for e in r["expectations"] if e.get("floor"))
    runs = Table(title=f"runs ({r['status']}): {r['totals']['text']}", title_justify="left")
    for column in ("step", "folder", "status", "attempts", "seconds"):
        runs.add_column(column)
    for s in r["steps"]:
        runs.add_row(s["name"], s["folder"], s["status"], str(s["attempts"] or "–"),
                     "–" if s["seconds"] is None else f"{s['seconds']:.1f}")
    out.append(runs)
    if r["incidents"]:
        incidents = Table(title="incidents", title_justify="left")
        for column in ("incident", "run", "at step", "what"):
            incidents.add_column(column)
        for i in r["incidents"]:
            incidents.add_row(i["word"], i["folder"], "" if i["at_step"] is None else str(i["at_step"]),
                              escape(i["title"]))
        out.append(incidents)
    else:
        out.append(Text("incidents: none"))
    for c in r["conclusions"]:
        out.append(Text(f"conclusion: {c['text']}"))
    out.append(Text(f"verdict: {r['verdict_text']}", style=VERDICT_STYLE[r["verdict"]]))
    return out


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes and newlines would break the row)."""
    return str(text).replace("|", "\\|").replace("\n", " ")
