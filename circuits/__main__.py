"""``python -m circuits``: the command line (also how ``torchrun -m circuits`` launches it)."""

import sys

from circuits.cli import main

sys.exit(main())
