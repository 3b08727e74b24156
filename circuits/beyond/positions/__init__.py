"""Exact patching at every token position: the information flow into END (docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
