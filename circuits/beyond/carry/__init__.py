"""The carry study (issue 42): is the first answer token of a two-digit sum (the carry, "1") computed by other
components than the units digit at the next position? (docs/beyond.md, docs/results.md)

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point), ``result``."""
