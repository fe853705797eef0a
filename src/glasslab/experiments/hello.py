"""``glasslab run hello``: the smallest experiment, to see the lab work (two steps, no training).

``greet`` writes a greeting; ``shout`` reads it from the folder of the step its config refers to and writes
it in capitals.
Rerun it and nothing runs; change the greeting in a copy of this file and only both steps rerun.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glasslab.config import UNVERSIONED
from glasslab.lab import Step, StepOutput, output_of


@dataclass(frozen=True)
class ShoutConfig:
    greeting: StepOutput = field(metadata=UNVERSIONED)
    """The step that wrote the greeting (its identity is in shout's dependencies, so the reference itself is not
    hashed: shout kept its name when this field replaced a lookup of its inputs by name)."""


def greet(ctx) -> None:
    (ctx.output_dir / "greeting.txt").write_text(f"hello, {ctx.config['who']}\n", encoding="utf-8")


def shout(ctx) -> None:
    text = (ctx.config.greeting.folder / "greeting.txt").read_text(encoding="utf-8")
    (ctx.output_dir / "shout.txt").write_text(text.upper(), encoding="utf-8")


def steps() -> list[Step]:
    hello = Step("greet", greet, config={"who": "lab"})
    return [hello, Step("shout", shout, ShoutConfig(output_of(hello)))]
