"""The audited attribution screen (docs/beyond.md): AtP* and GradDrop ranks checked against exact patching.

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
