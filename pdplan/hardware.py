"""GPU, node and cluster specifications: what can be bought or is owned, at what cost and power."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path

from pdplan import limits
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import load_yaml
from pdplan.names import label_key as label_key_problem
from pdplan.names import label_value as label_value_problem
from pdplan.names import node_type as node_type_problem
from pdplan.schema import Fields, shown
from pdplan.shape import InstanceShape

GB = 10**9  # rates (bandwidth) are decimal: 50 GB/s is 50e9 bytes/s
GIB = 2**30  # HBM sizes are binary: an "80GB" H100 holds 80 GiB
#: The node label NVIDIA GPU Feature Discovery (NVIDIA/k8s-device-plugin, ``internal/lm/resource.go``,
#: ``productLabel``) writes on a GPU node: the NVML device name with spaces replaced by '-'.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GPUs one NVSwitch board joins by NVLink (an HGX node's eight): a larger NVLink domain spans compute trays
#: through NVLink switch trays, the multi-node NVLink fabric of GB200 NVL72.
BOARD_NVLINK_GPUS = 8


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator type, as sold or as configured (a power cap makes a distinct type)."""

    name: str
    memory_bytes: int               #: HBM capacity in bytes (the catalog states GiB)
    flops_per_s: float              #: dense BF16 tensor throughput
    fp8_flops_per_s: float = 0.0    #: dense FP8 tensor throughput; 0 when the GPU has no FP8 tensor cores
    fp4_flops_per_s: float = 0.0    #: dense FP4 (NVFP4) tensor throughput; 0 when it has none
    nvlink_domain: int = BOARD_NVLINK_GPUS  #: GPUs that share one NVLink domain (GB200 NVL72: 72)
    #: GPUs one host holds, the machine an engine starts one process group on (0: the NVLink domain's, as on
    #: an HGX board); a GB200 NVL72 rack's NVLink domain spans 18 compute trays of 4
    host_gpus: int = 0
    hbm_bytes_per_s: float          #: HBM bandwidth
    nvlink_bytes_per_s: float       #: NVLink bandwidth per GPU, one direction
    network_bytes_per_s: float      #: scale-out NIC bandwidth per GPU, one direction
    tdp_w: float                    #: power limit in watts (the cap, for a capped type)
    usd_per_hour: float             #: reference price per GPU-hour
    base: str | None = None         #: physical GPU this type is a setting of (power-capped types)
    power_cap_fraction: float = 1.0  #: fraction of the base GPU's rated power allowed
    #: Its node label value under GPU_PRODUCT_LABEL, as NVIDIA GPU Feature Discovery writes it; None if unknown
    product_label: str | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("memory_bytes", "flops_per_s", "hbm_bytes_per_s", "nvlink_bytes_per_s",
                     "network_bytes_per_s", "tdp_w"):
            if not getattr(self, name) > 0:
                raise InternalError(f"GPU {self.name}: {name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.power_cap_fraction <= 1:
            raise InternalError(f"GPU {self.name}: power_cap_fraction must be in (0, 1]")
        if self.fp8_flops_per_s < 0 or self.fp4_flops_per_s < 0 or self.nvlink_domain < 1:
            raise InternalError(f"GPU {self.name}: FP8/FP4 throughput must be >= 0 and nvlink_domain >= 1")
        if not 0 <= self.host_gpus <= self.nvlink_domain:
            raise InternalError(f"GPU {self.name}: host_gpus must be in [0, nvlink_domain]")

    @property
    def gpus_per_host(self) -> int:
        """GPUs one host holds (:attr:`host_gpus`; its NVLink domain's when the catalog states none)."""
        return self.host_gpus or self.nvlink_domain

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Tensor-core precisions this GPU runs: bf16 always, fp8 from Hopper, fp4 from Blackwell."""
        return tuple(d for d, f in (("bf16", self.flops_per_s), ("fp8", self.fp8_flops_per_s),
                                    ("fp4", self.fp4_flops_per_s)) if f > 0)

    @property
    def blackwell(self) -> bool:
        """A Blackwell GPU (sm100 and later): the one generation with FP4 tensor cores, the catalog's test of it."""
        return self.fp4_flops_per_s > 0

    @property
    def nvlink_fabric(self) -> bool:
        """Its NVLink domain spans compute trays (:data:`BOARD_NVLINK_GPUS`): the multi-node NVLink fabric that
        TensorRT-LLM's ``MnnvlMemory.supports_mnnvl()`` finds on GB200 NVL72, however a cluster file groups the
        trays into nodes."""
        return self.nvlink_domain > BOARD_NVLINK_GPUS

    @property
    def fabric_gpus(self) -> int:
        """GPUs its NVLink fabric joins across nodes (GB200 NVL72: 72), where a TP group may take whole nodes
        (:func:`pdplan.shape.spans_nvlink`); 0 where NVLink stays on one board, whatever share of it a node holds."""
        return self.nvlink_domain if self.nvlink_fabric else 0

    def tensor_flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s at ``dtype``; a dtype the GPU lacks is refused, naming those it has."""
        flops = {"bf16": self.flops_per_s, "fp8": self.fp8_flops_per_s, "fp4": self.fp4_flops_per_s}.get(dtype, 0.0)
        if flops <= 0:
            raise PdplanError(f"{self.name} has no {dtype} tensor cores (it runs {', '.join(self.dtypes)})",
                              field="dtype")
        return flops

    @property
    def physical(self) -> str:
        """Name of the hardware this type runs on (a capped H100 is still an H100 node)."""
        return self.base or self.name


_GPU_FIELDS = {"memory_gib", "bf16_tflops", "fp8_tflops", "fp4_tflops", "nvlink_domain", "host_gpus", "hbm_tb_s",
               "nvlink_gb_s", "network_gb_s", "tdp_w", "usd_per_hour", "base", "power_cap_fraction", "gpu_product",
               "sources"}


def _gpu_from_fields(name: str, spec: Fields, catalog: dict[str, Fields]) -> GPU:
    spec.reject_unknown(_GPU_FIELDS)
    base = spec.data.get("base")
    if base is not None:
        if base not in catalog or "base" in catalog[base].data:
            raise spec.fail("base", "must name an uncapped GPU of the catalog", base)
        # A derived type inherits every number it does not state.
        merged = dict(catalog[base].data)
        merged.update(spec.data)
        spec = Fields(merged, spec.file, spec.path, line=spec.line)
    domain = spec.integer("nvlink_domain", 8, minimum=1, maximum=MAX_GPUS_PER_NODE)
    return GPU(
        name=name,
        memory_bytes=int(spec.number("memory_gib", minimum=0, exclusive=True, maximum=100_000) * GIB),
        flops_per_s=spec.number("bf16_tflops", minimum=0, exclusive=True, maximum=1e6) * 1e12,
        fp8_flops_per_s=spec.number("fp8_tflops", 0.0, minimum=0, maximum=1e6) * 1e12,
        fp4_flops_per_s=spec.number("fp4_tflops", 0.0, minimum=0, maximum=1e6) * 1e12,
        nvlink_domain=domain,
        # one host never holds more GPUs than its NVLink domain (0: not stated)
        host_gpus=spec.integer("host_gpus", 0, minimum=1, maximum=domain) if spec.has("host_gpus") else 0,
        hbm_bytes_per_s=spec.number("hbm_tb_s", minimum=limits.MIN_BANDWIDTH_GB_S / 1e3, maximum=1e4) * 1e12,
        nvlink_bytes_per_s=spec.bandwidth_gb_s("nvlink_gb_s") * GB,
        network_bytes_per_s=spec.bandwidth_gb_s("network_gb_s") * GB,
        tdp_w=spec.number("tdp_w", minimum=0, exclusive=True, maximum=1e5),
        usd_per_hour=spec.number("usd_per_hour", minimum=0, maximum=limits.MAX_USD_PER_GPU_HOUR),
        base=base,
        power_cap_fraction=spec.number("power_cap_fraction", 1.0, minimum=0, exclusive=True, maximum=1),
        product_label=_label_part(spec, "gpu_product", label_value_problem) if spec.has("gpu_product") else None,
        sources={str(k): str(v) for k, v in (spec.data.get("sources") or {}).items()},
    )


def _label_part(spec: Fields, key: str, rule) -> str:
    """A label key or value read from ``spec[key]``, held to Kubernetes' label syntax."""
    value = spec.string(key)
    problem = rule(value)
    if problem:
        raise spec.fail(key, problem, shown(value))
    return value


def load_gpu_catalog(path: str | Path) -> dict[str, GPU]:
    """Read a GPU catalog YAML (``gpus: {name: {...}}``) into GPU objects, validated."""
    top = Fields(load_yaml(path, what="GPU catalog"), path)
    gpus = top.mapping("gpus")
    specs = {str(name): gpus.mapping(name) for name in gpus.data}
    return {name: _gpu_from_fields(name, spec, specs) for name, spec in specs.items()}


@cache
def gpu_catalog() -> dict[str, GPU]:
    """The embedded catalog shipped inside the package."""
    with resources.as_file(resources.files("pdplan") / "catalog" / "gpus.yaml") as path:
        return load_gpu_catalog(path)


def get_gpu(name: str) -> GPU:
    """Look up an embedded GPU type by name; unknown names list the known ones."""
    catalog = gpu_catalog()
    if name not in catalog:
        raise PdplanError(f"unknown GPU {name!r} (known: {', '.join(sorted(catalog))})", field="gpu")
    return catalog[name]


@dataclass(frozen=True, kw_only=True)
class NodeType:
    """A kind of server: its GPU type, how many GPUs, its links, and how many exist."""

    name: str
    gpu: GPU
    gpus_per_node: int
    intra_node_bytes_per_s: float   #: GPU-to-GPU inside the node (NVLink), per GPU, one direction
    inter_node_bytes_per_s: float   #: GPU-to-GPU across nodes (RDMA NIC), per GPU, one direction
    count: int | None               #: nodes available; None means as many as needed (cloud)
    #: The node label (key, value) that selects these nodes in Kubernetes, as the cluster file names it
    node_label: tuple[str, str] | None = None
    #: GPU-to-GPU to nodes of another type (another GB200 rack, whose trays' inter-node path is their own rack's
    #: NVLink), per GPU, one direction; None: ``inter_node_bytes_per_s``, one network to every node
    scale_out_bytes_per_s: float | None = None

    def __post_init__(self):
        if self.gpus_per_node < 1:
            raise InternalError(f"node {self.name}: gpus_per_node must be >= 1")
        if self.count is not None and self.count < 0:
            raise InternalError(f"node {self.name}: count must be >= 0")

    @property
    def host_gpus(self) -> int:
        """GPUs one host of this node holds: the node's, or fewer where its GPUs' NVLink domain spans hosts and the
        cluster file groups several into one node (a GB200 NVL72 rack as one node of 72: hosts of 4)."""
        return min(self.gpus_per_node, self.gpu.gpus_per_host)

    def stage_nodes(self, shape: InstanceShape) -> int:
        """Nodes of this type one stage of ``shape`` spans (:meth:`pdplan.shape.InstanceShape.nodes_per_stage`,
        a TP group over whole nodes where its GPUs' NVLink domain joins them); 0 when it cannot go on them."""
        return shape.nodes_per_stage(self.gpus_per_node, self.gpu.fabric_gpus)

    @property
    def selector(self) -> tuple[str, str] | None:
        """The node label pods of this type are scheduled by: the cluster file's, else the GPU product
        label GPU Feature Discovery writes (:data:`GPU_PRODUCT_LABEL`), else None when unknown."""
        if self.node_label is not None:
            return self.node_label
        return None if self.gpu.product_label is None else (GPU_PRODUCT_LABEL, self.gpu.product_label)


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """The node inventory the planner may use, with GPU prices in force for this cluster."""

    nodes: tuple[NodeType, ...]
    source: str | None = None
    energy_usd_per_kwh: float = 0.0   #: metered electricity, when the GPU price excludes it
    pue: float = 1.0                  #: facility power usage effectiveness applied to GPU power

    def __post_init__(self):
        if self.energy_usd_per_kwh < 0 or self.pue < 1:
            raise InternalError("energy_usd_per_kwh must be >= 0 and pue >= 1")

    def node(self, name: str) -> NodeType:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def priced_gpu(self, name: str) -> GPU:
        """GPU type ``name`` at this cluster's hourly cost: its price here (a capped type is priced
        as its base hardware) plus metered energy at its power limit, ``tdp · PUE · $/kWh``."""
        gpu = get_gpu(name)
        # Nodes declared as this very type price it; else nodes of its base hardware; else the catalog.
        nodes = sorted(self.nodes_for(name), key=lambda n: n.gpu.name != name)
        price = nodes[0].gpu.usd_per_hour if nodes else gpu.usd_per_hour
        return replace(gpu, usd_per_hour=price + energy_usd_per_hour(gpu.tdp_w, self.pue, self.energy_usd_per_kwh))

    def instances_of(self, gpu_name: str, tp: int, pp: int, dp: int = 1) -> int | None:
        """Instances of TP × DP × PP GPUs of type ``gpu_name`` the nodes hold (each rank's TP within a
        node or its NVLink domain, a stage wider than a node on whole nodes of one type, PP stages on any
        nodes); None when node counts are unbounded."""
        nodes = self.nodes_for(gpu_name)
        if any(n.count is None for n in nodes):
            return None
        shape = InstanceShape(gpu=gpu_name, tp=tp, pp=pp, dp=dp)
        stages = 0
        for n in nodes:
            spans = n.stage_nodes(shape)
            if spans:
                stages += (n.gpus_per_node // shape.node_slot(n.gpus_per_node)) * n.count // spans
        return stages // pp

    def gpus_of(self, gpu_name: str) -> int | None:
        """GPUs of the hardware that runs ``gpu_name``; None when node counts are unbounded."""
        nodes = self.nodes_for(gpu_name)
        if any(n.count is None for n in nodes):
            return None
        return sum(n.gpus_per_node * n.count for n in nodes)

    def nodes_for(self, gpu_name: str) -> tuple[NodeType, ...]:
        """Node types whose hardware can run GPU type ``gpu_name`` (a capped type runs on its base,
        and on nodes declared with that capped type)."""
        physical = get_gpu(gpu_name).physical
        return tuple(n for n in self.nodes if n.gpu.name in (gpu_name, physical))

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU type names present in the inventory, sorted."""
        return tuple(sorted({n.gpu.name for n in self.nodes}))

    def hosts_notice(self) -> str | None:
        """What a user should know when a node type holds more GPUs than one host of its GPU (a GB200 NVL72 rack
        written as one node of 72): the plan is made, and no export can start it."""
        for n in self.nodes:
            why = beyond_a_host(n.gpus_per_node, n.gpu)
            if why is not None:
                return f"node type {n.name} {why}; the plan is made, but pdplan export refuses such a node"
        return None

    def racks_notice(self) -> str | None:
        """What a user should know when a node type of trays holds more GPUs than one NVLink fabric joins (two GB200
        NVL72 racks written as one type of 36 trays): an instance over several of its nodes (a TP group over trays,
        a wide instance's NVLink all-to-all) is planned as if NVLink joined them all."""
        for n in self.nodes:
            fabric = n.gpu.fabric_gpus
            if n.count is not None and n.gpus_per_node < fabric < n.count * n.gpus_per_node:
                return (f"node type {n.name} holds {n.count} nodes of {n.gpus_per_node} {n.gpu.name} GPUs, more than "
                        f"one NVLink domain joins ({fabric}): an instance over several of its nodes is planned as if "
                        "NVLink joined them all; write each rack as its own node type, as examples/cluster_gb200.yaml "
                        "writes one")
        return None


def beyond_a_host(gpus: int, gpu: GPU) -> str | None:
    """Why a node of ``gpus`` GPUs of ``gpu`` cannot be started as one (a GB200 NVL72 rack written as one node of
    72): the engines start one process group per host, and one host holds fewer; None when one host holds it."""
    if gpus <= gpu.gpus_per_host:
        return None
    return (f"holds {gpus} {gpu.name} GPUs, but one host of them holds {gpu.gpus_per_host} (a compute tray of its "
            "NVLink rack) and the engines start one process group per host: describe the rack as its hosts "
            f"(gpus_per_node: {gpu.gpus_per_host}, as examples/cluster_gb200.yaml does)")


def energy_usd_per_hour(watts: float, pue: float, usd_per_kwh: float) -> float:
    """Hourly electricity cost of a device drawing ``watts`` in a facility of the given PUE."""
    return watts / 1000 * pue * usd_per_kwh


#: The largest GPU-to-GPU (NVLink) domain sold today is 72 GPUs (GB200 NVL72).
MAX_GPUS_PER_NODE = 72

_NODE_FIELDS = {"name", "gpu", "gpus_per_node", "intra_node_gb_s", "inter_node_gb_s", "scale_out_gb_s", "count",
                "node_label"}


def load_cluster(path: str | Path) -> Cluster:
    """Read and validate a cluster file (see ``examples/cluster.yaml`` for the format)."""
    top = Fields(load_yaml(path, what="cluster file"), path)
    top.reject_unknown({"nodes", "prices", "energy_usd_per_kwh", "pue"})
    catalog = gpu_catalog()
    prices = {}
    if top.has("prices"):
        price_fields = top.mapping("prices")
        for gpu in price_fields.data:
            if gpu not in catalog:
                raise price_fields.fail(str(gpu), f"is not a known GPU (known: {', '.join(sorted(catalog))})",
                                        show_value=False)
            prices[gpu] = price_fields.number(gpu, minimum=0, maximum=limits.MAX_USD_PER_GPU_HOUR)
    nodes, names = [], set()
    for spec in top.items("nodes"):
        spec.reject_unknown(_NODE_FIELDS)
        name = spec.string("name")
        problem = node_type_problem(name)
        if problem:
            raise spec.fail("name", problem, shown(name))
        if name in names:
            raise spec.fail("name", "must be unique across nodes", name)
        names.add(name)
        gpu_name = spec.string("gpu", choices=sorted(catalog))
        gpu = catalog[gpu_name]
        if gpu_name in prices:
            gpu = replace(gpu, usd_per_hour=prices[gpu_name])
        per_node = spec.integer("gpus_per_node", minimum=1, maximum=MAX_GPUS_PER_NODE)
        if per_node > gpu.nvlink_domain:
            # TP groups live inside a node and talk over NVLink at intra_node_gb_s, so a node is at
            # most one NVLink domain (a GB200 NVL72 rack may be one node of 72 for planning; its
            # exports need its hosts, the compute trays, as nodes: examples/cluster_gb200.yaml).
            raise spec.fail("gpus_per_node", f"must be at most {gpu.nvlink_domain}, the GPUs one {gpu_name} "
                            "NVLink domain holds (a node is one NVLink domain)", per_node)
        count = spec.data.get("count", "unbounded")
        if count != "unbounded":
            count = spec.integer("count", minimum=0, maximum=limits.MAX_NODES)
        nodes.append(NodeType(
            name=name,
            gpu=gpu,
            gpus_per_node=per_node,
            intra_node_bytes_per_s=spec.bandwidth_gb_s("intra_node_gb_s") * GB,
            inter_node_bytes_per_s=spec.bandwidth_gb_s("inter_node_gb_s") * GB,
            count=None if count == "unbounded" else count,
            node_label=_node_label(spec) if spec.has("node_label") else None,
            scale_out_bytes_per_s=spec.bandwidth_gb_s("scale_out_gb_s") * GB if spec.has("scale_out_gb_s") else None,
        ))
    return Cluster(nodes=tuple(nodes), source=str(path),
                   energy_usd_per_kwh=top.number("energy_usd_per_kwh", 0.0, minimum=0,
                                                 maximum=limits.MAX_ENERGY_USD_PER_KWH),
                   pue=top.number("pue", 1.0, minimum=1, maximum=limits.MAX_PUE))


def _node_label(spec: Fields) -> tuple[str, str]:
    """``node_label: {key: ..., value: ...}``: the Kubernetes node label of a node type."""
    label = spec.mapping("node_label")
    label.reject_unknown({"key", "value"})
    return _label_part(label, "key", label_key_problem), _label_part(label, "value", label_value_problem)


def default_cluster_path() -> Path:
    """The example cluster shipped with the package (also at examples/cluster.yaml)."""
    return Path(str(resources.files("pdplan") / "data" / "cluster.yaml"))
