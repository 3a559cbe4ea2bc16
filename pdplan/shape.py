"""The instance shape: what one deployable instance is, declared once.

An instance is a GPU type and how the model is split across its GPUs: tensor parallelism (TP) inside a node or over
whole nodes of one NVLink domain, pipeline parallelism (PP) across stages, attention data parallelism (DP: ranks
that each hold their own batch and KV and run attention alone, SGLang's ``--enable-dp-attention --dp``, vLLM's
``--data-parallel-size``, TensorRT-LLM's ``enable_attention_dp``) and expert parallelism (EP: the GPUs the routed
experts are spread over, whole experts per GPU). Every object that describes one shape — a candidate, a goodput
result, a latency profile, its measured points, a pool — inherits these fields from :class:`InstanceShape`, so the
GPU count, the label and the key are derived in one place, and a coordinate added here (attention data-parallel
ranks, expert-parallel size, nodes spanned) reaches all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdplan.vocabulary import AllToAll


def shape_label(gpu: str, tp: int, pp: int, *, dp: int = 1, ep: int = 1, compact: bool = False) -> str:
    """How a shape reads in every output: ``h100-80gb TP2 PP2``, ``h200-141gb TP1 DP32 EP32 PP1``;
    DP and EP show when above 1, and ``compact`` leaves out PP1."""
    wide = (f" DP{dp}" if dp > 1 else "") + (f" EP{ep}" if ep > 1 else "")
    if compact and pp == 1:
        return f"{gpu} TP{tp}{wide}"
    return f"{gpu} TP{tp}{wide} PP{pp}"


def shape_key(model: str, gpu: str, tp: int, pp: int, *, dp: int = 1, ep: int = 1,
              all_to_all: str = AllToAll.DISPATCH) -> tuple:
    """The profile key of a shape: (model, gpu, tp, pp), with (dp, ep) appended only when either is
    above 1, so every key of a TP × PP instance (and every profile file) reads as it always has, and
    "gather" after them for whole experts reached by a gather (``all_to_all``, :class:`pdplan.vocabulary.AllToAll`)."""
    if all_to_all == AllToAll.GATHER:
        return (model, gpu, tp, pp, dp, ep, str(AllToAll.GATHER))
    if dp > 1 or ep > 1:
        return (model, gpu, tp, pp, dp, ep)
    return (model, gpu, tp, pp)


def wide_ep(tp: int, dp: int) -> int:
    """The EP of the wide shapes pdplan plans: with attention DP above 1, every routed expert whole on one
    of the instance's TP × DP GPUs; without it, 1 (the experts split over TP)."""
    return tp * dp if dp > 1 else 1


def wide_slots(dp: int, redundant_experts: int) -> int:
    """The redundant expert slots a planned shape holds: a search's ``redundant_experts`` on its wide shapes
    (attention DP above 1, where :func:`wide_ep` spreads whole experts), none on the others."""
    return redundant_experts if dp > 1 else 0


def spans_nvlink(tp: int, gpus_per_node: int, fabric_gpus: int) -> bool:
    """Whether a TP group of ``tp`` GPUs wider than a node of ``gpus_per_node`` runs over whole nodes that one
    NVLink fabric of ``fabric_gpus`` GPUs joins (:attr:`pdplan.hardware.GPU.fabric_gpus`; 0: none joins nodes):
    it takes whole nodes and the fabric holds it."""
    return tp > gpus_per_node and tp % gpus_per_node == 0 and tp <= fabric_gpus


@dataclass(frozen=True, kw_only=True)
class InstanceShape:
    """One instance's GPU type and parallel split; subclasses add what they say about it."""

    gpu: str      #: GPU type name, as in the GPU catalog and the profiles
    #: tensor-parallel degree of attention: GPUs per DP rank and stage, inside one node, or over whole nodes that
    #: share one NVLink domain (TensorRT-LLM's TEP8 over two GB200 compute trays)
    tp: int = 1
    pp: int = 1   #: pipeline-parallel degree: stages
    dp: int = 1   #: attention data-parallel ranks, each with its own batch and KV (1: none)
    ep: int = 1   #: expert-parallel size: GPUs holding whole routed experts (1: experts split by TP)

    @property
    def gpus(self) -> int:
        """GPUs one instance occupies, as the engines count them: an EP32 / DP32 instance of attention
        TP1 is 32 GPUs (SGLang ``--tp 32 --dp 32``; vLLM ``--data-parallel-size 32``)."""
        return self.tp * self.dp * self.pp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: the attention TP group of every DP rank."""
        return self.tp * self.dp

    def nodes_per_stage(self, gpus_per_node: int, fabric_gpus: int = 0) -> int:
        """Nodes one stage spans on nodes of ``gpus_per_node`` GPUs: 1 when it fits one node, else
        whole nodes with the same number of ranks on each (DeepSeek's decode unit: EP144 on 18 nodes
        of 8); 0 when it cannot be spread evenly or a rank's TP group would leave its node. A TP group
        wider than a node spans whole nodes that an NVLink fabric of ``fabric_gpus`` GPUs joins (GB200's
        compute trays of 4 in a rack of 72: a TP8 group on two of them), its all-reduce on NVLink; without
        one (0) the group stays inside the node."""
        if self.tp > gpus_per_node and not spans_nvlink(self.tp, gpus_per_node, fabric_gpus):
            return 0
        if self.stage_gpus <= gpus_per_node:
            return 1
        return self.stage_gpus // gpus_per_node if self.stage_gpus % gpus_per_node == 0 else 0

    def node_slot(self, gpus_per_node: int) -> int:
        """GPUs the instance takes on each node it uses (a stage's GPUs, or a whole node when it spans)."""
        return min(self.stage_gpus, gpus_per_node)

    @property
    def is_wide(self) -> bool:
        """Whether the instance uses attention data parallelism or expert parallelism."""
        return self.dp > 1 or self.ep > 1

    @property
    def exchanges_tokens(self) -> bool:
        """Whether its MoE layers move tokens between attention-DP ranks and expert-parallel GPUs (both above 1),
        by a dispatch or a gather (:class:`pdplan.vocabulary.AllToAll`, a pool's ``all_to_all``)."""
        return self.dp > 1 and self.ep > 1

    def shape_label(self, *, compact: bool = False) -> str:
        """:func:`shape_label` of this shape."""
        return shape_label(self.gpu, self.tp, self.pp, dp=self.dp, ep=self.ep, compact=compact)


@dataclass(frozen=True, kw_only=True)
class ModelShape(InstanceShape):
    """One model on one instance shape: what a latency profile and its measured points describe."""

    model: str    #: model name, as in the model catalog

    @property
    def key(self) -> tuple:
        """(model, gpu, tp, pp): how profiles are looked up; (model, gpu, tp, pp, dp, ep) for an
        instance with attention data parallelism or expert parallelism (:func:`shape_key`)."""
        return shape_key(self.model, self.gpu, self.tp, self.pp, dp=self.dp, ep=self.ep)

    @property
    def shape(self) -> str:
        """``llama2-70b a100-80gb TP2 PP1``."""
        return f"{self.model} {self.shape_label()}"
