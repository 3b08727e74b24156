"""The key MLPs' neurons at END and their knockout (docs/beyond.md)."""

from circuits.beyond.neurons.config import NeuronConfig
from circuits.beyond.neurons.result import NeuronResult
from circuits.beyond.neurons.job import run_neurons

__all__ = ["NeuronConfig", "NeuronResult", "run_neurons"]
