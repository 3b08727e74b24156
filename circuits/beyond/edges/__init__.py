"""Sender -> receiver edges at END and the circuit graph (docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
