"""What a bare-metal launch script needs on its machine before it starts, checked by the script.

A generated script (``vllm/*.sh``, ``sglang/*.sh``) first checks that the engine, the KV
connector's package of a P/D instance, Ray for a vLLM instance spanning nodes, and the router
are there, and exits 1 with one line naming what is missing and how to install it, instead of
starting an engine that fails later (a P/D instance without its connector's package starts
loading weights and only then raises). Each module below is the one the engine itself imports,
read in its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdplan.manifest.export import shell

#: Exit status of a script whose prerequisite is missing.
MISSING = 1


@dataclass(frozen=True)
class Prerequisite:
    """A program on PATH or a Python module the script's ``python`` imports, who needs it, and
    the package that provides it."""

    needed_by: str        #: who needs it, e.g. "vLLM NixlConnector"
    package: str          #: the PyPI package that provides it ("" for one built from source)
    program: str = ""     #: a program that must be on PATH
    module: str = ""      #: a module the script's Python must import
    install: str = ""     #: how to install one that no PyPI package provides

    def check(self, python: str) -> list[str]:
        """The command that succeeds when the prerequisite is there; ``python`` imports the module."""
        if self.program:
            return ["command", "-v", self.program]
        return [python, "-c", f"import {self.module}"]

    def message(self, script: str) -> str:
        what = f"the program {self.program}" if self.program else f"the Python module {self.module}"
        how = self.install or f"pip install {self.package}"
        return f"pdplan: {script} not started: {self.needed_by} needs {what} ({how})"


VLLM = (Prerequisite(needed_by="vLLM", package="vllm", program="vllm"),
        Prerequisite(needed_by="vLLM", package="vllm", module="vllm"))
SGLANG = (Prerequisite(needed_by="SGLang", package="sglang", module="sglang"),)

#: The module each engine's KV connector imports, by engine and manifest connector.
#: vLLM 0.33.0 (vllm-project/vllm, the PyPI wheel's source):
#:  - NixlConnector: vllm/distributed/nixl_utils.py ``_get_nixl_module_name`` loads ``nixl._api``
#:    (``nixl_rocm._api`` on ROCm; pdplan's catalog has NVIDIA GPUs only), and
#:    kv_connector/v1/nixl/base_worker.py ``NixlBaseConnectorWorker.__init__`` raises
#:    ``RuntimeError("NIXL is not available")`` without it;
#:  - MooncakeConnector: kv_connector/v1/mooncake/mooncake_connector.py ``from mooncake.engine import
#:    TransferEngine`` (PyPI mooncake-transfer-engine);
#:  - LMCacheConnectorV1: kv_connector/v1/lmcache_integration/vllm_v1_adapter.py ``from lmcache import utils``.
#: SGLang 0.5.23 (sgl-project/sglang, the PyPI wheel's source):
#:  - nixl: python/sglang/srt/disaggregation/nixl/conn.py ``from nixl._api import nixl_agent, ...``
#:    (raises ImportError "Please install NIXL ..." without it);
#:  - mooncake: python/sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py
#:    ``from mooncake.engine import TransferEngine``.
CONNECTOR_MODULES = {
    ("vllm", "nixl"): Prerequisite(needed_by="vLLM NixlConnector", package="nixl", module="nixl._api"),
    ("vllm", "mooncake"): Prerequisite(needed_by="vLLM MooncakeConnector", package="mooncake-transfer-engine",
                                       module="mooncake.engine"),
    ("vllm", "lmcache"): Prerequisite(needed_by="vLLM LMCacheConnectorV1", package="lmcache", module="lmcache"),
    ("sglang", "nixl"): Prerequisite(needed_by="the SGLang NIXL transfer backend", package="nixl",
                                     module="nixl._api"),
    ("sglang", "mooncake"): Prerequisite(needed_by="the SGLang Mooncake transfer backend",
                                         package="mooncake-transfer-engine", module="mooncake.engine"),
}

#: A vLLM instance spanning nodes runs its stages as Ray actors (``--distributed-executor-backend
#: ray``): the script starts or joins the cluster with the ``ray`` program and vLLM imports ``ray``
#: (vllm/v1/executor/ray_utils.py ``initialize_ray_cluster``).
RAY = (Prerequisite(needed_by="a vLLM instance spanning nodes", package="ray", program="ray"),
       Prerequisite(needed_by="a vLLM instance spanning nodes", package="ray", module="ray"))

#: The routers the router scripts run: the ``vllm-router`` program of PyPI vllm-router, and SGLang's
#: ``python -m sglang_router.launch_router`` of PyPI sglang-router.
ROUTERS = {"vllm": (Prerequisite(needed_by="the vLLM router", package="vllm-router", program="vllm-router"),),
           "sglang": (Prerequisite(needed_by="the SGLang router", package="sglang-router",
                                   module="sglang_router.launch_router"),)}


#: DeepEP, which each engine imports as ``deep_ep`` when its export starts DeepEP's all-to-all, built from source (no
#: PyPI package): SGLang 0.5.23 layers/moe/token_dispatcher/deepep.py ``from deep_ep import Buffer, Config`` (its
#: dispatcher raises "DeepEP is not available. Please install DeepEP package from
#: https://github.com/deepseek-ai/deepep" without it); vLLM 0.33.0 distributed/device_communicators/all2all.py
#: asserts ``has_deep_ep()`` (vllm/utils/import_utils.py, the module ``deep_ep``) and points to its install guide.
DEEPEP = {"sglang": Prerequisite(needed_by="the SGLang DeepEP all-to-all", package="", module="deep_ep",
                                 install="build it from https://github.com/deepseek-ai/DeepEP"),
          "vllm": Prerequisite(needed_by="the vLLM DeepEP all-to-all", package="", module="deep_ep",
                               install="see vLLM's tools/ep_kernels/README.md")}


def instance(engine: str, connector: str | None, *, spans_nodes: bool,
             deepep: bool = False) -> tuple[Prerequisite, ...]:
    """What an instance script of ``engine`` needs: the engine, its connector's module for a P/D
    instance (``connector`` None for a colocated one), for vLLM whose pipeline stages span nodes
    (``spans_nodes``) Ray (an instance whose DP ranks span nodes starts without it), and DeepEP where the
    export starts its all-to-all (``deepep``)."""
    needs = VLLM if engine == "vllm" else SGLANG
    if connector is not None and (engine, connector) in CONNECTOR_MODULES:
        needs += (CONNECTOR_MODULES[(engine, connector)],)
    if engine == "vllm" and spans_nodes:
        needs += RAY
    if deepep:
        needs += (DEEPEP[engine],)
    return needs


def router(engine: str) -> tuple[Prerequisite, ...]:
    return ROUTERS[engine]


def lines(needs: tuple[Prerequisite, ...], script: str, python: str) -> list[str]:
    """Script lines that check each prerequisite in turn and stop at the first one missing;
    ``python`` is the interpreter the script runs its Python with (``python3`` for vLLM, whose
    image has no ``python``; ``python`` for SGLang, whose scripts start it with ``python -m``)."""
    return [shell.comment("Prerequisites: stop here, with what to install, when one is missing.")] + [
        shell.require(need.check(python), need.message(script), MISSING) for need in needs]
