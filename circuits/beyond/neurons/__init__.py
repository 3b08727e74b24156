"""The key MLPs' neurons at END and their knockout (docs/beyond.md)."""

from circuits.beyond.neurons.job import NeuronConfig, NeuronResult, run_neurons

__all__ = ["NeuronConfig", "NeuronResult", "run_neurons"]
