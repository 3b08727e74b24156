"""``python -m circuits.torchrun``: ``torchrun`` with circuits' error handling (the same arguments).

``torchrun`` itself ends every failed launch with its own ``ChildFailedError`` traceback (about 30 lines, exit
code 1) after the workers' output, whatever the workers print, and nothing a worker does can change that. This
runs torchrun's launcher in-process instead and, when workers fail, prints nothing more than what they printed
(``circuits`` prints one line, from rank 0) and exits with the first failed worker's exit code (2 for bad input,
130 for Ctrl-C; a worker killed by a signal is one line naming the rank and the signal, exit code 128 + signal)::

    python -m circuits.torchrun --standalone --nproc-per-node 2 -m circuits identify --pairs 64 --out results/id

Arguments, the environment each worker gets and the workers' output are torchrun's (``torch.distributed.run``).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence


def _quiet_failures() -> None:
    """Drop the launcher's own log lines about a failed worker (``failed (exitcode: 2) ...``, ``Sending process ...
    closing signal SIGTERM``): the worker said what was wrong, and this module says how it ended."""

    class NoFailureLines(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            text = record.getMessage()
            return not ("failed (exitcode" in text or "closing signal" in text)

    for name in ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api"):
        logging.getLogger(name).addFilter(NoFailureLines())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.run import get_args_parser, run

        args = get_args_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        _quiet_failures()
        try:
            run(args)
        except ChildFailedError as err:
            rank, failure = err.get_first_failure()
            code = failure.exitcode
            if code < 0:  # killed by a signal: the worker could say nothing
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                print(f"circuits: rank {rank} was killed by {name}", file=sys.stderr)
                return 128 - code
            return code
        except SignalException as err:
            print("circuits: interrupted" if err.sigval == signal.SIGINT else f"circuits: stopped by {err.sigval.name}",
                  file=sys.stderr)
            return 128 + int(err.sigval)
        return 0
    except KeyboardInterrupt:
        print("circuits: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
