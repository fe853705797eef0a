"""``/api/batch?id=RUN&step=S[&attempt=A]``: a training step's batch for the run page's batch panel.

``data/batches.py`` rebuilds it (replaying the attempt's loader draws, checked against the hash the
trainer recorded). A step, attempt or dataset the run cannot answer for is a 400 whose ``error`` is the
one line ``glasslab batch`` would print; an unknown run is a 404. The JSON is the published site's
(``batch_view.panel_json``), uncut.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from glasslab.errors import UserError
from glasslab.observatory.batch_view import panel_json
from glasslab.observatory.lab_scan import Lab

NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def batch_endpoint(lab: Lab):
    """The endpoint over ``lab``'s runs."""

    async def endpoint(request: Request) -> Response:
        folder = lab.index().runs.get(request.query_params.get("id") or "")
        if folder is None:
            raise HTTPException(404, "no such run in this lab")
        try:
            step = int(request.query_params.get("step", ""))
            attempt = request.query_params.get("attempt")
            attempt = int(attempt) if attempt else None
        except ValueError:
            return JSONResponse({"error": "step and attempt: expected whole numbers"}, 400, headers=NO_STORE)
        from glasslab.data.batches import rebuild_batch  # torch: only when a batch is asked for

        try:
            batch = await run_in_threadpool(rebuild_batch, folder, step, attempt)
        except UserError as exc:
            return JSONResponse({"error": str(exc)}, 400, headers=NO_STORE)
        return JSONResponse(panel_json(batch), headers=NO_STORE)

    return endpoint
