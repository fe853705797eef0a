"""``python -m glasslab`` is the ``glasslab`` command (torchrun runs it this way)."""

from glasslab.cli import main
from glasslab.torchrun_exit import exit_process

exit_process(main())
