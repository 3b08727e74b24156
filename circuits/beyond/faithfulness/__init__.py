"""Faithfulness of the circuits each ranking yields, as MIB scores circuit discovery (issue 24; docs/beyond.md).

The job: ``config`` (torch-free), ``job`` (``run(config, out)``, its one entry point;
:func:`~circuits.beyond.faithfulness.job.faithfulness` the same on a loaded model and pairs, ``cc.faithfulness``),
``result``."""
