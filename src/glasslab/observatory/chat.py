"""The chat panel's server side: the one endpoint of the observatory that takes input.

``POST /api/chat`` with JSON ``{"model", "text", "messages", "system", "temperature", "top_k", "top_p",
"max_new_tokens", "seed"}`` streams one reply as JSON lines: ``{"text": piece}`` as the text decodes, then
``{"done": true, "model", "tokens", "first_token_s", "seconds", "trace"}`` (or ``{"error": …}``; ``trace``:
the reply's spans found in the training data, when the lab holds the index of the model's dataset). The page keeps
each conversation (``messages``: the exchanges so far) and sends it back with the next message, so the
server holds no conversation; a model (``posttrain.chat``, with the KV cache ``glasslab chat`` uses) is
loaded on first use and kept, a few at a time.

What keeps it safe on a machine that also trains:

- it is on only when the server listens on loopback, or with ``glasslab serve --chat`` (then anyone who
  can reach the server may use it); otherwise the endpoint answers 403 and the page says why;
- ``model`` must name a run of this lab (``RUN`` or ``RUN@STEP``) or an export step of it — never a path;
- a request must be ``application/json`` and, when the browser says where it comes from (``Origin``),
  come from this server's own pages (a form or a script on another site cannot post);
- one generation at a time over the whole server, decided before the response starts: a request while
  another reply is being generated gets 429 with ``Retry-After`` (seconds) and ``{"error": "busy…"}``, and
  the page waits and sends again, saying so (it sends its two columns one after the other); at most
  :data:`MAX_NEW_TOKENS` tokens, a message of at most :data:`MAX_MESSAGE_CHARS` characters."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from glasslab.errors import UserError
from glasslab.layout import EXPORT_MANIFEST
from glasslab.observatory.lab_scan import Lab

MAX_NEW_TOKENS = 512
"""The most tokens one reply may have, whatever the page asks."""
MAX_MESSAGE_CHARS = 4000
MAX_HISTORY_MESSAGES = 64
MODELS_KEPT = 4
"""Loaded models kept for the next message (the least recently used goes first)."""
BUSY = "busy: another reply is being generated (one at a time); send again when it ends"
RETRY_AFTER_S = 1
"""What a busy answer's ``Retry-After`` says: a tiny model's reply takes a second or a few."""
_REF = re.compile(r"^([A-Za-z0-9_.\-/]+?)(?:@(\d+))?$")


class ChatService:
    """The endpoint, its models and its one-at-a-time lock, for the app over ``lab``."""

    def __init__(self, lab: Lab, enabled: bool, device: str = "cpu") -> None:
        self.lab, self.enabled, self.device = lab, enabled, device
        self._models: OrderedDict[str, Any] = OrderedDict()
        self._busy = threading.Lock()

    def model_ref(self, ref: Any) -> str:
        """The folder (``@STEP``) under the lab that ``ref`` names; a UserError for anything else."""
        match = _REF.match(ref) if isinstance(ref, str) else None
        index = self.lab.index()
        if match:
            name, step = match.groups()
            if name in index.runs:
                return f"{index.runs[name]}@{step}" if step is not None else str(index.runs[name])
            folder = index.steps.get(name)
            if step is None and folder is not None and (folder / EXPORT_MANIFEST).is_file():
                return str(folder)
        raise UserError(f"model {ref!r}: expected a run of this lab (RUN or RUN@STEP) or one of its exports")

    def load(self, ref: str):
        """The chat model at ``ref`` (a folder under the lab), loaded on first use."""
        from glasslab.posttrain.chat import load_chat_model

        if ref not in self._models:
            self._models[ref] = load_chat_model(ref, device=self.device)
            while len(self._models) > MODELS_KEPT:
                self._models.popitem(last=False)
        self._models.move_to_end(ref)
        return self._models[ref]

    async def endpoint(self, request: Request) -> Response:
        if not self.enabled:
            return _refuse(403, "live chat is off: glasslab serve turns it on when it listens on loopback "
                                "(the default), or with --chat")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _refuse(415, "expected a JSON body (Content-Type: application/json)")
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            return _refuse(403, "a chat request must come from this server's own pages")
        try:
            body = await request.json()
            ask = self.parse(body)
        except (ValueError, UserError) as exc:
            return _refuse(400, str(exc))
        if not self._busy.acquire(blocking=False):
            return _refuse(429, BUSY, {"Retry-After": str(RETRY_AFTER_S)})
        turn = _Turn(self._busy)
        return _TurnResponse(turn, self.reply_lines(ask, turn), media_type="application/x-ndjson",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    def parse(self, body: Any) -> dict[str, Any]:
        """The request's fields, checked (a UserError naming the first bad one)."""
        from glasslab.posttrain.chat import Sampling

        if not isinstance(body, dict):
            raise UserError("expected a JSON object")
        text = body.get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_MESSAGE_CHARS:
            raise UserError(f"text: expected a message of 1 to {MAX_MESSAGE_CHARS} characters")
        messages = body.get("messages") or []
        if (not isinstance(messages, list) or len(messages) > MAX_HISTORY_MESSAGES
                or not all(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                           and isinstance(m.get("content"), str) and len(m["content"]) <= MAX_MESSAGE_CHARS * 4
                           for m in messages)):
            raise UserError(f"messages: expected at most {MAX_HISTORY_MESSAGES} {{role: user|assistant, content}}")
        system = body.get("system") or ""
        if not isinstance(system, str) or len(system) > MAX_MESSAGE_CHARS:
            raise UserError(f"system: expected text of at most {MAX_MESSAGE_CHARS} characters")
        try:
            sampling = Sampling(temperature=float(body.get("temperature", 0.7)), top_k=int(body.get("top_k", 0)),
                                top_p=float(body.get("top_p", 0.9)),
                                max_new_tokens=min(MAX_NEW_TOKENS, int(body.get("max_new_tokens", 256))),
                                seed=int(body.get("seed", 0)))
        except (TypeError, ValueError) as exc:
            raise UserError(f"sampling: {exc}") from None
        messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        return {"ref": self.model_ref(body.get("model")), "text": text, "messages": messages, "system": system,
                "sampling": sampling}

    async def reply_lines(self, ask: dict[str, Any], turn: _Turn) -> AsyncIterator[bytes]:
        """The reply as JSON lines, generated in ``turn`` (the caller holds the lock).

        One worker thread loads the model (first use) and draws the whole reply, handing each piece of text
        to the event loop as it decodes; pieces that pile up while a line is being sent go out together. A
        page closed mid-reply stops the worker at its next token; the turn ends when the worker has."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()
        turn.worker = loop.run_in_executor(None, self._generate, ask, lambda item: loop.call_soon_threadsafe(
            queue.put_nowait, item), stop)
        try:
            while True:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                text = "".join(value for kind, value in items if kind == "text")
                if text:
                    yield _line({"text": text})
                end = next((value for kind, value in items if kind != "text"), None)
                if end is not None:
                    # The turn ends before the page reads "done": its next request finds the lock free.
                    await asyncio.wait([turn.worker])
                    turn.end()
                    yield _line(end)
                    turn.worker.result()  # a reply that failed: its traceback goes to the server's log too
                    return
        finally:
            stop.set()

    def _generate(self, ask: dict[str, Any], put: Callable[[tuple[str, Any]], None], stop: threading.Event) -> None:
        """Draw the reply in this (worker) thread: ``("text", piece)`` items, then ``("end", done or error)``."""
        from glasslab.posttrain.chat import ChatSession

        started = time.perf_counter()
        try:
            chat = self.load(ask["ref"])
            session = ChatSession(chat, ask["sampling"], ask["system"], ask["messages"])
            first = None
            for piece in session.reply(ask["text"]):
                first = first if first is not None else time.perf_counter() - started
                put(("text", piece))
                if stop.is_set():
                    return
            done = {"done": True, "model": chat.name, "role": chat.role, "tokens": session.last_reply_tokens,
                    "first_token_s": first, "seconds": time.perf_counter() - started}
            put(("end", {**done, "trace": self._trace(chat, session.messages[-1]["content"])}))
        except UserError as exc:
            put(("end", {"error": str(exc)}))
        except Exception as exc:  # the page says what went wrong; the server keeps serving
            put(("end", {"error": f"the reply failed: {type(exc).__name__}: {exc}"}))
            raise


    def _trace(self, chat, reply: str) -> list[dict[str, Any]] | None:
        """The reply's spans found in the training data of the model, when its dataset's index is in the lab."""
        from glasslab.observatory.sample_trace import traced_spans

        if chat.dataset is None:
            return None
        try:
            return traced_spans(self.lab, chat.dataset, reply)
        except (UserError, OSError, ValueError):  # an index being replaced: the reply stands untraced
            return None


class _Turn:
    """The one generation the service's lock allows: taken before the response starts, given back once the
    response has ended and its worker thread, if one started, has drawn its last token."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.worker: asyncio.Future | None = None
        self.ended = False

    def end(self) -> None:
        """Give the lock back now, or when the worker ends (once, however often this is called)."""
        if self.ended:
            return
        self.ended = True
        if self.worker is None or self.worker.done():
            self.lock.release()
        else:
            self.worker.add_done_callback(lambda _: self.lock.release())


class _TurnResponse(StreamingResponse):
    """The reply's stream; it ends its turn however the response ends (a page closed before the stream
    began included, when no worker ever started)."""

    def __init__(self, turn: _Turn, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turn = turn

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.turn.end()


def _line(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, ensure_ascii=False) + "\n").encode()


def _refuse(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status,
                        headers={"Cache-Control": "no-store", **(headers or {})})
