"""Key heads across seeds, templates and pair counts (docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
