"""Options several commands share (SLO, profiles, trace, search), and turning them into inputs."""

from __future__ import annotations

import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Iterable

import typer

from pdplan import limits
from pdplan.cli.output import stderr
from pdplan.errors import PdplanError
from pdplan.experts import all_to_all_rejection
from pdplan.goodput import SearchSettings
from pdplan.latency.profile import (
    PhaseProfile,
    load_profile,
    load_profiles,
    profile_files,
    shipped_profiles,
    shipped_profiles_dir,
)
from pdplan.latency.source import ProfileSource
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.shape import wide_ep
from pdplan.sim.plan import unmatched_profiles
from pdplan.slo import DEFAULT_TPOT_S, DEFAULT_TTFT_S, SLO, load_slo, parse_threshold_s, slo_from_flags
from pdplan.vocabulary import AllToAll, Arrivals, MoeActivations, Router, SpeculativeMethod
from pdplan.workload import FORMATS, Workload, load_trace, spread_over_grid


def choice(flag: str, words: Iterable[StrEnum], *, sort: bool = True, **option) -> typer.models.OptionInfo:
    """A flag taking one word of a vocabulary set: the member is what the command receives, and
    any other word is refused as ``FLAG must be one of …, got …`` (the words sorted, unless not ``sort``)."""
    words = tuple(words)
    listed = sorted(words) if sort else words

    def parse(value: str) -> StrEnum:
        for word in words:
            if value == word:
                return word
        raise PdplanError(f"{flag} must be one of {', '.join(listed)}, got {value!r}",
                          field=flag.lstrip("-").replace("-", "_"))

    # The help text names the words; a placeholder listing them too widened every command's
    # option column (``<auto|disaggregated|colocated>``) and squeezed the help beside it.
    return typer.Option(flag, parser=parse, metavar="<str>", **option)


#: What --model takes, as modelref.get_model reads it.
MODEL_HELP = ("A catalog model's name (at a precision: deepseek-v3@bf16), a model YAML, a Hugging Face config.json "
              "or its folder, or a Hugging Face repository id (a catalog model's, one downloaded in the hub's "
              "cache, or one whose config AIConfigurator ships: nvidia/DeepSeek-V3.1-NVFP4).")
TraceArg = Annotated[Path, typer.Argument(help="Trace file (native CSV, Azure CSV, Mooncake JSONL, "
                                               "BurstGPT CSV or a lengths-only CSV; a regular file of at most "
                                               "4 GiB).", show_default=False)]
RouterOpt = Annotated[Router | None, choice(
    "--router", Router, help="How arrivals pick a prefill instance: least-loaded (fewest pending prompt tokens), "
                             "round-robin, or cache-aware (pending tokens plus the prompt its prefix cache leaves "
                             "to compute; needs a trace with prefix hashes). Default: least-loaded, or the plan's.",
    show_default=False)]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help=f"Trace format, one of {', '.join(FORMATS)}; detected from the header if omitted.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for every random draw; recorded in the output.")]
TtftOpt = Annotated[str | None, typer.Option(
    "--ttft", help="TTFT threshold: 2s, 500ms, or plain seconds (a plain number over 60 is refused as "
                   "likely milliseconds).", show_default=False)]
TpotOpt = Annotated[str | None, typer.Option(
    "--tpot", help="TPOT threshold: 0.05, 50ms or 0.05s (a plain number over 5 is refused as likely "
                   "milliseconds).", show_default=False)]
AttainmentOpt = Annotated[float, typer.Option(
    "--attainment", help="Share of requests that must meet each threshold (e.g. 0.9 = p90).")]
SloFileOpt = Annotated[Path | None, typer.Option(
    "--slo", help="SLO YAML with several objectives (objectives: [{metric, threshold_ms, attainment}]; at "
                  "most 16 MiB); replaces --ttft/--tpot/--attainment.")]
ProfilesOpt = Annotated[Path | None, typer.Option(
    "--profiles", help=f"Your measured profile file or folder, added to the shipped ones ({shipped_profiles_dir()}; "
                       "yours win for a shape both have). Shapes without a measured profile are composed from "
                       "measured operators (--engine), else use a roofline.")]
ArrivalsOpt = Annotated[Arrivals, choice(
    "--arrivals", Arrivals, help="How a probe reaches a rate: trace (rescale the trace, burst shape kept) or "
                       "poisson (Poisson arrivals, lengths resampled from the trace).")]
RequestsOpt = Annotated[int, typer.Option("--requests-per-probe", help="Requests simulated at each probed rate.")]
ToleranceOpt = Annotated[float, typer.Option(
    "--tolerance", help="Stop bisecting when the bracket is within this fraction of the rate.")]
AdmissionShareOpt = Annotated[float, typer.Option(
    "--admission-share", help="Share of the TTFT threshold a decode instance's admission wait may use "
                              "when phases are judged alone; prefill keeps the rest (0: prefill is "
                              "judged on the whole TTFT and decode on TPOT, as DistServe does).")]

DpOpt = Annotated[int, typer.Option(
    "--dp", help="Attention data-parallel ranks of a mixture-of-experts instance: TP x DP GPUs, by default every "
                 "routed expert whole on one GPU (EP = TP x DP, see --ep; SGLang --attn-dp-size, vLLM "
                 "--data-parallel-size); each rank holds its own batch and KV.")]
EpOpt = Annotated[int | None, typer.Option(
    "--ep", help="Expert-parallel size of a mixture-of-experts instance: the GPUs its routed experts are spread "
                 "over whole (default: TP x DP with --dp, else 1). 1 splits every expert over all TP x DP GPUs, as "
                 "SGLang does without --ep-size and vLLM without --enable-expert-parallel.")]
RedundantExpertsOpt = Annotated[int, typer.Option(
    "--redundant-experts", help="Expert slots beyond the model's routed experts on an instance with attention data "
                                "parallelism (--dp above 1), which EPLB rebalances the expert load over (SGLang "
                                "--ep-num-redundant-experts, vLLM EPLB's num_redundant_experts): EP spreads the "
                                "experts plus these evenly (DeepSeek's 256 + 32 over EP 24, 32, 48, 72 or 144) and "
                                "every GPU holds its share; 0: none.")]
AllToAllOpt = Annotated[AllToAll, choice(
    "--all-to-all", AllToAll, help="How the ranks of --dp reach whole experts (EP = TP x DP): dispatch (DeepEP's "
                                   "all-to-all, TensorRT-LLM's NVLink one on GB200 NVL72) or gather (every rank's "
                                   "tokens on every GPU: SGLang's --moe-a2a-backend none, vLLM's --all2all-backend "
                                   "allgather_reducescatter, TensorRT-LLM's NCCL all-gather elsewhere). optimize "
                                   "gathers SGLang's and vLLM's instances of one host (a GB200 compute tray: 4 "
                                   "GPUs), as their exports run them, "
                                   "and TensorRT-LLM's off an NVLink fabric, as it runs them.")]
DtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", help="Weight precision the model is served at: bf16, fp8, fp4 (NVFP4), mxfp4 (gpt-oss's "
                    "MXFP4) or int4 (Kimi-K2.5's W4A16 experts); default: a Hugging Face config's "
                    "quantization_config, else bf16. Its KV cache follows "
                    "(fp8 for quantized weights) unless --kv-dtype says otherwise. Same as a name suffix: "
                    "llama-3.1-70b@fp8.", show_default=False)]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="KV-cache precision: bf16 or fp8.",
                                                show_default=False)]

EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help="Serving engine: vllm, sglang or trtllm. Its measured operators compose profiles for shapes "
                     "without a measured one (optional extra pdplan\\[aic]; default vLLM's) and its fitted "
                     "efficiencies time rooflines (default the Splitwise 2023 calibration).", show_default=False)]
EngineVersionOpt = Annotated[str | None, typer.Option(
    "--engine-version", help="Engine version of the operator tables; default the newest measured for each GPU.",
    show_default=False)]
MoeActivationsOpt = Annotated[MoeActivations | None, choice(
    "--moe-activations", MoeActivations, help="Precision of MXFP4 experts' activations (gpt-oss): bf16 or mxfp8 "
    "(Blackwell only). Default the engine's own on the GPU: mxfp8 for TensorRT-LLM and SGLang on Blackwell, else "
    "bf16. The exports start the engine so (vLLM: --quantization-config '{\"moe\":{\"activation\":\"mxfp8\"}}').",
    show_default=False)]
ComposeOpt = Annotated[bool, typer.Option(
    "--compose/--no-compose", help="Compose profiles from measured operators where no measured profile "
                                   "exists (else the roofline).")]
SpeculativeOpt = Annotated[SpeculativeMethod | None, choice(
    "--speculative", SpeculativeMethod, help="The deployment runs speculative decoding: mtp (the model's own "
    "multi-token prediction module, DeepSeek-V3 arXiv:2412.19437 section 2.2; the checkpoint must carry one) or "
    "draft (a separate draft model, Leviathan et al. 2023). Decode steps then emit (1 - A^(K+1)) / (1 - A) tokens "
    "each in expectation; needs --acceptance. Off unless given.", show_default=False)]
DraftTokensOpt = Annotated[int | None, typer.Option(
    "--draft-tokens", help="Draft tokens per verify step (K, vLLM's num_speculative_tokens); default 1.",
    show_default=False)]
AcceptanceOpt = Annotated[float | None, typer.Option(
    "--acceptance", help="Probability that each draft token is accepted (A, in [0, 1)), as measured on the "
                         "deployment's traffic; required with --speculative.", show_default=False)]
DraftCostOpt = Annotated[float | None, typer.Option(
    "--draft-cost", help="One draft token's time as a fraction of a decode step of the model; required for a "
                         "draft model; default for MTP 1/L (one extra layer of the model's L).",
    show_default=False)]


def speculative_from_options(method: SpeculativeMethod | None, draft_tokens: int | None, acceptance: float | None,
                             draft_cost: float | None) -> SpeculativeDecoding | None:
    """Speculative decoding from its flags; None when --speculative is not given (and then none of them may be)."""
    if method is None:
        for flag, value in (("--acceptance", acceptance), ("--draft-tokens", draft_tokens),
                            ("--draft-cost", draft_cost)):
            if value is not None:
                raise PdplanError(f"{flag} describes speculative decoding: give --speculative mtp|draft too",
                                  field=flag.lstrip("-").replace("-", "_"))
        return None
    if acceptance is None:
        raise PdplanError("--speculative needs --acceptance: the probability that each draft token is accepted",
                          field="acceptance")
    return SpeculativeDecoding(method=method, acceptance=acceptance, draft_cost=draft_cost,
                               draft_tokens=1 if draft_tokens is None else draft_tokens)


def slo_from_options(ttft: str | None, tpot: str | None, attainment: float, slo_file: Path | None) -> SLO:
    """An SLO file, or the flags (defaults p90 TTFT ≤ 1 s and p90 TPOT ≤ 100 ms)."""
    if slo_file is not None:
        if ttft is not None or tpot is not None:
            raise PdplanError("give either --slo FILE or --ttft/--tpot, not both", field="slo")
        return load_slo(slo_file)
    if ttft is None and tpot is None:
        return slo_from_flags(DEFAULT_TTFT_S, DEFAULT_TPOT_S, attainment)
    return slo_from_flags(None if ttft is None else parse_threshold_s(ttft, "ttft"),
                          None if tpot is None else parse_threshold_s(tpot, "tpot"), attainment)


def measured_profiles(path: Path | None) -> dict[tuple[str, str, int, int], PhaseProfile]:
    """The shipped profiles plus the user's ``--profiles`` (theirs win for a shape both have)."""
    return dict(shipped_profiles()) if path is None else {**shipped_profiles(), **load_profiles(path)}


def profile_notices(path: Path | None, pools) -> list[str]:
    """What to say of the profiles ``--profiles`` gave that time none of ``pools`` though one runs their model, GPU,
    TP and PP (:func:`pdplan.sim.plan.unmatched_profiles`), each named by its file."""
    if path is None:
        return []
    return unmatched_profiles({str(file): load_profile(file) for file in profile_files(path)}, pools)


def profile_source(path: Path | None, engine: str | None = None, engine_version: str | None = None,
                   compose: bool = True, speculative: SpeculativeDecoding | None = None,
                   moe_activations: MoeActivations | None = None) -> ProfileSource:
    """Per shape: the measured profile, else a composed one (its MXFP4 experts at ``moe_activations``, else
    the engine's default), else the roofline; with the deployment's speculative decoding applied to each."""
    return ProfileSource(measured_profiles(path), engine=engine, engine_version=engine_version, compose=compose,
                         speculative=speculative, moe_activations=moe_activations)


def load_workload(trace: Path, format: str | None, seed: int) -> Workload:
    """The trace as it is replayed, refusing one with no requests to plan on: arrival times rounded to
    a grid (Mooncake's 3 s) are spread over their intervals with ``seed``, which a notice says."""
    workload = load_trace(trace, format=format)
    if len(workload) == 0:
        raise PdplanError("trace holds no requests", file=trace)
    workload = spread_over_grid(workload, seed)
    if workload.arrival_grid_s is not None:
        step = workload.arrival_grid_s
        stderr.print(f"notice: {trace}: arrival times lie on a {step:g} s grid (most requests share theirs); each "
                     f"request is replayed at a random point of its {step:g} s interval (seed {seed}), as the "
                     "trace does not say when within it the request came", markup=False, highlight=False)
    return workload


GridOpt = Annotated[int, typer.Option("--grid", help="Extra probes, evenly spaced up to 1.5 × goodput, "
                                                     "to draw the attainment curve a(λ).")]


def search_settings(tolerance: float, requests_per_probe: int, arrivals: Arrivals,
                    grid_points: int = 0) -> SearchSettings:
    """Search settings from flags, with flag names in the errors."""
    if not 0 < tolerance < 1:
        raise PdplanError(f"--tolerance must be in (0, 1), got {tolerance!r}", field="tolerance")
    if requests_per_probe < 2:  # a rate needs two arrivals to be measured
        raise PdplanError(f"--requests-per-probe must be >= 2, got {requests_per_probe!r}",
                          field="requests_per_probe")
    within("--requests-per-probe", requests_per_probe, 2, limits.MAX_REQUESTS_PER_PROBE)
    within("--grid", grid_points, 0, limits.MAX_GRID_POINTS)
    return SearchSettings(tolerance_rel=tolerance, requests_per_probe=requests_per_probe, arrivals=arrivals,
                          grid_points=grid_points)


def within(flag: str, value: float | None, low: float, high: float, *, above: bool = False) -> None:
    """A numeric flag in [low, high] ((low, high] with ``above``); NaN and infinities never are.
    None (a flag not given) passes."""
    if value is None:
        return
    ok = math.isfinite(value) and (value > low if above else value >= low) and value <= high
    if not ok:
        if above:
            rule = f"must be > {_plain(low)} and <= {_plain(high)}"
        else:
            rule = f"must be >= {_plain(low)}" if value < low else f"must be between {_plain(low)} and {_plain(high)}"
        raise PdplanError(f"{flag} {rule}, got {value!r}", field=flag.lstrip("-").replace("-", "_"))


def checked_all_to_all(all_to_all: AllToAll, tp: int, dp: int, ep: int) -> AllToAll:
    """--all-to-all, refused where the instance of --tp, --dp and --ep has no whole experts over every GPU to gather
    tokens for."""
    wrong = all_to_all_rejection(all_to_all, tp, dp, ep)
    if wrong is not None:
        raise PdplanError(f"--all-to-all {all_to_all} with --tp {tp} --dp {dp} --ep {ep}: {wrong}", field="all_to_all")
    return all_to_all


def rank_ep(tp: int, pp: int, dp: int, ep: int | None) -> int:
    """The expert parallelism of --dp/--ep (by default every routed expert whole on one of the TP × DP
    GPUs with --dp, else 1), the pair checked as the engines and optimize take it."""
    within("--dp", dp, 1, limits.MAX_GPUS)
    within("--ep", ep, 1, limits.MAX_GPUS)
    if dp > 1 and pp > 1:
        raise PdplanError(f"--dp {dp} with --pp {pp}: an instance with attention data parallelism is one pipeline "
                          "stage here, as optimize enumerates wide shapes", field="dp")
    return wide_ep(tp, dp) if ep is None else ep


def _plain(number: float) -> str:
    """1000000 as 1,000,000 and 0.5 as 0.5: bounds as people read them."""
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def check_seed(seed: int) -> None:
    """Seeds reach numpy and CP-SAT, whose random seed is a 32-bit integer."""
    if seed < 0:
        raise PdplanError(f"--seed must be >= 0, got {seed!r}", field="seed")
    within("--seed", seed, 0, limits.MAX_SEED)

