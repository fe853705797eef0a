"""The HTML shell every page shares: the title, the boot object and the scripts, nothing else.

Pages are drawn in the browser from their data (``page_data``) with text nodes, so user text never
passes through an HTML parser; the few values put into the shell are escaped here.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from importlib import resources
from string import Template
from typing import Any

STYLES = ("uPlot.min.css", "observatory.css")
# In load order: the chart library, the formatter and charts, what pages share, one module per page
# (the run page's sections after it: each registers itself), then the script that draws the page.
SCRIPTS = ("uPlot.iife.min.js", "format.js", "charts.js", "heatmap.js", "common.js", "series-source.js",
           "workspace.js", "metric-search.js", "trace-marks.js", "page-overview.js", "page-run.js", "run-posttrain.js",
           "run-changes.js", "run-charts.js", "run-moe.js", "run-chat.js", "run-batch.js", "page-compare.js",
           "page-ladder.js", "data-map.js", "page-data.js", "page-provenance.js", "page-experiment.js",
           "observatory.js")
STATIC_FILES = STYLES + SCRIPTS
# Inline, so no page asks the server (or the disk, from file://) for a /favicon.ico that is not there.
FAVICON = ("data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
           "%3Crect width='16' height='16' rx='3' fill='%231d232a'/%3E"
           "%3Cpath d='M3 12 L6 7 L9 9 L13 4' stroke='%2370b0ff' stroke-width='2' fill='none'/%3E%3C/svg%3E")


def script_json(data: Any) -> str:
    """JSON safe to place inside ``<script>``: ``<``, ``>``, ``&`` and line separators escaped."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def static_file(name: str) -> bytes:
    """A vendored front-end asset by name (only names in ``STATIC_FILES`` exist)."""
    return resources.files("glasslab.observatory").joinpath("static", name).read_bytes()


def boot_script(boot: dict[str, Any]) -> str:
    """The page's only inline script: it hands the page its ``boot`` object."""
    return f"window.GLASSLAB_BOOT = {script_json(boot)};"


def content_security_policy(boot: dict[str, Any]) -> str:
    """Scripts and styles from this site only, plus the one boot script by its hash: should any
    text ever slip through unescaped, the browser still refuses to run it."""
    digest = base64.b64encode(hashlib.sha256(boot_script(boot).encode()).digest()).decode()
    return (f"default-src 'self'; script-src 'self' 'sha256-{digest}'; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; "
            "base-uri 'none'; form-action 'none'")


def render_shell(title: str, boot: dict[str, Any], assets: str, home: str,
                 data_scripts: tuple[str, ...] = ()) -> str:
    """The page for ``boot`` (``mode``, ``page``, ``id`` …); ``assets`` prefixes asset URLs."""
    template_file = resources.files("glasslab.observatory").joinpath("templates", "page.html")
    template = Template(template_file.read_text(encoding="utf-8"))
    def tags(sources: tuple[str, ...]) -> str:
        return "\n".join(f'<script src="{html.escape(src)}"></script>' for src in sources)

    styles = "\n".join(f'<link rel="stylesheet" href="{html.escape(assets + name)}">' for name in STYLES)
    return template.substitute(
        title=html.escape(title), home=html.escape(home), favicon=html.escape(FAVICON), styles=styles,
        boot_script=boot_script(boot), data_scripts=tags(data_scripts),
        scripts=tags(tuple(assets + name for name in SCRIPTS)),
        mode_label="live" if boot.get("mode") == "live" else "snapshot",
    )
