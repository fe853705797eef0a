"""``glasslab run hello``: the smallest experiment, to see the lab work (two steps, no training).

``greet`` writes a greeting; ``shout`` reads it from its dependency's folder and writes it in capitals.
Rerun it and nothing runs; change the greeting in a copy of this file and only both steps rerun.
"""

from __future__ import annotations

from glasslab.lab import Step


def greet(ctx) -> None:
    (ctx.output_dir / "greeting.txt").write_text(f"hello, {ctx.config['who']}\n", encoding="utf-8")


def shout(ctx) -> None:
    text = (ctx.inputs["greet"] / "greeting.txt").read_text(encoding="utf-8")
    (ctx.output_dir / "shout.txt").write_text(text.upper(), encoding="utf-8")


def steps() -> list[Step]:
    hello = Step("greet", greet, config={"who": "lab"})
    return [hello, Step("shout", shout, config={}, deps=(hello,))]
