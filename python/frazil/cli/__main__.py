"""``python -m frazil.cli``: the ``frazil`` command (the package's ``__init__`` sets the process up
first: memory pool, thread counts, malloc)."""

import sys

from frazil.cli import main

sys.exit(main())
