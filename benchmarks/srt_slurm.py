"""The srt-slurm recipes that started InferenceMAX's disaggregated runs: each deployment's prefill workers and
what its decode workers run at once, as its recipe starts them, read in NVIDIA/srt-slurm (``inferencemax_recipes.py``
matches a row to its recipe, ``silicon_rows.py`` replays it).

A recipe names its deployment (engine, GPU, precision, lengths, prefill and decode workers, whether decode runs
attention DP), the concurrencies its benchmark ran, the prefill worker (its parallel coordinates and what one
rank batches) and how many requests one decode rank runs at once. The TensorRT-LLM recipes' file names spell the
deployment ``c<C>_ctx<P>_gen<D>_<tep8|dep8>_batch<B>``; B is the decode worker's ``max_batch_size`` in all but
two (B200 FP8 8k/1k at 32 clients: its file says 32, its decode config 8; B200 FP4 8k/1k ``ctx1_gen5_tep8_batch8``:
its decode config 16), where the config is read.
"""

from __future__ import annotations

from dataclasses import dataclass

#: NVIDIA/srt-slurm, whose recipes InferenceMAX's disaggregated runs start: 5063eb43 (2026-03-03) merged the
#: sa-submission-q1-2026 branch its February and March sweeps ran. What pdplan reads in a recipe (parallel sizes,
#: batch budgets, worker counts, concurrencies) reads the same there as in the branch's GB200 and H200 SGLang
#: recipes of 2026-02-05, before the sweeps of 2026-02-07 to 02-11 (only container names and model paths
#: differ), and in its TensorRT-LLM recipes of 75f6e32a (2026-01-27: H200's, B200's and GB200 FP4's, but for seven
#: B200 FP8 files whose batch sizes the merge changed); its SGLang B200 recipes first reach the main branch in the
#: merge. SGLang's B200 FP8 recipes were rewritten on 2026-03-12 (9fe6c373 to 603fb034), before the
#: sweep of 2026-03-18 that ran them.
SRT_SLURM, SRT_SLURM_MARCH = "5063eb43", "603fb034"
#: the sweeps a recipe of 5063eb43 stands for: from the history's first commit (75f6e32a) until the branch was
#: merged again (4a22a181), after which recipes may read otherwise; SGLang's B200 FP8 ones until their rewrite
SWEEPS, B200_FP8_REWRITE = ("2026-01-27", "2026-03-25"), "2026-03-12"
#: InferenceMAX's GB200 SGLang sweeps from its configs of 2025-12-18 (c040b5cf2) until it ran srt-slurm's recipes
#: (2767db504, 2026-02-07) started each deployment by a script of ai-dynamo/dynamo b7107d00
#: (``examples/backends/sglang/slurm_jobs/scripts/<gpu>/disagg/<mode>.sh``), always at ``req_rate`` inf; the
#: parallel sizes its config file states for them "do nothing because they are hardcoded" there, and the collection's
#: export states those placeholders (attention DP over every GPU, EP 1). srt-slurm's recipes of d83c9ee0
#: (2025-12-20, under ``recipies/``, renamed unchanged in 75f6e32a) transcribe the scripts (the 1k/1k low-latency
#: script, the one stored version read, passes what its recipe does: TP 4, DP 1, EP 1, the same batch limits), and are
#: read here for them, the decode's coordinates with the prefill's.
DYNAMO_SCRIPTS, DECEMBER = "d83c9ee0", ("2025-12-18", "2026-02-07")
#: InferenceMAX's GB200 FP4 TensorRT-LLM sweeps from its multinode configs (93e1b3ca1, 2025-12-05) until it ran
#: srt-slurm's recipes (4e9a376bf, 2026-01-30) ran ai-dynamo's ``performance_sweeps`` of release/0.5.1-rc0.20251105,
#: whose ``benchmark_disagg.slurm`` writes each worker's config (``gen_yaml.py``) from the batch sizes, token budgets
#: and attention DP the config states per deployment (``PREFILL_MAX_BATCH_SIZE``, ``PREFILL_MAX_NUM_TOKENS``,
#: ``DECODE_MAX_BATCH_SIZE``, ``dp-attn``), the context workers at TP 4; its ``bench.sh`` runs the config's
#: concurrency times the decode workers as clients, as the export states them, each sending 8 requests
#: (``multi_round``, ``--random-range-ratio 0.8``). Read in ``.github/configs/nvidia-master.yaml`` there.
DYNAMO_TRTLLM, DYNAMO_TRTLLM_SWEEPS = "93e1b3ca1", ("2025-12-05", "2026-01-30")
#: SGLang's ``--max-prefill-tokens`` when a recipe passes none (``ServerArgs.max_prefill_tokens``)
SGLANG_MAX_PREFILL_TOKENS = 16384


@dataclass(frozen=True)
class DisaggRecipe:
    """One disaggregated InferenceMAX deployment as its srt-slurm recipe starts it (module docstring): the
    deployment and the concurrencies its benchmark ran; the prefill worker's coordinates (attention TP per DP
    rank, DP ranks, EP) and what one rank batches, at most ``batch_tokens`` prompt tokens and ``batch_prompts``
    prompts; and the requests one decode rank runs at once, ``decode_batch`` (None: as many as its KV holds)."""

    recipe: str                         #: where it is read: a srt-slurm path, or the config that set it, @ commit
    sweeps: tuple[str, str]             #: the UTC dates of the sweeps that ran it: from, until (exclusive)
    deployment: tuple                   #: (engine, GPU, precision, ISL, OSL, prefill workers, decode workers,
    #: decode with attention DP)
    concurrencies: tuple[int, ...]
    tp: int
    dp: int
    ep: int
    batch_tokens: int
    batch_prompts: int
    decode_batch: int | None
    #: the benchmark's ``req_rate`` where it is finite: sa-bench then sends each request when a Poisson process
    #: at that rate schedules it or when one of the concurrency's slots frees, if later (None: ``inf``, every slot
    #: refilled at once)
    request_rate: float | None = None
    #: the decode worker's coordinates (attention TP per DP rank, DP ranks, EP) where the export's are not what ran
    #: (:data:`DECEMBER`); None: the row's
    decode: tuple[int, int, int] | None = None
    #: the ``moe_config.backend`` both phases run, where the replay times it by that kernel (TensorRT-LLM's DeepSeek
    #: FP8 on B200: TRTLLM or DEEPGEMM); None: the fastest measured
    moe_backend: str | None = None
    #: the decode's own ``moe_config.backend`` where it is not the prefill's and the replay times it by that kernel
    #: (TensorRT-LLM's FP4 DEP decodes: CUTLASS, beside TRTLLM contexts); None: as ``moe_backend``
    decode_moe_backend: str | None = None
    #: the requests its benchmark sends per client: InferenceMAX's ``--num-prompts`` of ten times the concurrency,
    #: or ai-dynamo's performance sweeps' ``multi_round`` of 8 (:data:`DYNAMO_TRTLLM`)
    prompts_per_client: int = 10

    @property
    def coordinates(self) -> dict:
        return {"tp": self.tp, "dp": self.dp, "ep": self.ep}

    @property
    def decode_coordinates(self) -> dict | None:
        return None if self.decode is None else dict(zip(("tp", "dp", "ep"), self.decode))


def _trtllm(recipe: str, gpu: str, isl: int, workers: tuple[int, int], wide_decode: bool,
            concurrencies: tuple[int, ...], *, decode_batch: int, attention_dp: bool, ep: int, max_num_tokens: int,
            max_batch_size: int, dtype: str = "fp8", osl: int = 1024, tensor_parallel: int = 8,
            moe_backend: str | None = None, decode_moe_backend: str | None = None, folder: str = "recipes/trtllm",
            commit: str = SRT_SLURM, sweeps: tuple[str, str] = SWEEPS, prompts_per_client: int = 10) -> DisaggRecipe:
    """A TensorRT-LLM prefill worker of ``tensor_parallel_size`` ``tensor_parallel`` (8 on HGX, a GB200 compute
    tray's 4): with ``enable_attention_dp`` as many ranks of attention TP 1; ``max_num_tokens`` and
    ``max_batch_size`` are each rank's, and ``enable_chunked_prefill`` is off in every one, so a context runs whole.
    The decode worker's ``max_batch_size``, ``decode_batch``, is also each rank's: the one TP group's, or each
    attention-DP rank's (TensorRT-LLM schedules every DP rank's batch apart)."""
    tp, dp = (1, tensor_parallel) if attention_dp else (tensor_parallel, 1)
    return DisaggRecipe(recipe=f"{folder}/{recipe} @ {commit}", sweeps=sweeps,
                        deployment=("trtllm", gpu, dtype, isl, osl, *workers, wide_decode),
                        concurrencies=concurrencies, tp=tp, dp=dp, ep=ep, batch_tokens=max_num_tokens,
                        batch_prompts=max_batch_size, decode_batch=decode_batch, moe_backend=moe_backend,
                        decode_moe_backend=decode_moe_backend, prompts_per_client=prompts_per_client)


def _sglang(recipe: str, gpu: str, dtype: str, isl: int, workers: tuple[int, int], wide_decode: bool,
            concurrencies: tuple[int, ...], *, tp: int, dp: int = 1, ep: int = 1, chunk: int,
            max_prefill: int = SGLANG_MAX_PREFILL_TOKENS, running: int, decode_running: int | None,
            decode_dp: int = 1, folder: str = "recipes", commit: str = SRT_SLURM, sweeps: tuple[str, str] = SWEEPS,
            request_rate: float | None = None, decode_tp: int | None = None, decode_ep: int = 1) -> DisaggRecipe:
    """An SGLang prefill server of ``--tp`` ``tp`` and ``--dp`` ``dp`` (with ``--enable-dp-attention``):
    each DP rank's prefill batch holds whole prompts up to ``--chunked-prefill-size`` over DP and up to
    ``--max-prefill-tokens`` (not divided), and ``--max-running-requests`` over DP prompts (SGLang's
    ``_handle_data_parallelism``, ``PrefillAdder``, ``pool_configurator``). Its decode server of ``--dp``
    ``decode_dp`` runs the decode's ``--max-running-requests`` over DP requests on each rank
    (``ModelRunner.max_running_requests``; the disaggregated decode's ``get_new_prebuilt_batch`` holds the rest
    waiting); None where the recipe passes none, when SGLang takes half its KV tokens, which the KV binds first.
    ``decode_tp`` (its ``--tp``, with ``decode_dp`` and ``decode_ep``) states the decode's coordinates where the
    export's are not what ran (:data:`DECEMBER`)."""
    decode = None if decode_tp is None else (decode_tp // decode_dp, decode_dp, decode_ep)
    return DisaggRecipe(recipe=f"{folder}/{recipe} @ {commit}", sweeps=sweeps,
                        deployment=("sglang", gpu, dtype, isl, 1024, *workers, wide_decode),
                        concurrencies=concurrencies, tp=tp // dp, dp=dp, ep=ep,
                        batch_tokens=min(chunk // dp, max_prefill), batch_prompts=max(1, running // dp),
                        decode_batch=None if decode_running is None else max(1, decode_running // decode_dp),
                        request_rate=request_rate, decode=decode)


H200, B200, GB200, GB300 = "h200-141gb", "b200-180gb", "gb200-185gb", "gb300-288gb"
#: the prefill settings every TensorRT-LLM recipe of one folder shares
_H200_1K = {"attention_dp": True, "ep": 8, "max_num_tokens": 8192, "max_batch_size": 8}
_H200_8K = {"attention_dp": False, "ep": 8, "max_num_tokens": 16640, "max_batch_size": 2}
_B200_8K = {"attention_dp": True, "ep": 1, "max_num_tokens": 8320, "max_batch_size": 1, "moe_backend": "TRTLLM"}
_B200_1K = {"attention_dp": True, "ep": 8, "max_num_tokens": 16384, "max_batch_size": 16, "moe_backend": "DEEPGEMM"}
#: GB200 FP4's DEP 4 context workers (one compute tray), at 1k- and at 8k-token prompts
_GB200_1K = {"dtype": "fp4", "tensor_parallel": 4, "attention_dp": True, "ep": 4, "max_num_tokens": 16384,
             "max_batch_size": 16}
_GB200_8K = {**_GB200_1K, "max_num_tokens": 16640, "max_batch_size": 2}
#: B200 FP4's DEP 4 context workers (half an HGX node), at 1k- and at 8k-token prompts
_B200_FP4_1K = {"dtype": "fp4", "tensor_parallel": 4, "attention_dp": True, "ep": 4, "max_num_tokens": 10240,
                "max_batch_size": 8}
_B200_FP4_8K = {**_B200_FP4_1K, "max_num_tokens": 16896, "max_batch_size": 2}
#: GB200 FP4's context workers of InferenceMAX's December TensorRT-LLM configs (:data:`DYNAMO_TRTLLM`)
_GB200_DECEMBER = {"dtype": "fp4", "tensor_parallel": 4, "ep": 4, "folder": "InferenceX nvidia-master.yaml",
                   "commit": DYNAMO_TRTLLM, "sweeps": DYNAMO_TRTLLM_SWEEPS, "prompts_per_client": 8}
_B200_FP8_FEBRUARY = {"chunk": 32768, "max_prefill": 32768, "sweeps": (SWEEPS[0], B200_FP8_REWRITE)}
_B200_FP8_MARCH = {"tp": 8, "dp": 8, "chunk": 65536, "max_prefill": 8192, "running": 8, "commit": SRT_SLURM_MARCH,
                   "sweeps": (B200_FP8_REWRITE, SWEEPS[1])}
#: December's GB200 deployments (:data:`DECEMBER`): matched as the export states them (decode attention DP, its
#: placeholder, on every one), at ``req_rate`` inf whatever the recipe's benchmark says
_DECEMBER = {"folder": "recipies", "commit": DYNAMO_SCRIPTS, "sweeps": DECEMBER}
#: The disaggregated deployments of silicon_sample.csv's InferenceMAX rows, read in their srt-slurm recipes
#: (module docstring), or in the config that set them (:data:`DYNAMO_TRTLLM`). A TensorRT-LLM recipe names its
#: deployment ``c<C>_ctx<P>_gen<D>_<tep8|dep8>``.
DISAGG_RECIPES = (
    _trtllm("h200/1k1k/stp/c1_ctx1_gen9_tep8_batch1_eplb0_mtp0.yaml", H200, 1024, (1, 9), False, (11,),
            decode_batch=1, **_H200_1K),
    _trtllm("h200/1k1k/stp/c{4,8,16,32,64}_ctx1_gen9_tep8_batch256_eplb0_mtp0.yaml", H200, 1024, (1, 9), False,
            (36, 72, 144, 288, 576), decode_batch=256, **_H200_1K),
    _trtllm("h200/1k1k/stp/c128_ctx1_gen9_dep8_batch512_eplb0_mtp0.yaml", H200, 1024, (1, 9), True, (1152,),
            decode_batch=512, **_H200_1K),
    _trtllm("h200/1k1k/stp/c256_ctx1_gen6_dep8_batch512_eplb0_mtp0.yaml", H200, 1024, (1, 6), True, (1536,),
            decode_batch=512, **_H200_1K),
    _trtllm("h200/1k1k/stp/c512_ctx2_gen7_dep8_batch512_eplb0_mtp0.yaml", H200, 1024, (2, 7), True, (3584,),
            decode_batch=512, **_H200_1K),
    _trtllm("h200/8k1k/stp/c1_ctx1_gen7_tep8_batch1_eplb0_mtp0.yaml", H200, 8192, (1, 7), False, (9,),
            decode_batch=1, **_H200_8K),
    _trtllm("h200/8k1k/stp/c4_ctx1_gen7_tep8_batch32_eplb0_mtp0.yaml", H200, 8192, (1, 7), False, (28,),
            decode_batch=32, **_H200_8K),
    _trtllm("h200/8k1k/stp/c8_ctx1_gen6_tep8_batch16_eplb0_mtp0.yaml", H200, 8192, (1, 6), False, (48,),
            decode_batch=16, **_H200_8K),
    _trtllm("h200/8k1k/stp/c16_ctx1_gen3_tep8_batch32_eplb0_mtp0.yaml", H200, 8192, (1, 3), False, (48,),
            decode_batch=32, **_H200_8K),
    _trtllm("h200/8k1k/stp/c32_ctx2_gen5_tep8_batch128_eplb0_mtp0.yaml", H200, 8192, (2, 5), False, (160,),
            decode_batch=128, **_H200_8K),
    _trtllm("h200/8k1k/stp/c128_ctx1_gen1_dep8_batch256_eplb0_mtp0.yaml", H200, 8192, (1, 1), True, (128,),
            decode_batch=256, **_H200_8K),
    _trtllm("h200/8k1k/stp/c64_ctx2_gen3_dep8_batch128_eplb0_mtp0.yaml", H200, 8192, (2, 3), True, (192,),
            decode_batch=128, **_H200_8K),
    _trtllm("h200/8k1k/stp/c512_ctx3_gen1_dep8_batch512_eplb0_mtp0.yaml", H200, 8192, (3, 1), True, (512,),
            decode_batch=512, **_H200_8K),
    _trtllm("h200/8k1k/stp/c256_ctx5_gen3_dep8_batch256_eplb0_mtp0.yaml", H200, 8192, (5, 3), True, (768,),
            decode_batch=256, **_H200_8K),
    _trtllm("b200-fp8/8k1k/stp/ctx1_gen4_tp8_batch32_eplb0_mtp0_32.yaml", B200, 8192, (1, 4), False, (32,),
            decode_batch=8, **_B200_8K),
    _trtllm("b200-fp8/8k1k/stp/ctx1_gen4_tp8_batch32_eplb0_mtp0_128.yaml", B200, 8192, (1, 4), False, (128,),
            decode_batch=32, **_B200_8K),
    _trtllm("b200-fp8/8k1k/stp/ctx1_gen6_tp8_batch16_eplb0_mtp0_96.yaml", B200, 8192, (1, 6), False, (96,),
            decode_batch=16, **_B200_8K),
    _trtllm("b200-fp8/8k1k/stp/ctx1_gen1_tp8_batch1_eplb0_mtp0_1.yaml", B200, 8192, (1, 1), False, (1,),
            decode_batch=1, attention_dp=False, ep=1, max_num_tokens=8320, max_batch_size=64, moe_backend="TRTLLM"),
    *(_trtllm(f"b200-fp8/8k1k/stp/ctx{prefills}_gen{decodes}_dep8_batch{batch}_eplb0_mtp0_{clients}.yaml", B200, 8192,
              (prefills, decodes), True, (clients,), decode_batch=batch, **_B200_8K)
      for prefills, decodes, batch, clients in ((1, 1, 128, 128), (1, 1, 256, 256), (1, 2, 64, 128), (2, 1, 640, 640))),
    *(_trtllm(f"b200-fp8/1k1k/stp/ctx1_gen{decodes}_dep8_batch{batch}_eplb0_mtp0_{clients}.yaml", B200, 1024,
              (1, decodes), True, (clients,), decode_batch=batch, **_B200_1K)
      for decodes, batch, clients in ((1, 512, 4096), (5, 48, 1920))),
    _trtllm("b200-fp4/1k1k/stp/ctx1_gen1_dep8_batch512_eplb0_mtp0.yaml", B200, 1024, (1, 1), True, (4096,),
            decode_batch=512, decode_moe_backend="CUTLASS", **_B200_FP4_1K),
    _trtllm("b200-fp4/1k1k/stp/ctx1_gen2_dep8_batch128_eplb0_mtp0.yaml", B200, 1024, (1, 2), True, (2192,),
            decode_batch=128, decode_moe_backend="CUTLASS", **_B200_FP4_1K),
    _trtllm("b200-fp4/1k1k/stp/ctx1_gen5_tep8_batch32_eplb0_mtp0.yaml", B200, 1024, (1, 5), False,
            (10, 15, 25, 45, 90, 180), decode_batch=32, **_B200_FP4_1K),
    _trtllm("b200-fp4/1k1k/stp/ctx1_gen6_tep8_batch64_eplb0_mtp0.yaml", B200, 1024, (1, 6), False, (450,),
            decode_batch=64, **_B200_FP4_1K),
    _trtllm("b200-fp4/8k1k/stp/ctx1_gen5_tep8_batch8_eplb0_mtp0.yaml", B200, 8192, (1, 5), False,
            (10, 15, 25, 50, 100), decode_batch=16, **_B200_FP4_8K),
    _trtllm("b200-fp4/8k1k/stp/ctx2_gen5_tep8_batch64_eplb0_mtp0.yaml", B200, 8192, (2, 5), False, (370,),
            decode_batch=64, **_B200_FP4_8K),
    _trtllm("dsr1-fp4-gb200-dynamo-trt 1k/1k TEP 8", GB200, 1024, (1, 4), False, (4, 8, 16, 32, 64, 128, 256, 564),
            decode_batch=128, attention_dp=False, max_num_tokens=4608, max_batch_size=4, **_GB200_DECEMBER),
    _trtllm("dsr1-fp4-gb200-dynamo-trt 8k/1k TEP 8", GB200, 8192, (1, 3), False, (3, 6, 12, 24, 48, 102),
            decode_batch=32, attention_dp=False, max_num_tokens=8448, max_batch_size=1, **_GB200_DECEMBER),
    _trtllm("dsr1-fp4-gb200-dynamo-trt 8k/1k DEP 32", GB200, 8192, (4, 1), True, (256, 538), decode_batch=16,
            attention_dp=True, max_num_tokens=8448, max_batch_size=1, **_GB200_DECEMBER),
    _trtllm("gb200-fp4/1k1k/stp/ctx1_gen2_dep4_batch768_eplb0_mtp0.yaml", GB200, 1024, (1, 2), True, (6144,),
            decode_batch=768, decode_moe_backend="CUTLASS", **_GB200_1K),
    _trtllm("gb200-fp4/1k1k/stp/ctx1_gen4_tep8_batch32_eplb0_mtp0.yaml", GB200, 1024, (1, 4), False,
            (12, 24, 48, 96, 192), decode_batch=32, **_GB200_1K),
    _trtllm("gb200-fp4/8k1k/stp/ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml", GB200, 8192, (1, 4), False, (12, 44, 76),
            decode_batch=16, **_GB200_8K),
    _trtllm("gb200-fp4/8k1k/stp/ctx10_gen1_dep16_batch256_eplb256_mtp0.yaml", GB200, 8192, (10, 1), True, (4096,),
            decode_batch=256, **_GB200_8K),
    *(_trtllm(f"gb200-fp4/1k8k/stp/ctx1_gen1_dep32_batch{batch}_eplb{slots}_mtp0.yaml", GB200, 1024, (1, 1), True,
              (clients,), decode_batch=batch, osl=8192, **_GB200_1K)
      for clients, batch, slots in ((2048, 64, 0), (4096, 128, 288), (8192, 256, 288))),
    *(_trtllm(f"gb200-fp4/1k8k/stp/ctx1_gen15_tep4_batch{batch}_eplb0_mtp0.yaml", GB200, 1024, (1, 15), False,
              (clients,), decode_batch=batch, osl=8192, **_GB200_1K)
      for clients, batch in ((60, 4), (135, 8))),
    _sglang("gb200-fp4/1k1k/low-latency.yaml", GB200, "fp4", 1024, (1, 2), False, (4, 8, 32), tp=4, chunk=8192,
            running=512, decode_running=None),
    _sglang("gb200-fp8/1k1k/low-latency.yaml", GB200, "fp8", 1024, (1, 1), False, (4, 8), tp=4, chunk=8192,
            running=512, decode_running=128),
    _sglang("gb200-fp4/8k1k/low-latency.yaml", GB200, "fp4", 8192, (1, 4), False, (4, 8), tp=4, chunk=24576,
            running=512, decode_running=None, request_rate=300.0),
    _sglang("gb200-fp8/8k1k/low-latency.yaml", GB200, "fp8", 8192, (1, 1), False, (4, 8, 16), tp=8, chunk=24576,
            running=512, decode_running=512),
    _sglang("gb200-fp8/1k1k/ultra-tpt.yaml", GB200, "fp8", 1024, (1, 1), True, (4096,), tp=8, dp=8, ep=8,
            chunk=131072, running=8192, decode_running=5120, decode_dp=8),
    _sglang("gb200-fp8/1k1k/max-tpt.yaml", GB200, "fp8", 1024, (2, 1), True, (1024, 2048, 4096, 6144), tp=8,
            dp=8, ep=8, chunk=131072, running=30000, decode_running=45000, decode_dp=32),
    _sglang("gb200-fp8/8k1k/mid-curve.yaml", GB200, "fp8", 8192, (5, 1), True, (512, 1024, 2048, 6144), tp=8,
            dp=8, ep=8, chunk=131072, running=30000, decode_running=8192, decode_dp=32, request_rate=300.0),
    _sglang("b200-fp4/8k1k/stp/low-latency-tp4-1p-tp8-1d.yaml", B200, "fp4", 8192, (1, 1), False, (4, 8, 16, 64),
            tp=4, chunk=32768, max_prefill=32768, running=512, decode_running=512),
    _sglang("b200-fp4/8k1k/stp/low-latency-dep4-1p-tep8-1d.yaml", B200, "fp4", 8192, (1, 1), False, (64, 128), tp=4,
            dp=4, ep=4, chunk=32768, max_prefill=32768, running=512, decode_running=512),
    _sglang("b200-fp4/8k1k/stp/max-tpt-dep4-7p-dep8-2d.yaml", B200, "fp4", 8192, (7, 2), True, (1024, 2048), tp=4,
            dp=4, ep=4, chunk=65536, max_prefill=65536, running=1024, decode_running=2048, decode_dp=8),
    _sglang("b200-fp4/1k1k/stp/max-tpt-dep4-1p-dep8-1d.yaml", B200, "fp4", 1024, (1, 1), True, (512,), tp=4, dp=4,
            ep=4, chunk=32768, max_prefill=32768, running=1024, decode_running=1024, decode_dp=8),
    _sglang("b200-fp4/1k1k/stp/max-tpt-dep4-1p-dep8-2d.yaml", B200, "fp4", 1024, (1, 2), True, (512,), tp=4, dp=4,
            ep=4, chunk=32768, max_prefill=32768, running=512, decode_running=512, decode_dp=8),
    _sglang("b200-fp8/8k1k/stp/low-latency-tep8-1p1d.yaml", B200, "fp8", 8192, (1, 1), False, (4, 32, 64), tp=8,
            ep=8, running=512, decode_running=512, **_B200_FP8_FEBRUARY),
    _sglang("b200-fp8/8k1k/stp/low-latency-tep8-1p4d.yaml", B200, "fp8", 8192, (1, 4), False, (64,), tp=8, ep=8,
            running=512, decode_running=512, **_B200_FP8_FEBRUARY),
    _sglang("b200-fp8/8k1k/stp/max-tpt-dep8-1p1d.yaml", B200, "fp8", 8192, (1, 1), True, (128,), tp=8, dp=8, ep=8,
            running=1024, decode_running=1024, decode_dp=8, **_B200_FP8_FEBRUARY),
    _sglang("b200-fp8/8k1k/stp/max-tpt-dep8-2p1d.yaml", B200, "fp8", 8192, (2, 1), True, (256,), tp=8, dp=8, ep=8,
            running=1024, decode_running=1024, decode_dp=8, **_B200_FP8_FEBRUARY),
    _sglang("b200-fp8/1k1k.yaml (stp low latency)", B200, "fp8", 1024, (1, 1), False, (4,), tp=8, ep=8,
            chunk=32768, max_prefill=32768, running=512, decode_running=512, commit=SRT_SLURM_MARCH,
            sweeps=(B200_FP8_REWRITE, SWEEPS[1])),
    _sglang("b200-fp8/8k1k.yaml (stp low latency, 4 decode workers)", B200, "fp8", 8192, (1, 4), False, (128,),
            decode_running=32, **_B200_FP8_MARCH),
    # the max throughput overrides raise the decode's --max-running-requests with its workers: 128 to 1024
    *(_sglang("b200-fp8/8k1k.yaml (stp max throughput)", B200, "fp8", 8192, workers, True, clients,
              decode_running=running, decode_dp=8, **_B200_FP8_MARCH)
      for workers, clients, running in (((1, 2), (288,), 128), ((1, 1), (160, 288), 256), ((2, 1), (512,), 512),
                                        ((3, 1), (1024,), 1024))),
    # GB300's, unchanged from 2026-02-05 (f6754071) to the merge, before the sweep of 2026-02-09 that ran them
    _sglang("gb300-fp4/1k1k/low_latency.yaml", GB300, "fp4", 1024, (1, 2), False, (4, 8, 32), tp=4, chunk=8192,
            running=512, decode_running=None),
    _sglang("gb300-fp4/8k1k/low_latency.yaml", GB300, "fp4", 8192, (1, 4), False, (4, 8, 32, 64), tp=4, chunk=24576,
            running=512, decode_running=None, request_rate=300.0),
    _sglang("gb300-fp4/1k1k/mid_curve.yaml", GB300, "fp4", 1024, (4, 1), True, (512, 2048, 4096, 8192), tp=4, dp=4,
            ep=4, chunk=65536, max_prefill=32768, running=30000, decode_running=67584, decode_dp=32),
    _sglang("gb300-fp4/8k1k/max_tpt.yaml", GB300, "fp4", 8192, (10, 1), True, (2048,), tp=4, chunk=131072,
            max_prefill=524288, running=30000, decode_running=16384, decode_dp=32, request_rate=700.0),
    _sglang("gb300-fp8/1k1k/stp/low-latency.yaml", GB300, "fp8", 1024, (1, 4), False, (4, 8, 16, 32), tp=4,
            chunk=8192, max_prefill=8192, running=128, decode_running=128),
    _sglang("gb300-fp8/8k1k/stp/low-latency.yaml", GB300, "fp8", 8192, (1, 1), False, (4, 8), tp=4, chunk=32768,
            max_prefill=32768, running=128, decode_running=128),
    _sglang("gb300-fp8/1k1k/stp/max.yaml", GB300, "fp8", 1024, (1, 1), True, (4096, 7168, 7680), tp=8, dp=8, ep=8,
            chunk=131072, running=30000, decode_running=45000, decode_dp=8),
    _sglang("gb300-fp8/1k1k/stp/mid.yaml", GB300, "fp8", 1024, (2, 1), True, (1024, 2048, 4096, 6144), tp=8, dp=8,
            ep=8, chunk=131072, running=30000, decode_running=45000, decode_dp=32),
    _sglang("gb300-fp8/8k1k/stp/mid.yaml", GB300, "fp8", 8192, (5, 1), True, (128, 256, 512, 1024), tp=8, dp=8,
            ep=8, chunk=131072, running=30000, decode_running=45000, decode_dp=32),
    _sglang("h200/8k1k/bs128-1p1d-dep.yaml", H200, "fp8", 8192, (1, 1), True, (64, 128, 256), tp=8, chunk=163840,
            max_prefill=163840, running=16, decode_running=256, decode_dp=8),
    _sglang("gb200-fp4/1k1k/low-latency.yaml", GB200, "fp4", 1024, (1, 2), True, (4, 8, 32, 64), tp=4, chunk=8192,
            running=512, decode_running=None, decode_tp=4, **_DECEMBER),
    _sglang("gb200-fp4/1k1k/mid-curve.yaml", GB200, "fp4", 1024, (4, 1), True, (8192, 12000, 15000), tp=4, dp=4, ep=4,
            chunk=65536, max_prefill=32768, running=30000, decode_running=67584, decode_tp=32, decode_dp=32,
            decode_ep=32, **_DECEMBER),
    _sglang("gb200-fp4/8k1k/low-latency.yaml", GB200, "fp4", 8192, (1, 4), True, (4, 8, 32, 64), tp=4, chunk=24576,
            running=512, decode_running=None, decode_tp=4, **_DECEMBER),
    _sglang("gb200-fp4/8k1k/max-tpt.yaml", GB200, "fp4", 8192, (10, 1), True, (1024, 2048, 8192), tp=4, chunk=131072,
            max_prefill=524288, running=30000, decode_running=16384, decode_tp=32, decode_dp=32, decode_ep=32,
            **_DECEMBER),
    _sglang("gb200-fp8/1k1k/low-latency.yaml", GB200, "fp8", 1024, (1, 4), True, (2, 4, 8, 16, 64, 128), tp=4,
            chunk=8192, running=512, decode_running=512, decode_tp=4, **_DECEMBER),
    _sglang("gb200-fp8/1k1k/max-tpt-2p1d.yaml", GB200, "fp8", 1024, (2, 1), True, (4096,), tp=8, dp=8, ep=8,
            chunk=131072, running=30000, decode_running=45000, decode_tp=32, decode_dp=32, decode_ep=32, **_DECEMBER),
    _sglang("gb200-fp8/8k1k/mid-curve-5p1d.yaml", GB200, "fp8", 8192, (5, 1), True, (512, 1024, 2048, 6144), tp=8,
            dp=8, ep=8, chunk=131072, running=30000, decode_running=8192, decode_tp=32, decode_dp=32, decode_ep=32,
            **_DECEMBER),
)


def recipe_for(deployment: tuple, concurrency: int, measured: str, coordinates: dict) -> DisaggRecipe | None:
    """The recipe of ``deployment`` whose benchmark ran ``concurrency`` in a sweep of the date ``measured``; of two
    such, the one whose prefill ``coordinates`` are these. None where none is known."""
    found = [recipe for recipe in DISAGG_RECIPES if recipe.deployment == deployment
             and concurrency in recipe.concurrencies and recipe.sweeps[0] <= measured < recipe.sweeps[1]]
    if len(found) > 1:
        found = [recipe for recipe in found if recipe.coordinates == coordinates]
    return found[0] if len(found) == 1 else None
