"""The key MLPs' neurons at END and their knockout (docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
