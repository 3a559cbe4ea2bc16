"""The silicon validation replays each measured deployment as it ran: which rows ran multi-token
prediction (InferenceMAX sweeps of MTP-only configurations), and which cannot be told apart."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pdplan.handoff import request_kv_bytes_per_s
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model
from pdplan.shape import InstanceShape
from pdplan.vocabulary import AllToAll, SpeculativeMethod

pytestmark = pytest.mark.skipif(not tables.installed(), reason="the rows come with pdplan[aic]")


@pytest.fixture(scope="module")
def deployments(benchmark):
    return benchmark("silicon_rows")


@pytest.fixture(scope="module")
def recipes(benchmark):
    return benchmark("inferencemax_recipes")


@pytest.fixture(scope="module")
def validation(benchmark):
    return benchmark("silicon_validation")


@pytest.fixture(scope="module")
def rows(deployments):
    return deployments.supported_rows(tables.package_root() / "systems" / "silicon_sample.csv")


@pytest.fixture(scope="module")
def profile():
    """A profile the what-ifs change: DeepSeek-V3 at fp8 on H200 TP 8, SGLang's roofline."""
    return ProfileSource({}, engine="sglang", compose=False).profile(get_model("deepseek-v3", dtype="fp8"),
                                                                     get_gpu("h200-141gb"), 8, 1)


def measured(rows, on: str):
    return rows[rows["silicon_data_source"].str.contains(f"measured={on}", regex=False)]


def test_rows_of_an_mtp_only_sweep_replay_three_drafts_or_one_with_attention_dp(rows, recipes):
    sweep = measured(rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "h200-141gb")], "2026-01-14")
    drafts = {mode: {recipes.speculative(row).draft_tokens for _, row in part.iterrows()}
              for mode, part in sweep.groupby("mode")}
    assert drafts == {"agg": {3}, "agg-dp": {1}}
    row = sweep.iloc[0]
    assert recipes.speculative(row).method == SpeculativeMethod.MTP
    assert recipes.speculative(row).acceptance == 0.85  # DeepSeek-V3's report: 85-90% for the second token


def test_rows_of_a_sweep_without_mtp_replay_without_it(rows, recipes):
    sweep = measured(rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "b200-180gb")], "2026-01-29")
    assert len(sweep) and all(recipes.speculative(row) is None for _, row in sweep.iterrows())


def test_rows_of_a_sweep_with_and_without_mtp_are_left_out(deployments, rows, capsys):
    deployments.supported_rows(tables.package_root() / "systems" / "silicon_sample.csv")
    assert "both with and without multi-token prediction" in capsys.readouterr().out
    sweep = measured(rows[(rows["backend"] == "sglang") & (rows["gpu"] == "b200-180gb") & (rows["dtype"] == "fp8")],
                     "2026-03-25")
    assert sweep.empty


def test_llama_rows_of_tensorrt_llm_replay_its_recipe_budget_and_batch_waiting_at_1k_1k_below_tp_8(rows, recipes):
    llama = rows[(rows["model"] == "llama-3.1-70b") & (rows["backend"] == "trtllm")
                 & rows["harness"].isin(recipes.INFERENCEMAX)]
    assert len(llama) and all(recipes.iteration_budget(row) == 16384 for _, row in llama.iterrows())
    waiting = [(int(row["isl"]), int(row["osl"])) == (1024, 1024) and int(row["tp_size"]) < 8
               for _, row in llama.iterrows()]
    assert any(waiting) and not all(waiting)
    for wait, (_, row) in zip(waiting, llama.iterrows()):
        recipe = recipes.batch_wait(row) or {}
        assert (recipe.get("batch_wait_timeout_iters"), recipe.get("batch_wait_max_tokens_ratio")) == \
               ((20, 0.9) if wait else (None, None))


def test_deepseek_fp8_b200_rows_of_tensorrt_llm_wait_from_64_clients_at_1k_1k_but_not_with_mtp(rows, recipes):
    sweep = measured(rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "b200-180gb") & (rows["dtype"] == "fp8")
                          & (rows["mode"] == "agg")], "2026-01-29")
    for _, row in sweep.iterrows():
        chat = (int(row["isl"]), int(row["osl"])) == (1024, 1024)
        assert (recipes.batch_wait(row) is not None) == (chat and int(row["concurrency"]) >= 64)
    assert any(recipes.batch_wait(row) for _, row in sweep.iterrows())
    mtp = measured(rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "b200-180gb") & (rows["dtype"] == "fp8")],
                   "2026-02-05")
    assert len(mtp) and all(recipes.batch_wait(row) is None for _, row in mtp.iterrows())


def test_deepseek_rows_of_tensorrt_llm_replay_the_budget_their_recipe_computed(rows, recipes):
    """``MAX_NUM_TOKENS=$(( (CONC + ISL + 64 + 63) / 64 * 64 ))``, floored at 8,192 from #258 (2026-01-21);
    the MTP recipes' ``((MTP + 1) * MAX_BATCH_SIZE + ISL + 64 + 63) / 64 * 64`` with MTP 3, unfloored."""
    deepseek = rows[(rows["backend"] == "trtllm") & rows["model"].isin(recipes.DEEPSEEK) & (rows["mode"] == "agg")
                    & rows["harness"].isin(recipes.INFERENCEMAX)]
    cases = {"2025-11-02": lambda c, isl: (c + isl + 127) // 64 * 64,
             "2026-01-29": lambda c, isl: max(8192, (c + isl + 127) // 64 * 64),
             "2026-02-05": lambda c, isl: (4 * c + isl + 127) // 64 * 64}
    for on, recipe in cases.items():
        sweep = measured(deepseek, on)
        assert len(sweep)
        for _, row in sweep.iterrows():
            assert recipes.iteration_budget(row) == recipe(int(row["concurrency"]), int(row["isl"]))
    assert (deepseek.pipe(measured, "2025-11-02").eval("concurrency + isl + 127") < 8192).any()  # unfloored there


def test_deepseek_fp8_b200_rows_of_tensorrt_llm_replay_the_moe_backend_their_recipe_set(rows, recipes):
    """``dsr1_fp8_b200_trt.sh`` ran DEEPGEMM until its sweep of 2026-01-29 and TRTLLM from it (DEEPGEMM kept at
    1k/8k from 256 clients); the MTP recipe switched on 2026-02-05; the disaggregated recipes run TRTLLM at 8k-token
    prompts and DEEPGEMM at 1k; other engines' rows read the fastest kernel."""
    trt = rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "b200-180gb") & (rows["dtype"] == "fp8")
               & rows["model"].isin(recipes.DEEPSEEK) & rows["harness"].isin(recipes.INFERENCEMAX)]
    backends = {(on, mode): {recipes.moe_backend(row)
                             for _, row in measured(trt[trt["mode"] == mode], on).iterrows()}
                for on in ("2025-11-02", "2026-01-29", "2026-02-05") for mode in ("agg", "agg-dp")}
    assert backends == {("2025-11-02", "agg"): {"DEEPGEMM"}, ("2025-11-02", "agg-dp"): set(),
                        ("2026-01-29", "agg"): {"TRTLLM"}, ("2026-01-29", "agg-dp"): {"DEEPGEMM"},  # 1k/8k, 256+
                        ("2026-02-05", "agg"): {"TRTLLM"}, ("2026-02-05", "agg-dp"): {"DEEPGEMM"}}  # MTP, DP
    disaggregated = trt[trt["mode"] == "disagg"]
    assert {(int(row["isl"]), recipes.moe_backend(row)) for _, row in disaggregated.iterrows()
            if recipes.disagg_recipe(row)} == {(8192, "TRTLLM"), (1024, "DEEPGEMM")}
    sglang = rows[(rows["backend"] == "sglang") & (rows["gpu"] == "b200-180gb")]
    assert len(sglang) and all(recipes.moe_backend(row) is None for _, row in sglang.iterrows())
    assert recipes.TRT_MOE_KERNELS["TRTLLM"] == "sglang_flashinfer_trtllm_moe"


def test_fp4_tensorrt_llm_dep_decodes_replay_the_cutlass_backend_their_recipe_set(deployments, validation, rows,
                                                                                 recipes):
    """srt-slurm's B200 FP4 1k/1k ``ctx1_gen1_dep8_batch512`` runs its context on ``moe_config.backend: TRTLLM`` and
    its DEP 8 decode on CUTLASS, whose experts (gathered on the HGX node, the MoE table's) the replay times by that
    kernel; its TEP 8 decodes run TRTLLM, timed by the fastest kernel measured."""
    row = disaggregated(rows, "cfg309").iloc[0]
    prefill, decode = deployments.plan_for(row).pools
    assert (recipes.moe_backend(row, "prefill"), recipes.moe_backend(row, "decode")) == (None, "CUTLASS")
    assert validation.pool_kernel(row, decode) == "moe_torch_flow_cutlass"
    tep = disaggregated(rows, "cfg320").iloc[0]
    assert validation.pool_kernel(tep, deployments.plan_for(tep).pools[1]) is None


def test_gpt_oss_rows_of_tensorrt_llm_replay_the_recipes_20000_tokens_and_other_engines_none(rows, recipes):
    gpt_oss = rows[(rows["model"] == "gpt-oss-120b") & (rows["mode"] == "agg")
                   & rows["harness"].isin(recipes.INFERENCEMAX)]
    budgets = {engine: {recipes.iteration_budget(row) for _, row in part.iterrows()}
               for engine, part in gpt_oss.groupby("backend")}
    assert budgets == {"trtllm": {20000}, "vllm": {None}}


def test_rows_whose_recipe_left_the_kv_cache_to_the_engine_replay_it_at_bf16(deployments, rows, recipes):
    inferencemax = rows[rows["harness"].isin(recipes.INFERENCEMAX) & rows["mode"].isin(("agg", "agg-dp"))]
    kv = {(engine, gpu, model): {recipes.kv_dtype(row) for _, row in part.iterrows()}
          for (engine, gpu, model), part in inferencemax.groupby(["backend", "gpu", "model"])}
    assert kv[("sglang", "h200-141gb", "deepseek-r1")] == {"bf16"}      # dsr1_fp8_h200.sh: no --kv-cache-dtype
    assert kv[("trtllm", "h200-141gb", "gpt-oss-120b")] == {"bf16"}     # kv_cache_config.dtype: auto
    assert kv[("vllm", "b200-180gb", "gpt-oss-120b")] == {"bf16", None}  # fp8 from 25506e87c (2025-12-05)
    assert kv[("trtllm", "h200-141gb", "deepseek-r1")] == {None}        # kv_cache_config.dtype: fp8
    assert kv[("sglang", "b200-180gb", "deepseek-r1")] == {None}        # --kv-cache-dtype fp8_e4m3
    row = inferencemax[inferencemax["model"] == "deepseek-r1"].pipe(measured, "2026-03-25").iloc[0]
    assert deployments.row_model(row).kv_dtype == ("bf16" if row["gpu"] == "h200-141gb" else "fp8")


def test_vllms_gpt_oss_rows_on_b200_replay_the_mxfp8_experts_their_recipe_exported(rows, recipes):
    """``gptoss_fp4_b200_docker.sh`` exports VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 from 2025-09-24; every other
    row composes at its engine's default."""
    inferencemax = rows[rows["harness"].isin(recipes.INFERENCEMAX)]
    chosen = {(engine, gpu, model): {recipes.moe_activations(row) for _, row in part.iterrows()}
              for (engine, gpu, model), part in inferencemax.groupby(["backend", "gpu", "model"])}
    assert chosen.pop(("vllm", "b200-180gb", "gpt-oss-120b")) == {"mxfp8"}
    assert set().union(*chosen.values()) == {None}


def test_rows_of_other_collections_keep_pdplans_kv_precision(rows, recipes):
    others = rows[~rows["harness"].isin(recipes.INFERENCEMAX)]
    assert len(others) and all(recipes.kv_dtype(row) is None for _, row in others.head(200).iterrows())


def test_the_median_table_sets_each_groups_simulated_median_against_its_runs_medians(validation):
    """Two H200 rows: simulated medians 10% over and 40% under their runs' medians (median absolute 25%, one
    within 30%), their means 2x and 4x their medians; a B200 row stands alone."""
    import pandas as pd

    matched = pd.DataFrame({"mode": "disagg", "kind": "composed", "gpu": ["h200-141gb", "h200-141gb", "b200-180gb"],
                            "backend": "trtllm", "dtype": "fp8", "ttft_median_ms": [110.0, 60.0, 100.0],
                            "median_ttft_ms": [100.0, 100.0, 100.0], "mean_ttft_ms": [200.0, 400.0, 100.0],
                            "ttft_ape": [0.5, 0.7, 0.0]})
    table = validation.median_table(matched).set_index("gpu")
    h200, b200 = table.loc["h200-141gb"], table.loc["b200-180gb"]
    assert h200["rows"] == 2 and h200["within_30%"] == 1
    assert h200["median_vs_median"] == pytest.approx(0.25)
    assert h200["signed"] == pytest.approx(-0.15)
    assert h200["mean_vs_mean"] == pytest.approx(0.6)
    assert h200["mean/median"] == pytest.approx(3.0)
    assert b200["rows"] == 1 and b200["median_vs_median"] == pytest.approx(0.0)


def test_the_low_load_gap_is_measured_minus_simulated_ttft_per_group_at_up_to_16_clients(validation):
    """Two 8k B200 rows of 4 and 16 clients measured 100 and 300 ms above their replay: median 200; a row of 64
    clients (queueing) and an aggregated row stay out."""
    import pandas as pd

    results = pd.DataFrame({"kind": "composed", "backend": "trtllm", "gpu": "b200-180gb", "dtype": "fp8",
                            "isl": 8192, "mode": ["disagg", "disagg", "disagg", "agg"],
                            "concurrency": [4, 16, 64, 4], "ttft_ms": [200.0, 300.0, 1000.0, 100.0],
                            "silicon_ttft_ms": [300.0, 600.0, 5000.0, 900.0]})
    (row,) = validation.low_load_gaps(results).to_dict("records")
    assert (row["rows"], row["gap_ms_median"], row["gap_ms_min"], row["gap_ms_max"]) == (2, 200.0, 100.0, 300.0)


def test_attention_dp_rows_of_tensorrt_llm_replay_the_balance_their_recipe_set(rows, recipes):
    """DeepSeek-R1's recipes: ``timeout_iters: 60, batching_wait_iters: 0``; gpt-oss's state neither, so
    TensorRT-LLM's defaults, 50 and 10. Rows without attention DP hold nothing."""
    trt = rows[(rows["backend"] == "trtllm") & rows["harness"].isin(recipes.INFERENCEMAX)]
    with_dp = trt[trt["mode"] == "agg-dp"]
    expected = {"deepseek-r1": (60, 0), "gpt-oss-120b": (50, 10)}
    assert set(with_dp["model"]) == set(expected)
    for _, row in with_dp.iterrows():
        balance = recipes.adp_balance(row)
        assert (balance["attention_dp_timeout_iters"], balance["attention_dp_batching_wait_iters"]) == \
               expected[row["model"]]
    assert all(recipes.adp_balance(row) == {} for _, row in trt[trt["mode"] == "agg"].iterrows())


def test_mtp_recipes_with_attention_dp_cap_each_rank_at_the_clients_over_the_ranks(deployments, rows, recipes):
    """``MAX_BATCH_SIZE=$((CONC/TP))`` with one draft: ``--max_num_tokens`` is (2·C/8 + ISL + 64) rounded up
    to 64 on 8 ranks, and each rank runs at most C/8 requests."""
    sweep = measured(rows[(rows["backend"] == "trtllm") & (rows["gpu"] == "h200-141gb") & (rows["mode"] == "agg-dp")],
                     "2026-01-14")
    assert len(sweep)
    for _, row in sweep.iterrows():
        per_rank = int(row["concurrency"]) // 8
        assert recipes.mtp_batch_size(row) == per_rank
        assert recipes.iteration_budget(row) == (2 * per_rank + int(row["isl"]) + 127) // 64 * 64
        assert deployments.plan_for(row).pools[0].max_running_requests == per_rank


def disaggregated(rows, config: str):
    """The disaggregated rows of one InferenceMAX configuration (the ``cfg<N>`` that ends their id)."""
    return rows[(rows["mode"] == "disagg") & rows["id"].str.endswith(f"_{config}")]


def test_disaggregated_rows_replay_the_prefill_workers_their_recipe_started(deployments, rows):
    """TensorRT-LLM's H200 8k/1k recipes run prefill at TP 8 without attention DP, ``max_num_tokens: 16640`` and
    ``max_batch_size: 2``; the sweep of 2026-02-14 states DP 8 for the same deployment (1 prefill and 1 decode
    worker at 128 clients) that the sweep of 2026-03-23 states as TP 8, and both measured 7.7 s."""
    february, march = disaggregated(rows, "cfg291").iloc[0], disaggregated(rows, "cfg675").iloc[0]
    assert (int(february["prefill_attention_dp_size"]), int(march["prefill_attention_dp_size"])) == (8, 1)
    pools = [deployments.plan_for(row).pools[0] for row in (february, march)]
    assert pools[0] == pools[1]
    assert (pools[0].tp, pools[0].dp, pools[0].ep) == (8, 1, 8)
    assert (pools[0].max_prefill_batch_tokens, pools[0].max_running_requests) == (16640, 2)


def test_rows_whose_recipe_benchmark_ran_a_finite_rate_pace_their_clients_at_it(deployments, rows):
    """srt-slurm's GB200 FP8 8k/1k mid-curve recipe runs sa-bench at ``req_rate: "300"``: its rows' requests are
    scheduled by a Poisson process at 300 req/s, not all at once; a recipe at ``inf`` schedules every one at 0."""
    paced = disaggregated(rows, "cfg533").iloc[0]
    scheduled, rate = deployments.arrivals(paced, 5000)
    assert rate == 300.0 and scheduled[0] == 0 and 5000 / scheduled[-1] == pytest.approx(300, rel=0.05)
    scheduled, rate = deployments.arrivals(disaggregated(rows, "cfg457").iloc[0], 100)
    assert rate is None and not scheduled.any()


def test_disaggregated_rows_send_the_kv_once_the_prompts_prefill_ends(deployments, rows):
    """SGLang sends each chunk's KV after its forward and TensorRT-LLM a context request's once it completes, so
    the replay's transfer starts when the prefill ends, not layer by layer beside it."""
    for config in ("cfg291", "cfg457"):   # TensorRT-LLM H200, SGLang B200
        assert deployments.plan_for(disaggregated(rows, config).iloc[0]).transfer_schedule == "request"


def test_each_attention_dp_rank_of_a_replayed_decode_takes_its_kv_over_its_own_gpus_nics(deployments, rows):
    """A GPU's NIC carries its own rank's KV: GB300 FP8 8k/1k's DEP 32 decode takes 32 of GB300's 800 Gb/s NICs, so
    one prompt's 258 MB lands on its rank at one NIC's 100 GB/s (under 3 ms), not at a 32nd of it; H200's TEP 8
    decode takes 8 of its 400 Gb/s ones."""
    model = get_model("deepseek-v3", dtype="fp8")
    for config, gpus, nic in (("cfg505", 32, 100e9), ("cfg297", 8, 50e9)):   # SGLang GB300 DEP 32, TRT H200 TEP 8
        plan = deployments.plan_for(disaggregated(rows, config).iloc[0])
        assert plan.pools[1].gpus == gpus
        assert plan.default_link.bandwidth_bytes_per_s == pytest.approx(nic * gpus)
    shape = {"gpu": "gb300-288gb", "pp": 1, "tp": 1}
    rate = request_kv_bytes_per_s(model, 100e9 * 32, InstanceShape(**shape, dp=8, ep=8),
                                  InstanceShape(**shape, dp=32, ep=32))
    assert rate == pytest.approx(100e9)


def test_sglang_recipes_with_attention_dp_give_each_rank_the_chunk_and_requests_over_the_ranks(deployments, rows):
    """GB200 FP8 1k/1k max throughput: ``--dp-size 8 --chunked-prefill-size 131072 --max-running-requests 30000``
    and SGLang's default ``--max-prefill-tokens`` 16,384 (per rank, not divided)."""
    row = disaggregated(rows, "cfg523").iloc[0]
    pool = deployments.plan_for(row).pools[0]
    assert (pool.tp, pool.dp, pool.ep, pool.rank_router) == (1, 8, 8, "bootstrap-room")
    assert (pool.max_prefill_batch_tokens, pool.max_running_requests) == (min(131072 // 8, 16384), 30000 // 8)


def test_decode_workers_run_at_most_the_requests_their_recipe_lets_each_rank(deployments, rows, recipes):
    """TensorRT-LLM's decode ``max_batch_size`` is one rank's (H200 8k/1k at 28 clients: 32); SGLang's decode
    ``--max-running-requests`` is divided over its DP ranks (B200 FP8 8k/1k max throughput, one prefill and one
    DEP 8 decode worker: 256 over 8); a recipe that passes none leaves the KV to bind (GB200 FP4 low latency)."""
    def decode(config: str, clients: int, recipe: str):
        part = disaggregated(rows, config)
        row = part[part["concurrency"] == clients].iloc[0]
        assert recipes.disagg_recipe(row).recipe.startswith(f"recipes/{recipe}")
        return deployments.plan_for(row).pools[1]

    assert decode("cfg297", 28, "trtllm/h200/8k1k/stp/c4_").max_running_requests == 32
    sglang = decode("cfg641", 288, "b200-fp8/8k1k.yaml (stp max throughput)")
    assert (sglang.dp, sglang.max_running_requests) == (8, 256 // 8)
    assert decode("cfg486", 4, "gb200-fp4/1k1k/low-latency").max_running_requests is None


def exchanges(deployments, rows, config):
    return [pool.all_to_all for pool in deployments.plan_for(disaggregated(rows, config).iloc[0]).pools]


def test_sglang_pools_of_dp_and_ep_on_one_node_gather_and_across_nodes_dispatch(deployments, rows):
    """Only SGLang's srt-slurm recipes that span nodes set ``moe-a2a-backend: deepep``: B200 FP8's DEP 8 on one
    node (``max-tpt-dep8-1p1d.yaml``) gathers on both phases; GB200 FP8's max throughput DEP 8 prefill over two
    4-GPU trays and its DEP 32 decode dispatch."""
    assert exchanges(deployments, rows, "cfg457") == [AllToAll.GATHER, AllToAll.GATHER]
    assert exchanges(deployments, rows, "cfg523") == [AllToAll.DISPATCH, AllToAll.DISPATCH]


def test_tensorrt_llm_pools_of_dp_gather_on_hgx_and_dispatch_on_nvl72_or_where_a_recipe_forces_deepep(deployments,
                                                                                                      rows):
    """H200 8k/1k ``c128_ctx1_gen1_dep8``: a TP 8 prefill (no DP, nothing to move) and a DEP 8 decode, which gathers;
    GB200 FP4's DEP 4 prefill and DEP 4 decode run the NVLink all-to-all; H100's recipes force DeepEP over their two
    nodes."""
    assert exchanges(deployments, rows, "cfg291") == [AllToAll.DISPATCH, AllToAll.GATHER]
    assert exchanges(deployments, rows, "cfg411") == [AllToAll.DISPATCH, AllToAll.DISPATCH]
    assert exchanges(deployments, rows, "cfg494")[0] == AllToAll.DISPATCH


def test_two_recipes_of_one_deployment_and_concurrency_are_told_apart_by_the_rows_prefill(rows, recipes):
    """B200 FP4 8k/1k, one prefill and one TP decode worker at 64 clients: the TP 4 recipe and the DEP 4 one."""
    tp4, dep4 = disaggregated(rows, "cfg535"), disaggregated(rows, "cfg530")
    tp4, dep4 = tp4[tp4["concurrency"] == 64].iloc[0], dep4[dep4["concurrency"] == 64].iloc[0]
    assert recipes.disagg_recipe(tp4).recipe.startswith("recipes/b200-fp4/8k1k/stp/low-latency-tp4-1p")
    assert recipes.disagg_recipe(dep4).recipe.startswith("recipes/b200-fp4/8k1k/stp/low-latency-dep4-1p")
    assert recipes.disagg_recipe(dep4).coordinates == {"tp": 1, "dp": 4, "ep": 4}


def test_decembers_gb200_sglang_rows_replay_both_phases_as_the_dynamo_scripts_started_them(deployments, rows, recipes):
    """InferenceMAX's GB200 SGLang sweep of 2025-12-21 ran ai-dynamo's scripts, whose parallel sizes its config left
    as placeholders the export states (prefill DP 4, decode DP 32, EP 1): the 8k/1k max-throughput script runs ten
    TP 4 prefill workers and one DEP 32 decode (``--max-running-requests 16384``), at ``req_rate`` inf."""
    row = disaggregated(rows, "cfg254").iloc[0]
    assert (int(row["prefill_attention_dp_size"]), int(row["decode_moe_ep_size"])) == (4, 1)
    assert recipes.disagg_recipe(row).recipe == "recipies/gb200-fp4/8k1k/max-tpt.yaml @ d83c9ee0"
    prefill, decode = deployments.plan_for(row).pools
    assert (prefill.replicas, prefill.tp, prefill.dp, prefill.ep) == (10, 4, 1, 1)
    assert (prefill.max_prefill_batch_tokens, prefill.max_running_requests) == (131072, 30000)
    assert (decode.tp, decode.dp, decode.ep, decode.max_running_requests) == (1, 32, 32, 16384 // 32)
    assert recipes.client_rate(row) is None


def test_b200_fp4_sglang_max_throughput_rows_replay_the_recipe_their_config_names(deployments, rows, recipes):
    """InferenceX's config of 2026-02-11 runs SGLang's B200 FP4 8k/1k at 1,024 and 2,048 clients by
    ``CONFIG_FILE=recipes/b200-fp4/8k1k/stp/max-tpt-dep4-7p-dep8-2d.yaml``: seven DEP 4 prefills of
    ``--chunked-prefill-size 65536 --max-running-requests 1024``, two DEP 8 decodes of 2,048 requests each."""
    row = disaggregated(rows, "cfg538").iloc[0]
    assert recipes.disagg_recipe(row).recipe.startswith("recipes/b200-fp4/8k1k/stp/max-tpt-dep4-7p-dep8-2d.yaml")
    prefill, decode = deployments.plan_for(row).pools
    assert (prefill.replicas, prefill.tp, prefill.dp, prefill.ep) == (7, 1, 4, 4)
    assert (prefill.max_prefill_batch_tokens, prefill.max_running_requests) == (65536 // 4, 1024 // 4)
    assert (decode.replicas, decode.dp, decode.max_running_requests) == (2, 8, 2048 // 8)


def test_gb300_sglang_rows_replay_the_recipes_of_their_sweep(deployments, rows, recipes):
    """InferenceMAX's GB300 SGLang sweep of 2026-02-09 ran srt-slurm's ``recipes/gb300-fp8`` and ``gb300-fp4``,
    unchanged from 2026-02-05 to the merge: the FP8 8k/1k mid curve runs five prefills of ``--tp-size 8 --dp-size 8
    --ep-size 8 --chunked-prefill-size 131072`` (16,384 tokens a rank, SGLang's default ``--max-prefill-tokens``) and
    one DEP 32 decode of ``--max-running-requests 45000``; the FP4 8k/1k low latency paces its clients at 300 req/s."""
    row = disaggregated(rows, "cfg505").iloc[0]
    assert recipes.disagg_recipe(row).recipe == "recipes/gb300-fp8/8k1k/stp/mid.yaml @ 5063eb43"
    prefill, decode = deployments.plan_for(row).pools
    assert (prefill.replicas, prefill.tp, prefill.dp, prefill.ep) == (5, 1, 8, 8)
    assert (prefill.max_prefill_batch_tokens, prefill.max_running_requests) == (16384, 30000 // 8)
    assert (decode.replicas, decode.dp, decode.max_running_requests) == (1, 32, 45000 // 32)
    assert deployments.arrivals(disaggregated(rows, "cfg569").iloc[0], 100)[1] == 300.0


def gap_analysis(rows, recipes):
    """The disaggregated rows of AIConfigurator's own runs, which no recipe read here started."""
    return rows[(rows["mode"] == "disagg") & ~rows["harness"].isin(recipes.INFERENCEMAX)]


def test_rows_without_a_known_recipe_keep_their_coordinates_and_the_engines_batch(deployments, rows, recipes):
    row = gap_analysis(rows, recipes).iloc[0]
    assert recipes.disagg_recipe(row) is None
    prefill, decode = deployments.plan_for(row).pools
    assert (prefill.tp, prefill.dp) == (int(row["prefill_tp_size"]), int(row["prefill_attention_dp_size"]))
    assert (prefill.max_prefill_batch_tokens, prefill.max_running_requests) == (8192, None)
    assert (decode.tp, decode.max_running_requests) == (int(row["decode_tp_size"]), None)


def test_decembers_gb200_tensorrt_llm_rows_replay_the_batches_their_config_set(deployments, rows, recipes):
    """InferenceMAX's config of December 2025 started GB200 FP4 TensorRT-LLM through ai-dynamo's performance sweeps
    with ``PREFILL_MAX_NUM_TOKENS=4608``, ``PREFILL_MAX_BATCH_SIZE=4`` and ``DECODE_MAX_BATCH_SIZE=128`` for its
    1k/1k TEP 8 deployment, whose clients are the config's concurrency (141) times the four decode workers, each
    sending eight requests (``bench.sh``'s ``multi_round``) where InferenceMAX's client sends ten."""
    row = disaggregated(rows, "cfg237").iloc[0]
    assert recipes.disagg_recipe(row).recipe.endswith("dsr1-fp4-gb200-dynamo-trt 1k/1k TEP 8 @ 93e1b3ca1")
    assert 141 * 4 in set(disaggregated(rows, "cfg237")["concurrency"].astype(int))
    prefill, decode = deployments.plan_for(row).pools
    assert (prefill.tp, prefill.dp, prefill.ep) == (4, 1, 4)
    assert (prefill.max_prefill_batch_tokens, prefill.max_running_requests) == (4608, 4)
    assert (decode.replicas, decode.tp, decode.max_running_requests) == (4, 8, 128)
    assert len(deployments.requests(row)[0]) == 8 * int(row["concurrency"])
    march = disaggregated(rows, "cfg388").iloc[0]
    assert len(deployments.requests(march)[0]) == 10 * int(march["concurrency"])


#: The runs of TensorRT-LLM's H200 recipes of one request per decode worker, as InferenceX-app's API fixture holds
#: them (``benchmarks.json`` at 3a600f1d): their rows state no worker counts, so only these layouts reach them.
ONE_REQUEST_DECODE_RUNS = [
    {"hardware": "h200", "isl": isl, "osl": 1024, "conc": clients, "disagg": True, "spec_method": "none",
     "metrics": {"mean_ttft": ttft, "median_ttft": median, "p99_ttft": 0.0, "mean_tpot": tpot},
     "prefill_tp": 8, "prefill_ep": 8, "prefill_dp_attention": isl == 1024, "num_prefill_gpu": 8,
     "prefill_num_workers": 1, "decode_tp": 8, "decode_ep": 8, "decode_dp_attention": False,
     "num_decode_gpu": 8 * decoders, "decode_num_workers": decoders}
    for isl, clients, decoders, ttft, median, tpot in (
        (1024, 11, 9, 2.434310145949183, 0.9621240190463141, 0.01026713437339244),
        (8192, 9, 7, 3.011131090246555, 1.6897527660476044, 0.010946513094241054))]


@pytest.fixture(scope="module")
def published(deployments, benchmark, tmp_path_factory):
    """The rows with those two runs' layouts."""
    path = tmp_path_factory.mktemp("runs") / "runs.json"
    path.write_text(json.dumps(ONE_REQUEST_DECODE_RUNS))
    runs = benchmark("inferencex").read_runs([str(path)])
    return deployments.supported_rows(tables.package_root() / "systems" / "silicon_sample.csv", runs)


def test_every_recipe_the_table_holds_is_one_some_row_ran(published, recipes):
    """Some row ran each recipe, with the layout of the run it is where the row states no worker counts."""
    ran = {recipes.disagg_recipe(row) for _, row in published[published["mode"] == "disagg"].iterrows()}
    assert set(recipes.srt_slurm.DISAGG_RECIPES) <= ran


def test_a_recipe_of_one_request_per_decode_worker_queues_the_clients_beyond_the_workers(deployments, published):
    """H200 1k/1k at 11 clients on 9 decode workers of ``max_batch_size: 1``: each runs one request at a time."""
    row = published[(published["mode"] == "disagg") & (published["concurrency"] == 11)
                    & (published["gpu"] == "h200-141gb")].iloc[0]
    decode = deployments.plan_for(row).pools[1]
    assert (decode.replicas, decode.dp, decode.max_running_requests) == (9, 1, 1)


def test_a_prompt_budget_beyond_the_profiles_batches_is_held_to_them(validation):
    from types import SimpleNamespace

    from pdplan.sim.plan import Plan, Pool
    prefill = Pool(name="p", phase="prefill", model="deepseek-v3", gpu="h200-141gb", tp=8,
                   max_prefill_batch_tokens=163840)
    decode = Pool(name="d", phase="decode", model="deepseek-v3", gpu="h200-141gb", tp=8, dp=1)
    profiles = {prefill.shape: SimpleNamespace(max_prefill_batch_tokens=98304)}
    held = validation.within_profiles(Plan(pools=(prefill, decode)), profiles)
    assert [pool.max_prefill_batch_tokens for pool in held.pools] == [98304, None]


def test_the_report_counts_the_rows_their_recipe_replays_and_those_it_moved(deployments, rows, recipes):
    twins = pd.concat([rows[rows["id"].str.endswith(("_cfg291", "_cfg675"))], gap_analysis(rows, recipes)])
    assert deployments.recipe_coverage(twins).startswith(
        f"2 of {len(twins)} disaggregated rows replay the prefill workers their recipe started "
        "(1 at coordinates the export states otherwise)")


def test_a_what_if_prompt_cost_is_read_per_engine_in_milliseconds_and_refuses_what_is_not(validation):
    assert validation.prompt_costs("sglang=207.5,trtllm=124") == {"sglang": 0.2075, "trtllm": 0.124}
    for wrong in ("tgi=100", "sglang=fast", "vllm=-5"):
        with pytest.raises(ValueError, match="--prompt-cost"):
            validation.prompt_costs(wrong)


def test_a_what_if_prompt_cost_replaces_the_cost_a_profile_states_for_an_iteration_with_prompt_work(validation,
                                                                                                  profile):
    changed = validation.with_prompt_cost({"shape": profile}, 0.2)["shape"]
    assert changed.prompt_iteration_s == pytest.approx(0.2)
    assert changed.prefill_time_s([1024]) - profile.prefill_time_s([1024]) == pytest.approx(
        0.2 - profile.prompt_iteration_s)


def test_a_what_if_prefill_scale_is_read_per_engine_and_refuses_what_is_not(validation):
    assert validation.prefill_scales("sglang=1.3,vllm=0.5") == {"sglang": 1.3, "vllm": 0.5}
    for wrong in ("tgi=2", "sglang=slow", "trtllm=0", "sglang=12"):
        with pytest.raises(ValueError, match="--prefill-scale"):
            validation.prefill_scales(wrong)


def test_a_what_if_prefill_scale_stretches_the_prefill_steps_and_leaves_the_decode_steps(validation, profile):
    scaled = validation.with_prefill_scale({"shape": profile}, 1.5)["shape"]
    for prompts in ([1024], [8192, 2048]):
        assert scaled.prefill_time_s(prompts) == pytest.approx(1.5 * profile.prefill_time_s(prompts), rel=1e-6)
    assert scaled.prompt_iteration_s == pytest.approx(1.5 * profile.prompt_iteration_s)
    assert scaled.decode_step_s(64, 2048) == pytest.approx(profile.decode_step_s(64, 2048), rel=1e-6)


def test_the_decode_as_measured_what_if_replays_a_disaggregated_row_at_its_measured_tpot(validation, rows):
    row = rows[rows["id"] == "kimik2_5_gb200_trtllm_fp4_disagg_1024x1024_c55_cfg763"].iloc[0]
    profiles = validation.row_profiles(row, "composed")
    _, before = validation.replayed(row, profiles)
    _, after = validation.replayed(row, validation.decode_as_measured(row, profiles))
    measured = row["silicon_tpot_ms"] / 1e3
    assert abs(before.mean() / measured - 1) > 0.2   # the composed decode is off here ...
    assert after.mean() == pytest.approx(measured, rel=0.02)   # ... and the what-if steps it as it ran
