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

STATIC_FILES = ("uPlot.iife.min.js", "uPlot.min.css", "observatory.css", "charts.js", "observatory.js")


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
    scripts = "\n".join(f'<script src="{html.escape(src)}"></script>' for src in data_scripts)
    return template.substitute(
        title=html.escape(title), assets=html.escape(assets), home=html.escape(home),
        boot_script=boot_script(boot), data_scripts=scripts,
        mode_label="live" if boot.get("mode") == "live" else "snapshot",
    )
