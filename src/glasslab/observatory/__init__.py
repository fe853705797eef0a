"""The observatory: a read-only live web page for the whole lab, and its static export.

    glasslab serve --lab lab            # live pages with server-sent events
    glasslab publish --out site         # the same pages as static files (add --watch)

It reads only files under the lab root (``lab_scan``), draws charts from rollups kept by the
tracker (``series``), pushes what runs log (``live``) and writes nothing there.
"""

from glasslab.observatory.app import create_app, serve
from glasslab.observatory.publish import publish, watch

__all__ = ["create_app", "serve", "publish", "watch"]
