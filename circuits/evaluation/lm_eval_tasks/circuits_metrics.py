"""Copied beside the generated task YAMLs so that lm-eval's ``!function circuits_metrics.X`` resolves."""

from circuits.evaluation.tasks import process_numeric  # noqa: F401
