"""``glasslab chat RUN[@STEP] | EXPORT``: talk to a run's checkpoint or an export in the terminal, or get one
reply with --prompt.

    glasslab chat sft-1a2b3c4d                           # interactive: /reset, /quit (or Ctrl-D)
    glasslab chat lab/sft-1a2b3c4d@200 --prompt "What does `json.dumps` do?" --temperature 0
    glasslab chat export-9f8e7d6c                        # the exported transformers folder
"""

from __future__ import annotations

import argparse
import sys

from glasslab.cli.options import add_lab_option

TUNED_ROLES = ("sft", "dpo")


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
    add_lab_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model

    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.max_new_tokens, args.seed)
    chat = load_chat_model(args.run, args.lab, args.device)
    session = ChatSession(chat, sampling, args.system)
    if args.prompt is not None:
        _print_reply(session, args.prompt)
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
            _print_reply(session, text)


def _print_reply(session, text: str) -> None:
    for piece in session.reply(text):
        print(piece, end="", flush=True)
    print()
