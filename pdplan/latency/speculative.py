"""Speculative decoding: a decode step that emits, in expectation, more than one token per request.

A deployment that runs speculative decoding drafts ``k`` tokens per request cheaply — with the
model's own multi-token prediction module (MTP: DeepSeek-V3, arXiv:2412.19437, section 2.2) or a
separate small draft model (Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via
Speculative Decoding") — and verifies them in one step of the target model. pdplan takes the
acceptance rate as stated (α: the probability that each draft token is accepted, independently)
and turns decode steps into tokens: :func:`expected_tokens` per verify step, at the cost
:meth:`SpeculativeDecoding.apply` gives the profile's decode model. Off unless asked.

The transform, per piece ``(a, b, c)`` of the decode model over features ``(1, B, Σctx)``:

* the verify step runs ``k + 1`` rows per request through the weights: the per-request term ``b``
  (GEMM rows) scales by ``k + 1``; the weights (``a``) and the KV cache (``c``) are read once;
* drafting adds ``k`` draft tokens, each ``r`` (``draft_cost``) of a plain step ``(a, b, c)``;
* one verify step emits ``E`` tokens per request in expectation, so the time per emitted token is

      ((1 + k·r)·a,  ((k + 1) + k·r)·b,  (1 + k·r)·c) / E.

The simulator keeps emitting one token per request per step, so TPOT, throughput and batch
occupancy are right in expectation. Not simulated: the variance of accepted tokens, the transient
KV of rejected drafts, the draft's weights and KV in memory, the extra attention FLOPs of ``k + 1``
query rows (``c`` counts the KV read, which dominates decode attention), and the draft's share of
prefill. In a chunked iteration that carries prefill chunks, the chunk rides along each emitted
token rather than each verify step: total work is the same, decode rows see the chunk's cost per
token rather than per ``E`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdplan.errors import InternalError, PdplanError
from pdplan.latency.profile import PhaseProfile
from pdplan.schema import Fields
from pdplan.vocabulary import SpeculativeMethod

#: Most draft tokens per verify step pdplan takes: a bound on input, not an engine's. Deployments
#: draft a few (SGLang 0.5.23 defaults DeepSeek-V3's MTP to 3 steps, python/sglang/srt/arg_groups/
#: speculative_hook.py), and beyond 16 a draft token adds at most α^17 < 0.2 of a token at α = 0.9.
MAX_DRAFT_TOKENS = 16


def expected_tokens(acceptance: float, draft_tokens: int) -> float:
    """Expected tokens one verify step emits per request, E = (1 − α^(k+1)) / (1 − α).

    Leviathan, Kalman, Matias 2023, "Fast Inference from Transformers via Speculative Decoding"
    (arXiv:2211.17192), equation (1): with each of ``k`` draft tokens accepted independently with
    probability α, the step emits the accepted prefix plus one token of the target model's own
    (the correction of the first rejected draft, or one more after all are accepted).
    """
    return (1.0 - acceptance ** (draft_tokens + 1)) / (1.0 - acceptance)


def mtp_draft_cost(layers: int) -> float:
    """One MTP draft token as a fraction of a decode step: one extra transformer layer of the
    model's L, 1/L (DeepSeek-V3 predicts one extra token with one MTP module, arXiv:2412.19437
    section 2.2). AIConfigurator times MTP the same way: ``mtp_scale_factor(nextn, num_layers) =
    (nextn + num_layers) / num_layers`` (aiconfigurator_core 0.12.0, sdk/models/helpers.py), a
    decode iteration evaluating ``num_layers + nextn`` layers' worth of work."""
    return 1 / layers


@dataclass(frozen=True, kw_only=True)
class SpeculativeDecoding:
    """Speculative decoding as a deployment runs it: where drafts come from, how many, how often
    each is accepted and what one costs."""

    method: SpeculativeMethod
    acceptance: float                 #: α in [0, 1): each draft token's probability of acceptance
    draft_tokens: int = 1             #: k >= 1 draft tokens per verify step
    #: one draft token's time as a fraction of a plain decode step; None: MTP's 1/L (:func:`mtp_draft_cost`)
    draft_cost: float | None = None

    def __post_init__(self):
        if self.method not in tuple(SpeculativeMethod):
            raise PdplanError(f"--speculative must be one of {', '.join(SpeculativeMethod)}, got {self.method!r}",
                              field="speculative")
        if isinstance(self.draft_tokens, bool) or not isinstance(self.draft_tokens, int) \
                or not 1 <= self.draft_tokens <= MAX_DRAFT_TOKENS:
            raise PdplanError(f"--draft-tokens must be between 1 and {MAX_DRAFT_TOKENS}, got {self.draft_tokens!r}",
                              field="draft_tokens")
        if not 0 <= self.acceptance < 1:  # NaN fails too
            raise PdplanError(f"--acceptance must be in [0, 1): the probability that a draft token is accepted, "
                              f"got {self.acceptance!r}", field="acceptance")
        if self.draft_cost is None:
            if self.method == SpeculativeMethod.DRAFT:
                raise PdplanError("--draft-cost is required with --speculative draft: the draft model's step "
                                  "time as a fraction of the target model's", field="draft_cost")
        elif not 0 <= self.draft_cost <= 1:
            raise PdplanError(f"--draft-cost must be between 0 and 1 (a fraction of a decode step), "
                              f"got {self.draft_cost!r}", field="draft_cost")

    @property
    def expected_tokens(self) -> float:
        """E: tokens one verify step emits per request, in expectation (:func:`expected_tokens`)."""
        return expected_tokens(self.acceptance, self.draft_tokens)

    def resolved(self, layers: int) -> SpeculativeDecoding:
        """The same, with MTP's default draft cost filled in for a model of ``layers`` layers."""
        if self.draft_cost is not None:
            return self
        return replace(self, draft_cost=mtp_draft_cost(layers))

    def factors(self) -> tuple[float, float, float]:
        """What each decode coefficient (a, b, c) is multiplied by: verify plus drafts, per emitted token."""
        if self.draft_cost is None:
            raise InternalError("MTP's draft cost needs the model's layer count: resolve it first")
        k, r, e = self.draft_tokens, self.draft_cost, self.expected_tokens
        return (1 + k * r) / e, ((k + 1) + k * r) / e, (1 + k * r) / e

    def apply(self, profile: PhaseProfile) -> PhaseProfile:
        """``profile`` with its decode model turned into the time per emitted token (prefill as it
        was); its provenance notes say what was applied, with the numbers. A DP rank's decode group part
        (:meth:`PhaseProfile.group_s`) is dropped: a verify step's MoE tokens are not its rows, so its
        ranks are timed as if each carried the slowest one's batch."""
        decode = profile.decode.transformed(self.factors())
        dropped = ("decode steps time each DP rank as if it carried the slowest rank's batch (the MoE layers' "
                   "share over the ranks' own tokens is dropped under speculative decoding)"
                   if profile.group_decode_points else "")
        notes = "; ".join(n for n in (profile.provenance.notes, self.describe(), dropped) if n)
        return replace(profile, decode=decode, group_decode_points=(),
                       provenance=replace(profile.provenance, notes=notes))

    def describe(self) -> str:
        """One line: the method, its numbers and what they make of a decode step."""
        what = "multi-token prediction (MTP)" if self.method == SpeculativeMethod.MTP else "a draft model"
        cost = "1/L" if self.draft_cost is None else f"{self.draft_cost:.4g}"
        tokens = "token" if self.draft_tokens == 1 else "tokens"
        return (f"speculative decoding with {what}: {self.draft_tokens} draft {tokens} per verify step, "
                f"acceptance {self.acceptance:g}, draft cost {cost} of a step, "
                f"{self.expected_tokens:.4g} tokens per verify step (Leviathan et al. 2023); "
                "decode times are per emitted token")

    def to_dict(self) -> dict:
        """As plan files and manifests record it."""
        return {"method": str(self.method), "draft_tokens": self.draft_tokens, "acceptance": self.acceptance,
                "draft_cost": self.draft_cost}


def speculative_from_fields(spec: Fields) -> SpeculativeDecoding:
    """A plan file's or a manifest's record (:meth:`SpeculativeDecoding.to_dict`); errors name its fields."""
    spec.reject_unknown({"method", "draft_tokens", "acceptance", "draft_cost"})
    method = SpeculativeMethod(spec.string("method", choices=list(SpeculativeMethod)))
    acceptance = spec.number("acceptance", minimum=0, maximum=1)
    if acceptance >= 1:
        raise spec.fail("acceptance", "must be below 1 (the probability that a draft token is accepted)", acceptance)
    draft_cost = None
    if spec.data.get("draft_cost") is not None:
        draft_cost = spec.number("draft_cost", minimum=0, maximum=1)
    elif method == SpeculativeMethod.DRAFT:
        raise spec.fail("draft_cost", "is required for a draft model", show_value=False)
    return SpeculativeDecoding(method=method, acceptance=acceptance, draft_cost=draft_cost,
                               draft_tokens=spec.integer("draft_tokens", 1, minimum=1, maximum=MAX_DRAFT_TOKENS))
