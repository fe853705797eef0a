"""The live observatory: a read-only Starlette app over a lab root.

Routes (GET only, nothing here writes — but for the chat panel's one POST, ``/api/chat``, which streams a
model's reply and is on only on loopback or with ``--chat``: ``chat.py``):
    /                       lab overview          /api/page/<page>?id=…   page data (JSON)
    /run/<id>               one run               /api/stream?page=…      server-sent events
    /compare?runs=a,b&key=… runs overlaid         /api/delta?page=…       the same delta, polled
    /ladder/<id>            fit + prediction band /api/series?id=…&key=…  a run's series, by metric
    /data/<id>              data report           /api/vectors?id=…&key=… a run's vectors, by metric
    /provenance/<id>        run.json, step.json   /static/<file>          vendored assets
    /experiment/<name>      an experiment's card  /api/batch?id=…&step=…  a step's batch (batch_api.py)
Ids come from the lab scan, so unknown ids and traversal attempts (``..``, ``%2e%2e``) are 404.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from glasslab.errors import UserError
from glasslab.observatory.batch_api import batch_endpoint
from glasslab.observatory.chat import ChatService
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.live import RunWatch, event_stream, parse_cursors
from glasslab.observatory.page_data import build_page
from glasslab.observatory.run_page import run_series, run_vectors
from glasslab.observatory.series import DEFAULT_POINTS, EncodedSeries, clean
from glasslab.observatory.shell import STATIC_FILES, content_security_policy, render_shell, static_file

PAGES = ("overview", "run", "compare", "ladder", "data", "provenance", "experiment")
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


class PageResponse(JSONResponse):
    """Page data as JSON; a top-level value encoded already (:class:`EncodedSeries`) goes in as it is."""

    def render(self, content: Any) -> bytes:
        encoded = {k: v.json for k, v in content.items() if isinstance(v, EncodedSeries)}
        if not encoded:
            return super().render(content)
        rest = super().render({k: v for k, v in content.items() if k not in encoded})
        parts = [json.dumps(k, ensure_ascii=False).encode() + b":" + text.encode() for k, text in encoded.items()]
        return rest[:-1] + (b"," if rest != b"{}" else b"") + b",".join(parts) + b"}"


def page_options(request: Request) -> dict[str, Any]:
    """The compare page's view: ``runs=a,b`` and one ``key=k`` per metric, its name whole (a metric may
    hold a comma); ``keys=k1,k2``, split on commas, is what older links wrote."""
    def listed(name: str) -> list[str]:
        return [v for v in (request.query_params.get(name) or "").split(",") if v]

    keys = listed("keys") + [k for k in request.query_params.getlist("key") if k]
    return {"runs": listed("runs") or None, "keys": keys or None}


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_FILES:
        raise HTTPException(404, "no such file")
    content_type = CONTENT_TYPES.get(Path(name).suffix, "application/octet-stream")
    return Response(static_file(name), media_type=content_type,
                    headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


async def not_found(request: Request, exc: HTTPException) -> Response:
    return Response(f"{exc.status_code}: {exc.detail}\n", status_code=exc.status_code,
                    media_type="text/plain; charset=utf-8")


class LabEndpoints:
    """The endpoints that read one lab: its pages, their data, the live stream and the runs' series."""

    def __init__(self, lab: Lab, chat: bool) -> None:
        self.lab = lab
        self.chat = chat

    def load(self, page: str, item_id: str | None, request: Request) -> dict[str, Any]:
        if page not in PAGES:
            raise HTTPException(404, "no such page")
        data = build_page(self.lab, page, item_id, **page_options(request))
        if data is None:
            raise HTTPException(404, "no such item in this lab")
        return data

    def html_page(self, page: str, request: Request, item_id: str | None = None) -> Response:
        data = self.load(page, item_id, request)
        boot = {"mode": "live", "page": page, "id": item_id, "query": request.query_params.multi_items(),
                "chat": self.chat}
        body = render_shell(data["title"], boot, assets="/static/", home="/")
        csp = content_security_policy(boot)
        return HTMLResponse(body, headers={**NO_STORE, "Content-Security-Policy": csp})

    async def overview(self, request: Request) -> Response:
        return self.html_page("overview", request)

    async def compare(self, request: Request) -> Response:
        return self.html_page("compare", request)

    def item_route(self, page: str):
        async def endpoint(request: Request) -> Response:
            return self.html_page(page, request, request.path_params["item_id"])
        return endpoint

    async def api_page(self, request: Request) -> Response:
        data = self.load(request.path_params["page"], request.query_params.get("id"), request)
        return PageResponse(data, headers=NO_STORE)

    def run_data(self, request: Request, read) -> Response:
        """A run's series or vectors (``read(run_id, keys)``) for the metrics named by repeated ``key``
        parameters (names may hold commas); 404 for an unknown run."""
        run_id, keys = request.query_params.get("id"), request.query_params.getlist("key")
        data = read(run_id, keys) if run_id else None
        if data is None and run_id and run_id not in self.lab.index().runs:
            self.lab.index(fresh=True)  # perhaps created since the cached scan
            data = read(run_id, keys)
        if data is None:
            raise HTTPException(404, "no such run in this lab, or its store cannot be read now")
        if isinstance(data, EncodedSeries):
            return Response(data.json, media_type="application/json", headers=NO_STORE)
        return JSONResponse(clean(data), headers=NO_STORE)

    # Plain methods: Starlette runs them in its threads, so a page's first chart is not kept waiting
    # behind another page's heatmap of 48 layers (the pages and the stream stay on the event loop).
    def api_series(self, request: Request) -> Response:
        """Series of at most ``points`` points each (a heatmap row needs fewer than a chart)."""
        points = request.query_params.get("points", "")
        points = int(points) if points.isdigit() else DEFAULT_POINTS
        return self.run_data(request, lambda run_id, keys: run_series(self.lab, run_id, keys, points))

    def api_vectors(self, request: Request) -> Response:
        return self.run_data(request, lambda run_id, keys: run_vectors(self.lab, run_id, keys))

    def watch_for(self, request: Request) -> tuple[RunWatch, str]:
        page = request.query_params.get("page", "")
        data = self.load(page, request.query_params.get("id"), request) if page != "overview" else {"watch": []}
        cursors = parse_cursors(request.query_params.get("cursor"))
        return RunWatch(self.lab, data["watch"], cursors), page

    async def api_stream(self, request: Request) -> Response:
        watch, page = self.watch_for(request)
        lab_ticks = page in ("overview", "ladder", "data", "provenance", "experiment")
        headers = {**NO_STORE, "X-Accel-Buffering": "no"}
        return StreamingResponse(event_stream(watch, lab_ticks), media_type="text/event-stream",
                                 headers=headers)

    async def api_delta(self, request: Request) -> Response:
        watch, _ = self.watch_for(request)
        try:
            message = watch.poll(force=True)
        finally:
            watch.close()
        message["lab"] = hash(self.lab.signature())
        return JSONResponse(message, headers=NO_STORE)


def create_app(lab_root: str | Path, chat: bool = False) -> Starlette:
    """The app for ``lab_root`` (which may not exist yet: the overview then shows an empty lab); ``chat``
    turns the chat panel's endpoint on (:func:`chat_allowed` says when)."""
    lab = Lab(lab_root)
    endpoints = LabEndpoints(lab, chat)
    routes = [
        Route("/", endpoints.overview),
        Route("/compare", endpoints.compare),
        *(Route(f"/{page}/{{item_id:path}}", endpoints.item_route(page))
          for page in ("run", "ladder", "data", "provenance", "experiment")),
        Route("/api/page/{page}", endpoints.api_page),
        Route("/api/stream", endpoints.api_stream),
        Route("/api/delta", endpoints.api_delta),
        Route("/api/series", endpoints.api_series),
        Route("/api/vectors", endpoints.api_vectors),
        Route("/api/batch", batch_endpoint(lab)),
        Route("/api/chat", ChatService(lab, enabled=chat).endpoint, methods=["POST"]),
        Route("/static/{name}", static),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})


LISTEN_BACKLOG = 2048
"""uvicorn's own default backlog."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, for the server, or a one-line UserError saying why not.

    Binding before anything is printed or started means a busy port is reported as such instead of
    after a URL that never answers; listening at once means a client that reads the printed URL and
    connects before the server has started waits in the backlog instead of being refused.
    """
    if not 0 <= port <= 65535:
        raise UserError(f"port {port}: expected a port number from 0 to 65535")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"host {host!r}: cannot resolve it ({exc.strerror}); expected an address such as "
                        "127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        expected = {errno.EADDRINUSE: "a free port (pass another --port)",
                    errno.EADDRNOTAVAIL: "an address of this machine (--host)",
                    errno.EACCES: "a port this user may open (ports below 1024 need privileges)"}
        raise UserError(f"cannot serve on {host}:{port} ({exc.strerror}); expected "
                        f"{expected.get(exc.errno, 'an address and port free to bind')}") from None
    sock.listen(LISTEN_BACKLOG)
    return sock


def chat_allowed(host: str, chat: bool = False) -> bool:
    """Whether the chat panel's endpoint is on: on a loopback address (only this machine can post), or
    when asked (``--chat``: anyone who reaches the server may)."""
    if chat or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(lab_root: str | Path, host: str = "127.0.0.1", port: int = 8765,
          sock: socket.socket | None = None, chat: bool = False) -> None:
    """Run the app with uvicorn until interrupted, on ``sock`` (from :func:`bind`) or a fresh bind; the chat
    endpoint is on when :func:`chat_allowed` says so."""
    import uvicorn

    sock = sock or bind(host, port)
    # Open pages hold their event streams forever: stop waiting for them soon after Ctrl-C.
    config = uvicorn.Config(create_app(lab_root, chat_allowed(host, chat)), host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])


class BackgroundServer:
    """The app served by uvicorn in a thread of this process (the demo serves while it trains)."""

    def __init__(self, lab_root: str | Path, host: str = "127.0.0.1", port: int = 8765,
                 start_timeout: float = 10.0, chat: bool = False) -> None:
        import threading
        import time

        import uvicorn

        sock = bind(host, port)
        config = uvicorn.Config(create_app(lab_root, chat_allowed(host, chat)), host=host, port=port, log_level="error",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.port = sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name="observatory",
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise UserError(f"observatory: the server on {host}:{self.port} did not start")
            time.sleep(0.02)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self.thread.is_alive():
            self.thread.join(timeout=0.5)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
