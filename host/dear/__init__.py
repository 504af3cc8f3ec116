"""DeAR: decoupled reduce-scatter (in backward) / all-gather (in the next forward) data-parallel training with
tuned tensor fusion, over any torch.distributed backend. See ``docs/dear.md``.

``from host.dear import DeAR`` is the entry point; ``GroupCompressor`` / ``CompressorHandle`` are the contract for
pluggable per-group communication (e.g. SparDL's sparse reduce-scatter/all-gather).
"""

from host.dear.compressor import (ClippableCompressor, CompressorHandle, DenseCompressor, GroupCompressor,
                                  RingReduceScatter, ring_reduce_scatter)
from host.dear.fusion import CommModel, choose_threshold, fit_alpha_beta, plan_groups, simulate_dear
from host.dear.tuner import BayesTuner
from host.dear.wrapper import DeAR, DeARError, TunerConfig

__all__ = ["DeAR", "DeARError", "TunerConfig", "GroupCompressor", "CompressorHandle", "ClippableCompressor",
           "DenseCompressor", "RingReduceScatter", "ring_reduce_scatter", "CommModel", "plan_groups", "simulate_dear", "choose_threshold", "fit_alpha_beta",
           "BayesTuner"]
