"""`pdplan profile …`: fit, show and derive phase latency profiles."""

from __future__ import annotations

import os
from contextlib import nullcontext
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.table import Table

from pdplan import limits
from pdplan.cli.options import (
    MODEL_HELP,
    AcceptanceOpt,
    AllToAllOpt,
    DpOpt,
    DraftCostOpt,
    DraftTokensOpt,
    DtypeOpt,
    EngineVersionOpt,
    EpOpt,
    KvDtypeOpt,
    MoeActivationsOpt,
    RedundantExpertsOpt,
    SpeculativeOpt,
    checked_all_to_all,
    choice,
    rank_ep,
    speculative_from_options,
    within,
)
from pdplan.cli.output import print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.experts import slots_rejection
from pdplan.fileio import Outputs
from pdplan.hardware import MAX_GPUS_PER_NODE, get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.importers import DEFAULT_MEMORY_UTILIZATION, profiles_from_source
from pdplan.latency.profile import (
    PhaseProfile,
    load_profile,
    profile_file_name,
    profile_files,
    profile_yaml,
    shipped_profiles_dir,
)
from pdplan.latency.roofline import DEFAULT_EFFICIENCY, roofline_profile
from pdplan.modelref import get_model, model_file
from pdplan.vocabulary import AllToAll, Policy
from pdplan.wording import counted

app = typer.Typer(help="Fit, show and derive phase latency profiles.", no_args_is_help=True)


# --- shared rendering ----------------------------------------------------------------------------

#: What `profile show` and `profile fit` report per profile. JSON keys, in order:
#: model, gpu, tp, pp, dp, ep — the shape; prefill_ms_512, prefill_ms_2048 — one prompt of 512 / 2048 tokens;
#: decode_ms_b1, decode_ms_b32 — one decode step of 1 / 32 requests with 1024 tokens of context each
#: (Σctx = B·1024); kv_capacity_tokens, max_prefill_batch_tokens; source ("measured" or "roofline"), method;
#: points_prefill, points_decode (distinct grid points fitted); mape_prefill, max_error_prefill, mape_decode,
#: max_error_decode (held-out, fractions; null when the profile was not fitted by pdplan); outliers (how many
#: points were left out);
#: file, sha256 (the source data); profile (the profile file's path); all_to_all, redundant_experts (how a wide
#: rank's tokens reach the experts, EPLB's slots) and shape (the label the table shows). Times are milliseconds
#: rounded to the microsecond.
SHOW_PROMPTS = (512, 2048)
SHOW_BATCHES = (1, 32)
SHOW_CONTEXT_EACH = 1024


def profile_summary(profile: PhaseProfile, path: Path) -> dict:
    """One row of `profile show`: the same dict feeds the table and ``--json``."""
    prov = profile.provenance
    row: dict = {"model": profile.model, "gpu": profile.gpu, "tp": profile.tp, "pp": profile.pp, "dp": profile.dp,
                 "ep": profile.ep}
    for prompt in SHOW_PROMPTS:
        row[f"prefill_ms_{prompt}"] = round(profile.prefill_time_s([prompt]) * 1e3, 3)
    for batch in SHOW_BATCHES:
        row[f"decode_ms_b{batch}"] = round(
            profile.decode_step_s(batch, batch * SHOW_CONTEXT_EACH) * 1e3, 3)
    row.update({
        "kv_capacity_tokens": profile.kv_capacity_tokens,
        "max_prefill_batch_tokens": profile.max_prefill_batch_tokens,
        "source": prov.source, "method": prov.method,
        "points_prefill": prov.points_prefill, "points_decode": prov.points_decode,
        "mape_prefill": prov.mape_prefill, "max_error_prefill": prov.max_error_prefill,
        "mape_decode": prov.mape_decode, "max_error_decode": prov.max_error_decode,
        "outliers": len(prov.outliers),
        "file": prov.file, "sha256": prov.sha256,
        "profile": path.as_posix(),
        "all_to_all": str(profile.all_to_all), "redundant_experts": profile.redundant_experts,
        "shape": profile.shape,
    })
    return row


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _render(rows: list[dict], title: str) -> None:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("shape", no_wrap=True)
    for name in ("prefill\n512", "prefill\n2048", "decode\nB1", "decode\nB32", "KV\ntokens",
                 "max prefill\ntokens", "source", "MAPE\nprefill", "MAPE\ndecode", "outliers"):
        table.add_column(name, justify="left" if name == "source" else "right")
    for row in rows:
        table.add_row(
            row["shape"],
            f"{row['prefill_ms_512']:.1f}", f"{row['prefill_ms_2048']:.1f}",
            f"{row['decode_ms_b1']:.1f}", f"{row['decode_ms_b32']:.1f}",
            f"{row['kv_capacity_tokens']:,}", f"{row['max_prefill_batch_tokens']:,}",
            row["source"], _percent(row["mape_prefill"]), _percent(row["mape_decode"]),
            str(row["outliers"]),
        )
    stdout.print(table)
    stdout.print(f"Times in ms: one prompt of {' / '.join(map(str, SHOW_PROMPTS))} tokens; one "
                  f"decode step of B requests with {SHOW_CONTEXT_EACH} context tokens each. MAPE: "
                  "held out (leave-one-out over distinct grid points); — where pdplan did not fit "
                  "the profile. --json adds method, source file and sha256.")


# --- fit -----------------------------------------------------------------------------------------

class SourceFormat(str, Enum):
    splitwise = "splitwise"
    distserve = "distserve"
    dynamo = "dynamo"
    points = "points"


def _portable(path: Path) -> str:
    """A path as provenance records it: relative to the working directory, with ``/``."""
    try:
        return Path(os.path.relpath(path)).as_posix()
    except ValueError:  # another drive on Windows
        return path.as_posix()


@app.command("fit")
def fit(
    src: Annotated[Path, typer.Argument(
        help="Measured data: Splitwise perf_model.csv, DistServe profiler JSON, Dynamo raw_data.npz "
             "(or the profiler's results folder), or a pdplan points CSV.", show_default=False)],
    fmt: Annotated[SourceFormat, typer.Option("--format", help="Format of SRC.",
                                              show_default=False)],
    output: Annotated[Path, typer.Option(
        "-o", "--output", show_default=False,
        help="A .yaml file for exactly one shape, or a folder: every selected shape is written "
             "there as {model}_{gpu}_tp{T}_pp{P}.yaml.")],
    model: Annotated[Optional[str], typer.Option(help=f"{MODEL_HELP} Selects shapes; required for "
                                                      "points/dynamo.")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU type; selects shapes, required for "
                                                    "points/dynamo/distserve.")] = None,
    tp: Annotated[Optional[int], typer.Option(min=1, help="Tensor-parallel size; selects shapes, "
                                                          "required for dynamo.")] = None,
    pp: Annotated[Optional[int], typer.Option(min=1, help="Pipeline-parallel size; selects shapes "
                                                          "(dynamo: default 1).")] = None,
    max_num_tokens: Annotated[Optional[Path], typer.Option(
        help="DistServe's max_num_tokens.csv (KV capacity); default: next to SRC.")] = None,
    memory_utilization: Annotated[float, typer.Option(
        min=0.01, max=1.0, help="HBM fraction for KV capacity from geometry (splitwise, points).")
    ] = DEFAULT_MEMORY_UTILIZATION,
    as_json: Annotated[bool, typer.Option("--json", help="Print the written profiles as JSON.")] = False,
) -> None:
    """Fit (or import) phase profiles from measured data and write them atomically.

    The shipped profiles are made with this command; pdplan/data/profiles/README.md has the
    exact invocations.
    """
    within("--memory-utilization", memory_utilization, 0, 1, above=True)
    single = output.suffix in (".yaml", ".yml")
    table = None
    if fmt is SourceFormat.distserve:
        table = max_num_tokens if max_num_tokens is not None else src.parent / "max_num_tokens.csv"
    outputs = Outputs(src, max_num_tokens, table, model_file(model))
    outputs.claim(output, "--output", folder=not single)
    result = profiles_from_source(
        src, fmt.value, model=model, gpu=gpu, tp=tp, pp=pp, label=_portable(src),
        max_num_tokens=table, max_num_tokens_label=None if table is None else _portable(table),
        memory_utilization=memory_utilization)
    if single and len(result.profiles) != 1:
        shapes = ", ".join(p.shape for p in result.profiles)
        raise PdplanError(f"{len(result.profiles)} shapes selected ({shapes}) but -o names one "
                          "file; select one with --model/--gpu/--tp/--pp, or give a folder as -o",
                          file=src, field="output")
    targets = [(profile, output if single else output / profile_file_name(profile))
               for profile in result.profiles]
    for profile, path in targets:
        outputs.put(path, profile_yaml(profile), "--output")
    outputs.commit()
    for note in result.skipped:
        stderr.print(f"skipped {note}", markup=False, highlight=False)
    rows = [profile_summary(load_profile(path), path) for _, path in targets]  # as written (rounded)
    if as_json:
        print_json(rows)
    else:
        _render(rows, f"Wrote {counted(len(rows), 'profile')} "
                      f"from {_portable(src)}")


# --- show ----------------------------------------------------------------------------------------

@app.command("show")
def show(
    path: Annotated[Optional[Path], typer.Argument(
        help="A profile YAML or a folder of them; default: the shipped profiles.",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per "
                                                         "profile.")] = False,
) -> None:
    """Show each profile's shape, sample latencies, KV capacity, source and fit quality."""
    folder = shipped_profiles_dir() if path is None else path
    rows, seen = [], {}
    for file in profile_files(folder):
        profile = load_profile(file)
        if profile.key in seen:
            raise PdplanError(f"second profile for {profile.shape} (first: {seen[profile.key]})",
                              file=file, field="model")
        seen[profile.key] = file.name
        rows.append(profile_summary(profile, file))
    if as_json:
        print_json(rows)
    else:
        _render(rows, f"Profiles in {folder}")


# --- roofline ------------------------------------------------------------------------------------

@app.command("roofline")
def roofline(
    model: Annotated[str, typer.Option(help=MODEL_HELP, show_default=False)],
    gpu: Annotated[str, typer.Option(help="GPU type from the catalog.", show_default=False)],
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (GPUs per stage, one node).",
                                    show_default=False)],
    pp: Annotated[int, typer.Option(help="Pipeline-parallel stages.", show_default=False)],
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    engine: Annotated[str | None, typer.Option(
        "--engine", help="Use the efficiencies fitted for vllm, sglang or trtllm on their measured operators "
                         "(benchmarks/roofline_engine_fit.py); default the Splitwise 2023 calibration "
                         f"(compute {DEFAULT_EFFICIENCY.compute:g}, bandwidth {DEFAULT_EFFICIENCY.bandwidth:g}, "
                         f"{DEFAULT_EFFICIENCY.layer_overhead_s * 1e6:g} µs per layer).", show_default=False)] = None,
    compute_efficiency: Annotated[Optional[float], typer.Option(
        help="Fraction of peak tensor FLOP/s reached; default the engine's fit.", show_default=False)] = None,
    bandwidth_efficiency: Annotated[Optional[float], typer.Option(
        help="Fraction of peak HBM bandwidth reached; default the engine's fit.", show_default=False)] = None,
    layer_overhead_us: Annotated[Optional[float], typer.Option(
        help="Fixed cost per layer per iteration in µs; default the engine's fit, 0 gives the pure two-factor "
             "roofline.", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="Profile YAML to write (atomically).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile summary as one JSON "
                                                         "object.")] = False,
) -> None:
    """Derive a roofline profile for a shape nobody measured: max(compute, memory) + communication.

    JSON keys are `profile show`'s (profile is null without -o) plus notes, the assumptions.
    """
    within("--tp", tp, 1, MAX_GPUS_PER_NODE)
    within("--pp", pp, 1, limits.MAX_PIPELINE_STAGES)
    within("--compute-efficiency", compute_efficiency, 0, 1, above=True)
    within("--bandwidth-efficiency", bandwidth_efficiency, 0, 1, above=True)
    within("--layer-overhead-us", layer_overhead_us, 0, 1e6)
    outputs = Outputs(model_file(model))
    if output is not None:
        outputs.claim(output, "--output")
    profile = roofline_profile(get_model(model, dtype=dtype, kv_dtype=kv_dtype), get_gpu(gpu), tp, pp,
                               engine=engine, compute_efficiency=compute_efficiency,
                               bandwidth_efficiency=bandwidth_efficiency,
                               layer_overhead_s=None if layer_overhead_us is None else layer_overhead_us / 1e6)
    _write_and_show(profile, outputs, output, as_json, "Roofline")


def _write_and_show(profile: PhaseProfile, outputs: Outputs, output: Path | None, as_json: bool, what: str) -> None:
    """Write the derived profile (if asked) and print its summary row, method and notes."""
    if output is not None:
        outputs.put(output, profile_yaml(profile))
        outputs.commit()
    row = profile_summary(profile, output if output is not None else Path())
    row["profile"] = None if output is None else row["profile"]
    row["notes"] = profile.provenance.notes
    if as_json:
        print_json(row)
        return
    _render([row], f"{what} {profile.shape}" + ("" if output is None else f", wrote {output}"))
    stdout.print(f"{row['method']}. {row['notes']}", markup=False, highlight=False)


# --- compose -------------------------------------------------------------------------------------

@app.command("compose")
def compose(
    model: Annotated[str, typer.Option(help=MODEL_HELP, show_default=False)],
    gpu: Annotated[str, typer.Option(help="GPU type from the catalog.", show_default=False)],
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (GPUs per stage, one node).")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel stages.")] = 1,
    dp: DpOpt = 1,
    ep: EpOpt = None,
    all_to_all: AllToAllOpt = AllToAll.DISPATCH,
    redundant_experts: RedundantExpertsOpt = 0,
    engine: Annotated[str, typer.Option("--engine", help="Serving engine whose operators were measured: vllm, "
                                                         "sglang or trtllm.")] = "vllm",
    engine_version: EngineVersionOpt = None,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    moe_activations: MoeActivationsOpt = None,
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="Profile YAML to write (atomically).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile summary as one JSON object.")] = False,
) -> None:
    """Compose prefill and decode profiles from AIConfigurator's measured operators (GEMM, attention,
    all-reduce; for mixture-of-experts models the MoE, MLA and wide-EP tables) for one engine and
    version, fitted into the profile format the simulator reads. With --dp the profile is one
    attention data-parallel rank's, as optimize and goodput time it; the file states a gathered rank
    (--all-to-all gather) and EPLB's slots (--redundant-experts), and serves only pools of the same.

    Needs the optional extra: pip install 'pdplan\\[aic]'. The profile's provenance names the tables,
    the engine versions, the held-out fit error and any query outside the measured grids.
    """
    within("--tp", tp, 1, MAX_GPUS_PER_NODE)
    within("--pp", pp, 1, limits.MAX_PIPELINE_STAGES)
    ep = rank_ep(tp, pp, dp, ep)
    all_to_all = checked_all_to_all(all_to_all, tp, dp, ep)
    within("--redundant-experts", redundant_experts, 0, limits.MAX_GPUS)
    wrong = slots_rejection(ep, redundant_experts)
    if wrong is not None:
        raise PdplanError(f"--redundant-experts {redundant_experts} with --ep {ep}: {wrong}", field="redundant_experts")
    outputs = Outputs(model_file(model))
    if output is not None:
        outputs.claim(output, "--output")
    from pdplan.latency.compose.profile import composed_profile  # the extra's tables load only here

    tables.package_root()  # a clear error naming the extra when it is missing
    spec = get_model(model, dtype=dtype, kv_dtype=kv_dtype)
    profile = composed_profile(spec, get_gpu(gpu), tp, pp, dp=dp, ep=ep, engine=engine, engine_version=engine_version,
                               moe_activations=moe_activations, all_to_all=all_to_all,
                               redundant_experts=redundant_experts)
    _write_and_show(profile, outputs, output, as_json, f"Composed ({engine})")


# --- calibrate -----------------------------------------------------------------------------------

#: The calibration's scheduler settings, by the plan pool field that states them.
SCHEDULE_FLAGS = {"recv_interval": "--recv-interval", "batch_wait_timeout_iters": "--batch-wait-timeout-iters",
                  "batch_wait_max_tokens_ratio": "--batch-wait-max-tokens-ratio", "chunk_tokens": "--chunk",
                  "policy": "--policy", "attention_dp_timeout_iters": "--attention-dp-timeout-iters",
                  "attention_dp_batching_wait_iters": "--attention-dp-batching-wait-iters"}


def _deployment(plan: Path | None, decode_profile: Path | None, decode_output: Path | None, prefill,
                scheduling: dict[str, object]):
    """The disaggregated deployment --plan names, with its decode pool's profile; the flags that set one
    instance's schedule are refused, since the plan's pools schedule as the file says."""
    from pdplan.latency.calibration.fit import Deployment
    from pdplan.manifest.plan import read_plan
    from pdplan.sim.plan import plan_model

    for flag, value in (("--plan", plan), ("--decode-profile", decode_profile), ("--decode-output", decode_output)):
        if value is None:
            raise PdplanError(f"{flag} is missing: a disaggregated deployment is calibrated with --plan, "
                              "--decode-profile and --decode-output together", field=flag.lstrip("-").replace("-", "_"))
    for flag, value in scheduling.items():
        if value is not None:
            raise PdplanError(f"{flag} sets one instance's schedule; with --plan each pool schedules as the plan "
                              "file says", field=flag.lstrip("-").replace("-", "_"))
    the_plan, _ = read_plan(plan)
    return Deployment.of(the_plan, plan_model(the_plan), prefill, load_profile(decode_profile), file=str(plan))


@app.command("calibrate")
def calibrate(
    profile_file: Annotated[Path, typer.Argument(metavar="PROFILE", help="The profile YAML to correct.",
                                                 show_default=False)],
    bench: Annotated[list[Path], typer.Option(
        "--bench", help="A saved serving-benchmark result of one instance of this shape; repeat it for a "
                        "sweep, or give a file the tool appended several runs to (runs at two or more "
                        "concurrencies separate the decode scale from the fixed iteration cost, runs at two "
                        "or more prompt lengths the prefill scale from the cost of an iteration with prompt "
                        "work).", show_default=False)],
    format: Annotated[str, typer.Option(
        "--format", help="vllm-bench (vllm bench serve --save-result, per-request with --save-detailed), "
                         "sglang-bench (python -m sglang.bench_serving --output-file, per-request with "
                         "--output-details), genai-perf (profile_export_genai_perf.json) or aiperf "
                         "(profile_export_aiperf.json).")
    ] = "vllm-bench",
    policy: Annotated[Policy, choice(
        "--policy", Policy, help="How the benchmarked engine batches: chunked (vLLM, TensorRT-LLM) or "
                                 "prefill-first (SGLang).")] = Policy.CHUNKED,
    chunk: Annotated[int, typer.Option("--chunk", help="Tokens per iteration (chunked) or per prefill batch "
                                                       "(prefill-first), the engine's max_num_batched_tokens.")] = 8192,
    output: Annotated[Path, typer.Option("-o", "--output", help="Calibrated profile YAML to write (atomically).",
                                         show_default=False)] = ...,
    recv_interval: Annotated[int | None, typer.Option(
        "--recv-interval", help="The SGLang server's --scheduler-recv-interval, when it was above 1 (with "
                                "--policy prefill-first or chunked).", show_default=False)] = None,
    batch_wait_iters: Annotated[int | None, typer.Option(
        "--batch-wait-timeout-iters", help="The TensorRT-LLM server's batch_wait_timeout_iters, with "
                                           "--batch-wait-max-tokens-ratio (--policy chunked).",
        show_default=False)] = None,
    batch_wait_ratio: Annotated[float | None, typer.Option(
        "--batch-wait-max-tokens-ratio", help="The TensorRT-LLM server's batch_wait_max_tokens_ratio of --chunk.",
        show_default=False)] = None,
    adp_timeout: Annotated[int | None, typer.Option(
        "--attention-dp-timeout-iters", help="The TensorRT-LLM server's attention_dp_config timeout_iters, when "
                                             "it ran attention DP with enable_balance (a profile of one rank of "
                                             "several, --policy chunked), with --attention-dp-batching-wait-iters.",
        show_default=False)] = None,
    adp_batching: Annotated[int | None, typer.Option(
        "--attention-dp-batching-wait-iters", help="The TensorRT-LLM server's attention_dp_config "
                                                   "batching_wait_iters.", show_default=False)] = None,
    speculative: SpeculativeOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_cost: DraftCostOpt = None,
    plan: Annotated[Path | None, typer.Option(
        "--plan", help="The plan file (or manifest) of a disaggregated deployment the benchmark ran end to end "
                       "(its router, KV link and pools, each scheduled as the file says): PROFILE is then its "
                       "prefill pool's profile and --decode-profile its decode pool's, both corrected.",
        show_default=False)] = None,
    decode_profile: Annotated[Path | None, typer.Option(
        "--decode-profile", help="With --plan: the decode pool's profile YAML.", show_default=False)] = None,
    decode_output: Annotated[Path | None, typer.Option(
        "--decode-output", help="With --plan: the calibrated decode profile YAML to write (atomically).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the factors and errors as JSON.")] = False,
) -> None:
    """Correct a profile from a real benchmark run: replay the same load in the simulator and fit a
    prefill scale, a decode scale, a fixed per-iteration cost and a fixed cost per iteration with prompt
    work (an eager prefill's launches) so the simulated TTFT and TPOT match. With --plan the benchmark
    ran a whole disaggregated deployment, and both its profiles are corrected.

    The written profile's provenance holds the factors and the error before and after. The load is
    replayed as the server scheduled it: SGLang's receive interval, TensorRT-LLM's batch waiting and
    its attention-DP balance with their flags, and speculative decoding with --speculative and its
    flags (the written profile stays the plain decode step, to be planned with the same flags).
    """
    from pdplan.latency.calibration.bench import FORMATS, read_bench
    from pdplan.latency.calibration.fit import EngineBatching, calibrated_profile
    from pdplan.latency.calibration.fit import calibrate as fit

    if format not in FORMATS:
        raise PdplanError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}", field="format")
    within("--chunk", chunk, 1, limits.MAX_KV_TOKENS)
    drafting = speculative_from_options(speculative, draft_tokens, acceptance, draft_cost)
    base = load_profile(profile_file)
    deployment = None
    if (plan, decode_profile, decode_output) != (None, None, None):
        deployment = _deployment(plan, decode_profile, decode_output, base, {
            "--recv-interval": recv_interval, "--batch-wait-timeout-iters": batch_wait_iters,
            "--batch-wait-max-tokens-ratio": batch_wait_ratio, "--attention-dp-timeout-iters": adp_timeout,
            "--attention-dp-batching-wait-iters": adp_batching, "--speculative": speculative})
    models = set() if deployment is None else {model_file(pool.model) for pool in deployment.plan.pools} - {None}
    outputs = Outputs(profile_file, *bench, *(p for p in (plan, decode_profile) if p is not None), *sorted(models))
    outputs.claim(output, "--output")
    if decode_output is not None:
        outputs.claim(decode_output, "--decode-output")
    runs = [run for path in bench for run in read_bench(path, format)]
    if len(runs) > limits.MAX_BENCH_RUNS:
        raise PdplanError(f"--bench gives {len(runs)} runs in all, more than the {limits.MAX_BENCH_RUNS} a "
                          "calibration replays", field="bench")
    if drafting is not None and drafting.draft_cost is None:  # MTP: one layer of the profile's model
        drafting = drafting.resolved(get_model(base.model).layers)
    schedule = EngineBatching(policy=policy, tokens=chunk, speculative=drafting, recv_interval=recv_interval,
                              batch_wait_timeout_iters=batch_wait_iters, batch_wait_max_tokens_ratio=batch_wait_ratio,
                              attention_dp_timeout_iters=adp_timeout, attention_dp_batching_wait_iters=adp_batching)
    try:
        schedule.pool(base)
    except PdplanError as err:  # the pool's rules, named by the flags that set them
        flag = SCHEDULE_FLAGS.get(err.field or "", err.field)
        raise PdplanError(f"{flag}: {err.detail.split(': ', 1)[-1]}", field=flag) from None
    with stderr.status("replaying the benchmark load", spinner="dots") if stderr.is_terminal and not as_json \
            else nullcontext():
        result = fit(base, runs, schedule, deployment=deployment)
    calibrated = calibrated_profile(base, runs, result, deployment or schedule)
    outputs.put(output, profile_yaml(calibrated))
    if deployment is not None:
        outputs.put(decode_output, profile_yaml(calibrated_profile(deployment.decode, runs, result, deployment)))
    outputs.commit()
    doc = {"profile": output.as_posix(),
           **({} if deployment is None else {"decode_profile": decode_output.as_posix()}),
           "prefill_scale": round(result.prefill_scale, 6),
           "decode_scale": round(result.decode_scale, 6), "iteration_ms": round(result.iteration_s * 1e3, 6),
           "prompt_iteration_ms": round(result.prompt_iteration_s * 1e3, 6),
           "undetermined": list(result.undetermined), "simulations": result.evaluations * len(runs),
           "error_before": {k: round(v, 6) for k, v in result.before.items()},
           "error_after": {k: round(v, 6) for k, v in result.after.items()}}
    if as_json:
        print_json(doc)
        return
    what = f"{base.shape}" if deployment is None else f"{base.shape} and {deployment.decode.shape}"
    wrote = f"{output}" if deployment is None else f"{output} and {decode_output}"
    table = Table(title=f"Calibrated {what} against {len(runs)} {format} run(s), wrote {wrote}",
                  title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("statistic", "error before", "error after"):
        table.add_column(name, justify="right")
    for key in result.before:
        table.add_row(key, f"{result.before[key]:+.1%}", f"{result.after[key]:+.1%}")
    stdout.print(table)
    stdout.print(calibrated.provenance.method, markup=False, highlight=False)
    if result.undetermined:
        stdout.print(f"Not separately determined by these runs: {', '.join(result.undetermined)}; add runs at "
                     "other concurrencies and prompt lengths to separate them.", markup=False, highlight=False)
