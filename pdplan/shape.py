"""The instance shape: what one deployable instance is, declared once.

An instance is a GPU type and how the model is split across its GPUs: tensor parallelism (TP)
inside a node, pipeline parallelism (PP) across stages. Every object that describes one shape —
a candidate, a goodput result, a latency profile, its measured points, a pool — inherits these
fields from :class:`InstanceShape`, so the GPU count, the label and the key are derived in one
place, and a coordinate added here (attention data-parallel ranks, expert-parallel size, nodes
spanned) reaches all of them.
"""

from __future__ import annotations

from dataclasses import dataclass


def shape_label(gpu: str, tp: int, pp: int, *, compact: bool = False) -> str:
    """How a shape reads in every output: ``h100-80gb TP2 PP2``; ``compact`` leaves out PP1."""
    if compact and pp == 1:
        return f"{gpu} TP{tp}"
    return f"{gpu} TP{tp} PP{pp}"


@dataclass(frozen=True, kw_only=True)
class InstanceShape:
    """One instance's GPU type and parallel split; subclasses add what they say about it."""

    gpu: str      #: GPU type name, as in the GPU catalog and the profiles
    tp: int = 1   #: tensor-parallel degree: GPUs per pipeline stage, inside one node
    pp: int = 1   #: pipeline-parallel degree: stages

    @property
    def gpus(self) -> int:
        """GPUs one instance occupies."""
        return self.tp * self.pp

    def shape_label(self, *, compact: bool = False) -> str:
        """:func:`shape_label` of this shape."""
        return shape_label(self.gpu, self.tp, self.pp, compact=compact)


@dataclass(frozen=True, kw_only=True)
class ModelShape(InstanceShape):
    """One model on one instance shape: what a latency profile and its measured points describe."""

    model: str    #: model name, as in the model catalog

    @property
    def key(self) -> tuple[str, str, int, int]:
        """(model, gpu, tp, pp): how profiles are looked up."""
        return (self.model, self.gpu, self.tp, self.pp)

    @property
    def shape(self) -> str:
        """``llama2-70b a100-80gb TP2 PP1``."""
        return f"{self.model} {self.shape_label()}"
