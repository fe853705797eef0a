"""Which data build a name stands for: ``demo`` (the demo's own data step) or a build config file.

``glasslab data build NAME|FILE`` and a run config's ``data.build: NAME|FILE`` mean the same step, so
a run that names ``demo`` trains on the very folder ``glasslab demo`` and ``glasslab data build demo``
make (cached once built). It lives with the CLI because the demo's build belongs to the demo experiment.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from glasslab.errors import UserError
from glasslab.lab import Step

DEMO = "demo"


def data_build_step(spec: str, overrides: Iterable[str] = (), *, relative_to: Path | None = None,
                    quick: bool = False, folder: str | Path | None = None) -> Step:
    """The data step ``spec`` names: ``demo`` (unless a file of that name exists), or a YAML/JSON build
    config, relative to ``relative_to`` when given (a run config's folder). ``quick``: the demo's small
    build; ``folder`` pins the output folder (``--out``)."""
    from glasslab import config
    from glasslab.data.build import data_step as build_data_step
    from glasslab.data.config import load_build_config

    path = Path(spec) if relative_to is None or Path(spec).is_absolute() else Path(relative_to) / spec
    if spec == DEMO and not path.exists():
        # imported only here: the demo brings the trainer and torch, which a data build's workers need not hold
        from glasslab.experiments.demo import FULL, QUICK, data_step

        demo = data_step(QUICK if quick else FULL)
        return build_data_step(config.replace(demo.config, list(overrides)), folder=folder)
    if quick:
        raise UserError(f"--quick: only with the built-in {DEMO!r} data")
    return build_data_step(load_build_config(path, overrides), folder=folder)
