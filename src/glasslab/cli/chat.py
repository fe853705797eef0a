"""``glasslab chat RUN[@STEP] | EXPORT``: talk to a run's checkpoint or an export in the terminal, or get one
reply with --prompt.

    glasslab chat sft-1a2b3c4d                           # interactive: /reset, /quit (or Ctrl-D)
    glasslab chat lab/sft-1a2b3c4d@200 --prompt "What does `json.dumps` do?" --temperature 0
    glasslab chat export-9f8e7d6c                        # the exported transformers folder
    glasslab chat sft-1a2b3c4d --trace                   # each reply again, its spans found in the training data
"""

from __future__ import annotations

import argparse
import sys

from glasslab.cli.options import add_lab_option

TUNED_ROLES = ("sft", "dpo", "rl")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chat", help="chat with a run's checkpoint or an export (SFT runs reply best)",
        description="Chat with the model of RUN (a run id under the lab or a run folder) at its newest intact "
        "checkpoint, or at STEP; or with an export folder (glasslab export), run by transformers. Replies "
        "stream as they are sampled; type /reset to start over and /quit (or Ctrl-D) to leave. --prompt "
        "prints one reply and exits.",
    )
    p.add_argument("run", metavar="RUN[@STEP]|EXPORT",
                   help="run id or run folder, optionally @STEP; or an export's id or folder")
    p.add_argument("--prompt", help="reply to this one message and exit")
    p.add_argument("--system", default="", help="a system message that opens the conversation")
    p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy (default 0.7)")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (default 0 = all)")
    p.add_argument("--top-p", type=float, default=0.9, help="nucleus: the smallest set with this mass (default 0.9)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="longest reply in tokens (default 256)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--trace", action="store_true",
                   help="after each reply, show it again with the spans found verbatim in the training data "
                   "highlighted, and their source documents (needs the dataset's trace index: glasslab trace RUN)")
    add_lab_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model

    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.max_new_tokens, args.seed)
    chat = load_chat_model(args.run, args.lab, args.device)
    tracer = _tracer(chat, args.run, args.lab) if args.trace else None
    session = ChatSession(chat, sampling, args.system)
    if args.prompt is not None:
        _print_reply(session, args.prompt, tracer)
        return 0
    role = "" if chat.role in TUNED_ROLES else f" (role {chat.role or 'none'}: a base model, not fine-tuned to chat)"
    print(f"chatting with {chat.name}{role}; /reset starts over, /quit leaves", file=sys.stderr)
    while True:
        try:
            text = input("you> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        if text.strip() == "/quit":
            return 0
        if text.strip() == "/reset":
            session.reset()
            print("(conversation reset)", file=sys.stderr)
            continue
        if text.strip():
            print("assistant> ", end="", flush=True)
            _print_reply(session, text, tracer)


def _print_reply(session, text: str, tracer=None) -> None:
    pieces = []
    for piece in session.reply(text):
        print(piece, end="", flush=True)
        pieces.append(piece)
    print()
    if tracer is not None:
        _print_traced("".join(pieces), tracer)


def _tracer(chat, ref: str, lab: str):
    """The tracer over the training data of the model ``ref`` names; one line when its index is not built."""
    from glasslab.data.handle import open_dataset
    from glasslab.data.text_trace import TextTracer, build_command
    from glasslab.data.token_index import built_index
    from glasslab.errors import UserError

    if chat.dataset is None:
        raise UserError(f"{ref}: the dataset it was trained on is not at hand, so there is nothing to trace against")
    index = built_index(chat.dataset, lab)
    if index is None:
        digest = open_dataset(chat.dataset).manifest_hash
        raise UserError(f"--trace: no trace index of dataset {digest[:16]} in {lab}; build it "
                        f"with: {build_command(str(chat.dataset), lab)}")
    return TextTracer(chat.dataset, index)


def _print_traced(reply: str, tracer) -> None:
    """The reply again, its traced spans highlighted and numbered, then each span's count and documents."""
    from rich.console import Console
    from rich.text import Text

    from glasslab.cli.batch import describe_source

    traced = tracer.trace(reply)
    console = Console(highlight=False, soft_wrap=True)
    if not traced["spans"]:
        console.print(Text(f"(traced: no span of >= {traced['min_tokens']} tokens found in the training data)",
                           style="dim"))
        return
    shown, at = Text(), 0
    for number, span in enumerate(traced["spans"], 1):
        start = max(at, span["char_start"])  # maximal spans may overlap: each character is marked once
        shown.append(reply[at:start])
        shown.append(reply[start:span["char_end"]], style="black on yellow")
        shown.append(f"[{number}]", style="bold yellow")
        at = max(at, span["char_end"])
    shown.append(reply[at:])
    console.print(Text("traced: ", style="dim") + shown)
    for number, span in enumerate(traced["spans"], 1):
        heldout = f", {span['heldout_count']}x in the held-out split" if span["heldout_count"] else ""
        console.print(Text(f"  [{number}] {span['end'] - span['start']} tokens, {span['count']}x in the training "
                           f"data{heldout}", style="bold"))
        for document in span["documents"]:
            console.print(Text(f"      <- {document['domain']} document {document['document']} · "
                               f"{describe_source(document['source'])}"))
