"""Phase latency profiles: how long a prefill batch and a decode step take on one instance shape.

A profile belongs to one (model, GPU, TP, PP) shape. Each phase's latency is a
:class:`LatencyModel`: the maximum of a few linear forms over that phase's features, chosen
per batch-size segment. That one form covers every basis pdplan uses:

* DistServe's fits — prefill ``a + b·Σl + c·Σl²``; decode ``a + b·Σctx + c·B`` with a small-
  and a large-batch segment;
* a latency floor plus a polynomial, ``max(floor, a + b·Σl + c·Σl²)``, for measurements that
  flatten at small batches (Splitwise's llama2-70b prefill at TP4/TP8);
* rooflines, ``max(compute, memory) + communication``, for shapes nobody measured.

Prefill features are ``(1, Σl, Σl²)`` over the prompt lengths l of one batch; decode features
are ``(1, B, Σctx)`` for B requests holding Σctx tokens of context. Times are seconds in code
and milliseconds in profile files. A PP > 1 profile gives the latency of one batch through all
stages; the simulator keeps up to PP batches in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml

from pdplan import limits
from pdplan.errors import InternalError, PdplanError
from pdplan.experts import all_to_all_rejection, read_all_to_all, slots_rejection
from pdplan.fileio import atomic_write_text, load_yaml, significant
from pdplan.schema import Fields, shown
from pdplan.shape import ModelShape, shape_key
from pdplan.vocabulary import AllToAll

PREFILL_FEATURES = ("1", "sum_prompt_tokens", "sum_prompt_tokens_sq")
DECODE_FEATURES = ("1", "batch_size", "sum_context_tokens")
FORMAT_VERSION = 1
SOURCES = ("measured", "composed", "calibrated", "roofline")


@dataclass(frozen=True, kw_only=True)
class Segment:
    """Linear forms in force from ``min_batch`` requests upward; the latency is their maximum."""

    min_batch: int
    pieces_s: tuple[tuple[float, float, float], ...]  #: seconds per unit of each feature

    def __post_init__(self):
        if self.min_batch < 1:
            raise InternalError("min_batch must be >= 1")
        if not self.pieces_s or any(len(p) != 3 for p in self.pieces_s):
            raise InternalError("a segment needs at least one piece of three coefficients")
        if not np.all(np.isfinite(self.pieces_s)):
            raise InternalError("coefficients must be finite")


@dataclass(frozen=True, kw_only=True)
class LatencyModel:
    """``t(x) = max_k pieces_k · x`` within the segment whose ``min_batch`` is the largest ≤ B."""

    segments: tuple[Segment, ...]

    def __post_init__(self):
        starts = [s.min_batch for s in self.segments]
        if not starts or starts[0] != 1 or starts != sorted(set(starts)):
            raise InternalError("segments must start at min_batch 1 and increase strictly")

    def segment_for(self, batch: int) -> Segment:
        chosen = self.segments[0]
        for segment in self.segments[1:]:
            if batch >= segment.min_batch:
                chosen = segment
        return chosen

    def evaluate(self, features: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Vectorised latency in seconds; ``features`` has shape (n, 3), ``batch`` shape (n,)."""
        features = np.asarray(features, dtype=float)
        batch = np.asarray(batch)
        out = np.empty(len(features))
        bounds = [s.min_batch for s in self.segments[1:]] + [np.inf]
        for segment, upper in zip(self.segments, bounds):
            mask = (batch >= segment.min_batch) & (batch < upper)
            if mask.any():
                out[mask] = (features[mask] @ np.asarray(segment.pieces_s).T).max(axis=1)
        return out

    def transformed(self, scales: tuple[float, float, float] = (1.0, 1.0, 1.0), plus_s: float = 0.0) -> LatencyModel:
        """Every piece's coefficients scaled feature by feature, then ``plus_s`` seconds added to its
        constant: the model of ``scale · t(x) + plus_s`` when the scales are equal."""
        return LatencyModel(segments=tuple(
            Segment(min_batch=s.min_batch,
                    pieces_s=tuple((p[0] * scales[0] + plus_s, p[1] * scales[1], p[2] * scales[2]) for p in s.pieces_s))
            for s in self.segments))


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a profile's numbers come from and how well its fit holds."""

    #: measured (fitted from points), composed (from measured operators), calibrated (corrected by a
    #: benchmark run) or roofline (derived)
    source: str
    method: str                      #: e.g. "nnls-relative/poly", "nnls-relative/floor+poly"
    file: str | None = None          #: data file the points came from
    sha256: str | None = None
    points_prefill: int = 0
    points_decode: int = 0
    mape_prefill: float | None = None   #: held-out mean absolute percentage error, fraction
    max_error_prefill: float | None = None
    mape_decode: float | None = None
    max_error_decode: float | None = None
    outliers: tuple[str, ...] = ()    #: points excluded from the fit, each with the rule it broke
    notes: str = ""
    #: a calibrated profile's correction: (name, value) pairs — the benchmark file, its format, the
    #: factors and the simulated-vs-measured error before and after
    calibration: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        if self.source not in SOURCES:
            raise InternalError(f"source must be one of {', '.join(SOURCES)}")


@dataclass(frozen=True, kw_only=True)
class PhaseProfile(ModelShape):
    """Latency of both phases, and the memory limits, of one (model, GPU, TP, PP) instance shape."""

    prefill: LatencyModel            #: seconds for one prefill batch over features (1, Σl, Σl²)
    decode: LatencyModel             #: seconds for one decode step over features (1, B, Σctx)
    kv_capacity_tokens: int          #: KV tokens the instance can hold
    max_prefill_batch_tokens: int    #: largest prefill batch, in prompt tokens
    provenance: Provenance
    #: One attention-DP rank's profile: the seconds of its step its MoE layers spend on the whole
    #: instance's tokens (routed experts, or the gather of a tensor-parallel expert layout), as
    #: (instance tokens, seconds) points per phase, linear between them and past the last. The
    #: steps above assume every rank carries the same batch; the simulator replaces their
    #: g(DP × the rank's tokens) by g(the ranks' tokens summed) (:func:`group_s`). Empty: no such part;
    #: ``group_prefill``/``group_decode`` are their latency models, None for no points or one rank.
    group_prefill_points: tuple[tuple[int, float], ...] = ()
    group_decode_points: tuple[tuple[int, float], ...] = ()
    #: Of the prefill model's constant, the seconds a decode step does not already pay: an engine that
    #: runs its prompt iterations eagerly but replays its decode steps as CUDA graphs pays the host's
    #: kernel launches once in every iteration with prompt work. A colocated iteration that mixes
    #: prompt chunks with decodes never counts it in what its decode step shares of the prefill
    #: constant (:func:`pdplan.sim.fast.latency.mixed_iteration_s`). A profile timed from kernels carries
    #: the eager prefill's host time here for a mixture-of-experts model (:mod:`pdplan.latency.eager`).
    prompt_iteration_s: float = 0.0
    #: How one attention-DP rank's tokens reach whole experts (EP = TP × DP): dispatched or gathered, which times
    #: its MoE layers apart, so a profile serves only pools of its own (:func:`pdplan.shape.shape_key`).
    all_to_all: AllToAll = AllToAll.DISPATCH
    #: Expert slots beyond the model's that EPLB rebalances the load over (wide shapes only), which its memory
    #: holds and its MoE layers were timed with; a pool of other slots is timed by another profile.
    redundant_experts: int = 0
    group_prefill: LatencyModel | None = field(init=False, compare=False, repr=False, default=None)
    group_decode: LatencyModel | None = field(init=False, compare=False, repr=False, default=None)

    @property
    def shape(self) -> str:
        """``deepseek-v3@fp8 h200-141gb TP1 DP16 EP16 PP1 +32 slots``: a gathered rank and EPLB's slots said."""
        gathered = " gathered" if self.all_to_all == AllToAll.GATHER else ""
        slots = f" +{self.redundant_experts} slots" if self.redundant_experts else ""
        return f"{super().shape}{gathered}{slots}"

    @property
    def key(self) -> tuple:
        """The profile key of the pools it times (:func:`pdplan.shape.shape_key`): a gathered rank's apart."""
        return shape_key(self.model, self.gpu, self.tp, self.pp, dp=self.dp, ep=self.ep, all_to_all=self.all_to_all)

    def __post_init__(self):
        if self.tp < 1 or self.pp < 1:
            raise InternalError("tp and pp must be >= 1")
        if self.kv_capacity_tokens < 1 or self.max_prefill_batch_tokens < 1:
            raise InternalError("kv_capacity_tokens and max_prefill_batch_tokens must be >= 1")
        if not 0 <= self.prompt_iteration_s < float("inf"):
            raise InternalError("prompt_iteration_s must be finite and >= 0")
        if slots_rejection(self.ep, self.redundant_experts) is not None or all_to_all_rejection(
                self.all_to_all, self.tp, self.dp, self.ep, self.redundant_experts) is not None:
            raise InternalError(f"{self.shape}: {self.all_to_all} with {self.redundant_experts} redundant experts")
        if self.dp > 1:  # one rank alone carries its own tokens: nothing to re-time
            object.__setattr__(self, "group_prefill", group_model(self.group_prefill_points))
            object.__setattr__(self, "group_decode", group_model(self.group_decode_points))

    def prefill_time_s(self, prompt_lengths: Sequence[int], cached: Sequence[int] | None = None) -> float:
        """Seconds for one prefill batch of these prompts; with ``cached``, each prompt's leading
        tokens a prefix cache held: only the rest are computed (l − c tokens), attending to the
        whole prompt (l² − c² causal pairs, as a chunk after c)."""
        lengths = np.asarray(prompt_lengths, dtype=float)
        held = np.zeros_like(lengths) if cached is None else np.asarray(cached, dtype=float)
        x = np.array([[1.0, (lengths - held).sum(), (lengths**2 - held**2).sum()]])
        return float(self.prefill.evaluate(x, np.array([len(lengths)]))[0])

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """Seconds for one decode step of ``batch_size`` requests holding ``context_tokens`` in all."""
        x = np.array([[1.0, float(batch_size), float(context_tokens)]])
        return float(self.decode.evaluate(x, np.array([batch_size]))[0])

    def group_s(self, prefill: bool, tokens: float) -> float:
        """Seconds of a step's MoE layers over ``tokens`` of the whole instance (0 without a group part)."""
        model = self.group_prefill if prefill else self.group_decode
        if model is None:
            return 0.0
        tokens = max(1, int(tokens))
        return float(model.evaluate(np.array([[1.0, float(tokens), 0.0]]), np.array([tokens]))[0])


def with_prompt_iteration(profile: PhaseProfile, seconds: float) -> PhaseProfile:
    """The profile with ``seconds`` more in every prefill batch, recorded as part of the prefill's constant
    only an iteration with prompt work pays (``prompt_iteration_s``); ``-profile.prompt_iteration_s``
    takes that part out again."""
    if not seconds:
        return profile
    return replace(profile, prefill=profile.prefill.transformed(plus_s=seconds),
                   prompt_iteration_s=profile.prompt_iteration_s + seconds)


def iteration_group_s(profile: PhaseProfile, decode_rows: int, prompt_tokens: int) -> float:
    """The group part of an iteration whose MoE layers see ``decode_rows`` decode rows and
    ``prompt_tokens`` prompt tokens, composed as a colocated iteration composes its step (a decode
    step plus what the prompt chunks add above the part of an empty prefill batch the decode rows pay
    too, :func:`pdplan.sim.fast.latency.mixed_iteration_s`)."""
    if prompt_tokens == 0:
        return profile.group_s(False, decode_rows) if decode_rows else 0.0
    pre = profile.group_s(True, prompt_tokens)
    if decode_rows == 0:
        return pre
    decode = profile.group_s(False, decode_rows)
    return decode + max(0.0, pre - min(profile.group_s(True, 0), decode))


def group_grid(top_tokens: int) -> list[int]:
    """Where a group part is sampled: 1, 2, 4, ... instance tokens and ``top_tokens``."""
    return sorted({*(2 ** k for k in range(max(1, top_tokens).bit_length())), max(1, top_tokens)})


def group_model(points: Sequence[tuple[int, float]]) -> LatencyModel | None:
    """A group part's points as a latency model over (1, tokens, 0), tokens also choosing the segment:
    the line through each point and the next in force from that point's tokens, the last line on past
    the last point. None for no points."""
    if not points:
        return None
    tokens = [int(t) for t, _ in points]
    seconds = [float(v) for _, v in points]
    if tokens[0] != 1 or any(b <= a for a, b in zip(tokens, tokens[1:])):
        raise InternalError("group points must start at 1 token and increase strictly")
    if len(points) == 1:
        return LatencyModel(segments=(Segment(min_batch=1, pieces_s=((seconds[0], 0.0, 0.0),)),))
    segments = []
    for k in range(len(points) - 1):
        slope = (seconds[k + 1] - seconds[k]) / (tokens[k + 1] - tokens[k])
        segments.append(Segment(min_batch=tokens[k], pieces_s=((seconds[k] - slope * tokens[k], slope, 0.0),)))
    return LatencyModel(segments=tuple(segments))


# --- files ---------------------------------------------------------------------------------------

def _model_to_dict(model: LatencyModel, features: tuple[str, ...]) -> dict:
    return {
        "features": list(features),
        "segments": [{"min_batch": s.min_batch,
                      "pieces_ms": [[significant(c * 1e3) for c in piece] for piece in s.pieces_s]}
                     for s in model.segments],
    }


def profile_to_dict(profile: PhaseProfile) -> dict:
    """The profile file's content (milliseconds, as people read them). Coefficients and errors are
    rounded to ``WRITTEN_DIGITS`` significant digits, so a refit on another machine writes the
    same bytes."""
    prov = profile.provenance
    return {
        "pdplan_profile": FORMAT_VERSION,
        "model": profile.model,
        "gpu": profile.gpu,
        "tp": profile.tp,
        "pp": profile.pp,
        # One attention data-parallel rank's profile names its instance's DP and EP; written only above 1,
        # so every TP x PP profile file reads as it always has.
        **({"dp": profile.dp} if profile.dp > 1 else {}),
        **({"ep": profile.ep} if profile.ep > 1 else {}),
        # a gathered rank and EPLB's slots likewise, written only when they are not the default
        **({"all_to_all": str(profile.all_to_all)} if profile.all_to_all != AllToAll.DISPATCH else {}),
        **({"redundant_experts": profile.redundant_experts} if profile.redundant_experts else {}),
        "kv_capacity_tokens": profile.kv_capacity_tokens,
        "max_prefill_batch_tokens": profile.max_prefill_batch_tokens,
        "prefill": _model_to_dict(profile.prefill, PREFILL_FEATURES),
        "decode": _model_to_dict(profile.decode, DECODE_FEATURES),
        # written only when set, so every profile without it reads as it always has
        **({"prompt_iteration_ms": significant(profile.prompt_iteration_s * 1e3)}
           if profile.prompt_iteration_s else {}),
        **({"group": {phase: [[t, significant(v * 1e3)] for t, v in points]
                      for phase, points in (("prefill", profile.group_prefill_points),
                                            ("decode", profile.group_decode_points)) if points}}
           if profile.group_prefill_points or profile.group_decode_points else {}),
        "provenance": {
            "source": prov.source, "method": prov.method, "file": prov.file, "sha256": prov.sha256,
            "points_prefill": prov.points_prefill, "points_decode": prov.points_decode,
            "mape_prefill": significant(prov.mape_prefill), "max_error_prefill": significant(prov.max_error_prefill),
            "mape_decode": significant(prov.mape_decode), "max_error_decode": significant(prov.max_error_decode),
            "outliers": list(prov.outliers), "notes": prov.notes,
            **({"calibration": {k: significant(v) if isinstance(v, float) else v for k, v in prov.calibration}}
               if prov.calibration else {}),
        },
    }


class _FlowList(list):
    """A list YAML writes on one line, ``[a, b, c]``: coefficient triples and feature names."""


class _ProfileDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that writes :class:`_FlowList` in flow style."""


_ProfileDumper.add_representer(
    _FlowList, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data,
                                                              flow_style=True))


def _flow_leaves(value):
    """Mark lists of numbers (and of short names) for flow style; recurse into the rest."""
    if isinstance(value, dict):
        return {k: _flow_leaves(v) for k, v in value.items()}
    if isinstance(value, list):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        names = all(isinstance(v, str) and len(v) <= 32 for v in value)
        if value and (numbers or names):
            return _FlowList(value)
        return [_flow_leaves(v) for v in value]
    return value


def profile_yaml(profile: PhaseProfile) -> str:
    """The profile file's text: :func:`profile_to_dict` with each coefficient triple on one line."""
    return yaml.dump(_flow_leaves(profile_to_dict(profile)), Dumper=_ProfileDumper,
                     sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def save_profile(profile: PhaseProfile, path: str | Path) -> None:
    """Write a profile YAML atomically."""
    atomic_write_text(path, profile_yaml(profile))


def _model_from_fields(spec: Fields, features: tuple[str, ...]) -> LatencyModel:
    stated = spec.require("features")
    if stated != list(features):
        raise spec.fail("features", f"must be {list(features)}", stated)
    segments, previous = [], 0
    for seg in spec.items("segments"):
        seg.reject_unknown({"min_batch", "pieces_ms"})
        start = seg.integer("min_batch", minimum=max(1, previous + 1), maximum=limits.MAX_KV_TOKENS)
        if not segments and start != 1:
            raise seg.fail("min_batch", "of the first segment must be 1", start)
        pieces = seg.require("pieces_ms")
        if (not isinstance(pieces, list) or not pieces
                or any(not isinstance(p, list) or len(p) != 3 for p in pieces)):
            raise seg.fail("pieces_ms", "must be a non-empty list of [c0, c1, c2] triples", pieces)
        for piece in pieces:
            for c in piece:
                if isinstance(c, bool) or not isinstance(c, (int, float)) or not abs(c) <= limits.MAX_LATENCY_MS:
                    raise seg.fail("pieces_ms",
                                   f"coefficients must be finite numbers within ±{limits.MAX_LATENCY_MS:g}",
                                   shown(c))
        segments.append(Segment(min_batch=start,
                                pieces_s=tuple(tuple(float(c) / 1e3 for c in p) for p in pieces)))
        previous = start
    return LatencyModel(segments=tuple(segments))


def _optional_number(spec: Fields, key: str) -> float | None:
    return None if spec.data.get(key) is None else spec.number(key, minimum=0)


def load_profile(path: str | Path) -> PhaseProfile:
    """Read and validate one profile YAML."""
    return profile_from_dict(load_yaml(path, what="profile"), path)


def profile_from_dict(data, source: str | Path) -> PhaseProfile:
    """Validate a profile's content (as :func:`profile_to_dict` writes it); errors name ``source``."""
    spec = Fields(data, source)
    spec.reject_unknown({"pdplan_profile", "model", "gpu", "tp", "pp", "dp", "ep", "all_to_all", "redundant_experts",
                         "kv_capacity_tokens",
                         "max_prefill_batch_tokens", "prefill", "decode", "prompt_iteration_ms", "group",
                         "provenance"})
    spec.integer("pdplan_profile", minimum=FORMAT_VERSION, maximum=FORMAT_VERSION)
    prov = spec.mapping("provenance")
    outliers = prov.data.get("outliers") or []
    if not isinstance(outliers, list):
        raise prov.fail("outliers", "must be a list", outliers)
    prefill = _model_from_fields(spec.mapping("prefill"), PREFILL_FEATURES)
    decode = _model_from_fields(spec.mapping("decode"), DECODE_FEATURES)
    for name, model, smallest in (("prefill", prefill, [1.0, 1.0, 1.0]), ("decode", decode, [1.0, 1.0, 1.0])):
        # Pieces may be negative inside the max (a fitted floor covers them), but the latency of
        # the smallest batch (one token, one request) must be positive, and so then is every larger one
        # when the slopes are non-negative.
        latency = float(model.evaluate(np.array([smallest]), np.array([1]))[0])
        if not latency > 0:
            raise spec.fail(name, f"gives {latency * 1e3:g} ms for one request of one token; latencies "
                            "must be positive", show_value=False)
    model_name, gpu = spec.string("model"), spec.string("gpu")
    tp = spec.integer("tp", minimum=1, maximum=limits.MAX_GPUS_PER_INSTANCE_STAGE)
    pp = spec.integer("pp", minimum=1, maximum=limits.MAX_PIPELINE_STAGES)
    dp = spec.integer("dp", 1, minimum=1, maximum=limits.MAX_GPUS)
    ep = spec.integer("ep", 1, minimum=1, maximum=limits.MAX_GPUS)
    slots = spec.integer("redundant_experts", 0, minimum=0, maximum=limits.MAX_GPUS)
    wrong = slots_rejection(ep, slots)
    if wrong is not None:
        raise spec.fail("redundant_experts", f"is wrong: {wrong}", show_value=False)
    profile = PhaseProfile(
        model=model_name, gpu=gpu, tp=tp, pp=pp, dp=dp, ep=ep,
        all_to_all=read_all_to_all(spec, tp, dp, ep, slots), redundant_experts=slots,
        kv_capacity_tokens=spec.integer("kv_capacity_tokens", minimum=1, maximum=limits.MAX_KV_TOKENS),
        max_prefill_batch_tokens=spec.integer("max_prefill_batch_tokens", minimum=1, maximum=limits.MAX_KV_TOKENS),
        prefill=prefill,
        decode=decode,
        prompt_iteration_s=_prompt_iteration_s(spec, prefill),
        **_group_points(spec),
        provenance=Provenance(
            source=prov.string("source", choices=list(SOURCES)),
            method=prov.string("method"),
            file=prov.data.get("file"),
            sha256=prov.data.get("sha256"),
            points_prefill=prov.integer("points_prefill", 0, minimum=0),
            points_decode=prov.integer("points_decode", 0, minimum=0),
            mape_prefill=_optional_number(prov, "mape_prefill"),
            max_error_prefill=_optional_number(prov, "max_error_prefill"),
            mape_decode=_optional_number(prov, "mape_decode"),
            max_error_decode=_optional_number(prov, "max_error_decode"),
            outliers=tuple(str(o) for o in outliers),
            notes=str(prov.data.get("notes") or ""),
            calibration=_calibration(prov),
        ),
    )
    _check_group(spec, profile)
    return profile


def _prompt_iteration_s(spec: Fields, prefill: LatencyModel) -> float:
    """The part of the prefill constant a decode step does not pay: at most the prefill of one token."""
    if spec.data.get("prompt_iteration_ms") is None:
        return 0.0
    ms = spec.number("prompt_iteration_ms", minimum=0, maximum=limits.MAX_LATENCY_MS)
    one = float(prefill.evaluate(np.array([[1.0, 1.0, 1.0]]), np.array([1]))[0]) * 1e3
    if ms > one:
        raise spec.fail("prompt_iteration_ms", f"is part of the prefill's constant: at most the {one:g} ms "
                        "a prefill of one token takes", ms)
    return ms / 1e3


def _check_group(spec: Fields, profile: PhaseProfile) -> None:
    """A group part is a share of the step it belongs to: at one request (one token) per rank, and at a
    full prefill batch per rank, it may not exceed that step."""
    cap = profile.max_prefill_batch_tokens
    for phase, full, tokens in (("decode", profile.decode_step_s(1, 1), 1),
                                ("prefill", profile.prefill_time_s([1]), 1),
                                ("prefill", profile.prefill_time_s([cap]), cap)):
        share = profile.group_s(phase == "prefill", profile.dp * tokens)
        if share > full:
            raise spec.fail("group", f"{phase} part at DP {profile.dp} × {tokens} tokens is {share * 1e3:g} ms, more "
                            f"than the {full * 1e3:g} ms step it is part of", show_value=False)


def _group_points(spec: Fields) -> dict:
    """A DP rank's group part: per phase, [instance tokens, ms] points from 1 token on, tokens increasing."""
    if spec.data.get("group") is None:
        return {}
    group = spec.mapping("group")
    group.reject_unknown({"prefill", "decode"})
    found = {}
    for phase in ("prefill", "decode"):
        points = group.data.get(phase)
        if points is None:
            continue
        rule = "must be [tokens, ms] points from 1 token on, tokens increasing, ms finite and >= 0"
        if (not isinstance(points, list) or not points
                or any(not isinstance(q, list) or len(q) != 2 for q in points)):
            raise group.fail(phase, rule, points)
        tokens = [q[0] for q in points]
        values = [q[1] for q in points]
        if (any(isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= limits.MAX_KV_TOKENS * 1024
                for t in tokens) or tokens[0] != 1 or any(b <= a for a, b in zip(tokens, tokens[1:]))
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= limits.MAX_LATENCY_MS
                       for v in values)):
            raise group.fail(phase, rule, points)
        found[f"group_{phase}_points"] = tuple((int(t), float(v) / 1e3) for t, v in points)
    return found


def _calibration(prov: Fields) -> tuple[tuple[str, object], ...]:
    """A calibrated profile's record: a mapping of names to numbers or text."""
    if prov.data.get("calibration") is None:
        return ()
    record = prov.mapping("calibration")
    pairs = []
    for key, value in record.data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise record.fail(str(key), "must be a number or text", value)
        pairs.append((str(key), float(value) if isinstance(value, (int, float)) else value))
    return tuple(pairs)


def profile_files(path: str | Path) -> list[Path]:
    """The profile files at ``path``: the file itself, or a folder's ``*.yaml`` sorted by name."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.yaml"))
        if not files:
            raise PdplanError("no profile files (*.yaml) in folder", file=path)
        return files
    return [path]


def profile_inputs(profiles: Path | None) -> tuple[Path, ...]:
    """``--profiles`` as a command's inputs: the file, or the folder and every profile in it (an
    output inside the folder would replace a profile, or be read as one next time)."""
    if profiles is None:
        return ()
    return (profiles, *profile_files(profiles)) if profiles.is_dir() else (profiles,)


def profile_file_name(profile: PhaseProfile) -> str:
    """The conventional file name of a profile: ``{model}_{gpu}_tp{T}_pp{P}.yaml``."""
    return f"{profile.model}_{profile.gpu}_tp{profile.tp}_pp{profile.pp}.yaml"


def load_profiles(path: str | Path) -> dict[tuple[str, str, int, int], PhaseProfile]:
    """Every profile in a file or a folder (``*.yaml``), keyed by (model, gpu, tp, pp)."""
    profiles: dict[tuple[str, str, int, int], PhaseProfile] = {}
    for file in profile_files(path):
        profile = load_profile(file)
        if profile.key in profiles:
            raise PdplanError(f"second profile for {profile.shape}", file=file, field="model")
        profiles[profile.key] = profile
    return profiles


def shipped_profiles_dir() -> Path:
    """The profiles fitted from real measurements that ship with pdplan (also at ./profiles)."""
    return Path(str(resources.files("pdplan") / "data" / "profiles"))


@cache
def shipped_profiles() -> dict[tuple[str, str, int, int], PhaseProfile]:
    """The shipped profiles, loaded once."""
    return load_profiles(shipped_profiles_dir())
