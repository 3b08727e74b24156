"""``python -m circuits``: the command line (also how ``torchrun -m circuits`` launches it).

Ctrl-C while the command line itself is imported is one line, as it is at any later moment (:func:`circuits.cli.main`)."""

import os
import sys

from circuits._startup import mark_start

mark_start()  # --timings counts the imports below as "other"
try:
    from circuits.cli import main
except KeyboardInterrupt:
    if os.environ.get("CIRCUITS_DEBUG", "") not in ("", "0"):
        raise
    if os.environ.get("RANK", "0") == "0":
        print("circuits: interrupted", file=sys.stderr)
    sys.exit(130)

try:
    code = main()
except KeyboardInterrupt:  # a second Ctrl-C, or one main() saw too late to catch: it has said so or exits quietly
    code = 130
sys.exit(code)
