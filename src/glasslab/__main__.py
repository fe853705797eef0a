"""``python -m glasslab`` is the ``glasslab`` command (torchrun runs it this way)."""

import sys

from glasslab.cli import main

sys.exit(main())
