"""Heuristic neurons of the key MLPs over the operand grid, classified and knocked out (docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
