"""Where each shape's latency profile comes from: measured, else composed, else roofline.

A plan's shapes are timed by the best evidence there is for each:

1. **measured** — a profile fitted from end-to-end measurements of that very (model, precision,
   GPU, TP, PP) shape (the shipped Splitwise and DistServe fits, or the user's ``--profiles``);
2. **composed** — summed from AIConfigurator's measured operators for the chosen serving engine
   and version (:mod:`pdplan.latency.compose`), when the optional extra ``pdplan[aic]`` is installed and
   it has tables for the GPU;
3. **roofline** — derived from the GPU's datasheet (:mod:`pdplan.latency.roofline`), with the named
   engine's fitted efficiencies, or the Splitwise 2023 calibration when no engine is named.

Every profile records which in ``provenance.source``; when a shape falls back past composition
the reason is kept (:meth:`ProfileSource.fallback_reason`) so the output can say why. A shape with
attention data parallelism or expert parallelism beyond TP (one DP rank's profile) is measured, composed
from the wide-EP tables, else timed by the wide-EP roofline (:mod:`pdplan.latency.wide_roofline`). When the
deployment runs speculative decoding (:mod:`pdplan.latency.speculative`), every profile handed
out, whatever its source, has its decode model turned into the time per emitted token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Mapping

from pdplan.cache import ResultCache, cache_key
from pdplan.engines import DEFAULT_ENGINE, prompt_pages
from pdplan.errors import PdplanError
from pdplan.experts import expert_placement_rejection
from pdplan.hardware import GPU
from pdplan.latency.accuracy import Accuracy, accuracy_for, layout_of
from pdplan.latency.compose import moe, tables
from pdplan.latency.profile import PhaseProfile, profile_from_dict, profile_to_dict
from pdplan.latency.roofline import roofline_profile
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.latency.wide_roofline import wide_roofline_profile
from pdplan.modelspec import ModelSpec
from pdplan.shape import shape_key, shape_label
from pdplan.vocabulary import AllToAll, MoeActivations, SpeculativeMethod


@dataclass(frozen=True)
class ProfileSource:
    """The profile chooser one run uses."""

    measured: Mapping[tuple[str, str, int, int], PhaseProfile] = field(hash=False, compare=False)
    engine: str | None = None           #: None: vLLM's tables compose, the Splitwise 2023 fit rooflines
    engine_version: str | None = None   #: a version the user asked for: missing data is then an error
    compose: bool = True                #: False: skip operator composition (measured, else roofline)
    speculative: SpeculativeDecoding | None = None  #: the deployment's speculative decoding; None: off
    #: The precision MXFP4 experts take their activations in, composed; None: each engine's default on the GPU.
    moe_activations: MoeActivations | None = None
    fallbacks: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if self.engine is not None and self.engine not in tables.ENGINES:
            raise PdplanError(f"unknown engine {self.engine!r} (known: {', '.join(tables.ENGINES)})", field="engine")
        if self.engine_version is not None and not tables.installed():
            raise PdplanError(f"--engine-version selects AIConfigurator's operator tables, which come with the "
                              f"optional extra: {tables.EXTRA}", field="engine_version")

    @property
    def serving_engine(self) -> str:
        """The engine the plan is made for: the one named, else :data:`pdplan.engines.DEFAULT_ENGINE`
        (its tables compose, its capability rules hold)."""
        return self.engine or DEFAULT_ENGINE

    def profile(self, model: ModelSpec, gpu: GPU, tp: int, pp: int, *, gpus_per_node: int | None = None,
                cache: ResultCache | None = None, dp: int = 1, ep: int = 1,
                all_to_all: str = AllToAll.DISPATCH, redundant_experts: int = 0) -> PhaseProfile:
        """The shape's profile (with ``dp`` > 1, one DP rank's); a composed one is kept in ``cache``
        (composing takes about a second), before speculative decoding is applied, so the cached composition
        is the engine's alone. ``gpus_per_node`` (default: the GPU's NVLink domain, 72 on a GB200 NVL72
        rack) is how far collectives and the expert all-to-all stay on NVLink, as AIConfigurator's
        ``num_gpus_per_node`` of a large-EP config is. ``all_to_all``: how DP ranks reach whole experts over
        TP × DP; a gather is timed from the operator tables only (the wide-EP roofline times a dispatch).
        ``redundant_experts``: expert slots beyond the model's that EPLB rebalances the load over (SGLang
        ``--ep-num-redundant-experts``), held in every GPU's memory; a measured profile serves only the slots it
        states (its ``redundant_experts``), else the shape is composed. Its prefill batch cap, a prefill rank's
        chunk, is whole KV pages where the engine pages (:func:`in_whole_pages`)."""
        speculative = self.speculative_for(model)  # refused before any profile is composed
        moe.asked_activations(model, gpu, self.moe_activations)  # and so is a precision the kernels cannot take
        found = self._evidence(model, gpu, tp, pp, gpus_per_node or gpu.nvlink_domain, cache, dp, ep,
                               AllToAll(all_to_all), redundant_experts)
        found = in_whole_pages(found, prompt_pages(self.serving_engine, gpu.blackwell))
        return found if speculative is None else speculative.apply(found)

    def speculative_for(self, model: ModelSpec) -> SpeculativeDecoding | None:
        """The speculative decoding this source applies to ``model``'s profiles (MTP's draft cost resolved)."""
        if self.speculative is None:
            return None
        if self.speculative.method == SpeculativeMethod.MTP and not model.mtp_layers:
            raise PdplanError(f"--speculative mtp drafts with the checkpoint's multi-token-prediction layers, and "
                              f"{model.base_name} has none (config.json num_nextn_predict_layers): the engines refuse "
                              f"to start; a separate drafter is --speculative draft with its --draft-cost",
                              field="speculative")
        return self.speculative.resolved(model.layers)

    def _evidence(self, model: ModelSpec, gpu: GPU, tp: int, pp: int, gpus_per_node: int,
                  cache: ResultCache | None, dp: int = 1, ep: int = 1,
                  all_to_all: AllToAll = AllToAll.DISPATCH, redundant_experts: int = 0) -> PhaseProfile:
        """The shape's profile as measured, composed or derived."""
        gathered = all_to_all == AllToAll.GATHER
        key = shape_key(model.name, gpu.name, tp, pp, dp=dp, ep=ep, all_to_all=all_to_all)
        if key in self.measured and self.measured[key].redundant_experts == redundant_experts:
            return self.measured[key]
        placement = expert_placement_rejection(model, tp, ep, redundant_experts, dp)
        if placement is not None:  # a shape no engine runs, not a missing measurement
            raise PdplanError(f"{model.name} {shape_label(gpu.name, tp, pp, dp=dp, ep=ep)}: {placement[1]}",
                              field=placement[0])
        why = "composition off"
        if self.compose and tables.installed():
            try:
                return self._composed(model, gpu, tp, pp, gpus_per_node, cache, dp, ep, all_to_all, redundant_experts)
            except PdplanError as err:
                if self.engine_version is not None and err.field in ("engine", "engine_version"):
                    raise  # the user asked for this version: theirs to see
                why = err.detail
        elif self.compose:
            why = f"operator tables not installed ({tables.EXTRA})"
        if gathered:  # no other evidence times a gather: say so, with what the tables lack
            raise PdplanError(f"{model.name} {shape_label(gpu.name, tp, pp, dp=dp, ep=ep)}: gathered tokens are timed "
                              f"from AIConfigurator's operator tables only ({why}); the wide-EP roofline times a "
                              "dispatch (--all-to-all dispatch)", field="all_to_all")
        if self.compose:
            self.fallbacks[key] = why
        if dp > 1 or ep not in (1, tp) or redundant_experts:
            return wide_roofline_profile(model, gpu, tp, pp, dp=dp, ep=ep, engine=self.engine,
                                         gpus_per_node=gpus_per_node, redundant_experts=redundant_experts)
        return roofline_profile(model, gpu, tp, pp, engine=self.engine, gpus_per_node=gpus_per_node)

    def _composed(self, model: ModelSpec, gpu: GPU, tp: int, pp: int, gpus_per_node: int,
                  cache: ResultCache | None, dp: int = 1, ep: int = 1,
                  all_to_all: AllToAll = AllToAll.DISPATCH, redundant_experts: int = 0) -> PhaseProfile:
        from pdplan.latency.compose.profile import composed_profile  # reads parquet: only with the extra

        engine = self.serving_engine
        make = lambda: composed_profile(model, gpu, tp, pp, engine=engine, dp=dp, ep=ep,  # noqa: E731
                                        engine_version=self.engine_version, gpus_per_node=gpus_per_node,
                                        moe_activations=self.moe_activations, all_to_all=all_to_all,
                                        redundant_experts=redundant_experts)
        if cache is None:
            return make()
        # 2: MoE, MLA and sliding-window models compose (a remembered refusal of one is stale);
        # 3: a MoE model's prompt iterations carry the eager prefill's host time; 4: its method names it;
        # 5: SGLang's MXFP4 experts take MXFP8 activations on Blackwell; 6: TensorRT-LLM's block-scaled FP8 experts
        # also read the trtllm-gen kernel; 7: SGLang's gathered tokens cost two all-reduces; 8: TensorRT-LLM's
        # gathered tokens cost NCCL's all-gather and reduce-scatter, and on an NVLink fabric it dispatches by its
        # NVLink one-sided kernel; 9: a collective past a GB200 tray is NCCL's scaled (a remembered refusal of one is
        # stale), and the profile states a gathered rank and its redundant slots; 10: a profile of EP = TP states its
        # EP, so it keys the pools of that EP; 11: off a table's size axis, the smallest held below and the last
        # octave's slope past; 12: TensorRT-LLM's NVFP4 experts also read the trtllm-gen kernel.
        key = cache_key({"composed_profile": 12, "aiconfigurator": tables.package_version(),
                         "model": asdict(model), "gpu": asdict(replace(gpu, usd_per_hour=0.0, sources={})),
                         "tp": tp, "pp": pp, "engine": engine, "engine_version": self.engine_version,
                         "gpus_per_node": gpus_per_node,
                         **({"dp": dp, "ep": ep} if dp > 1 or ep > 1 else {}),
                         **({"moe_activations": str(self.moe_activations)} if self.moe_activations else {}),
                         **({"all_to_all": str(all_to_all)} if all_to_all == AllToAll.GATHER else {}),
                         **({"redundant_experts": redundant_experts} if redundant_experts else {})})
        found = cache.get(key, _decode_composed)
        if found is None:
            try:
                found = make()
            except PdplanError as err:  # remembered too: the tables will not change under this key
                cache.put(key, {"unavailable": err.detail, "field": err.field})
                raise
            cache.put(key, profile_to_dict(found))
        elif isinstance(found, PdplanError):
            raise found
        return found

    def accuracy(self, profile: PhaseProfile, model: ModelSpec, phase: str, dp: int = 1) -> Accuracy | None:
        """How far ``profile``'s source was from measured deployments like a ``phase`` pool of ``model``
        served by this source's engine (None where none were replayed)."""
        return accuracy_for(profile.provenance.source, self.serving_engine, model.is_moe, layout_of(phase, dp),
                            engine_rooflines=self.engine is not None)

    def fallback_reason(self, model: str, gpu: str, tp: int, pp: int, *, dp: int = 1, ep: int = 1) -> str | None:
        """Why a shape that is not measured was not composed either (None when it was)."""
        return self.fallbacks.get(shape_key(model, gpu, tp, pp, dp=dp, ep=ep))

    def describe(self) -> str:
        """One line for the output: which evidence this run may use."""
        roofline = f"rooflines fitted for {self.engine}" if self.engine else "rooflines (Splitwise 2023 calibration)"
        if not self.compose:
            return f"measured profiles, else {roofline} (composition off){self._speculative_note()}"
        if not tables.installed():
            return (f"measured profiles, else {roofline} (operator tables not installed: {tables.EXTRA})"
                    f"{self._speculative_note()}")
        version = self.engine_version or "newest measured"
        return (f"measured profiles, else composed from AIConfigurator {tables.package_version()} operator tables "
                f"({self.serving_engine} {version}), else {roofline}{self._speculative_note()}")

    def _speculative_note(self) -> str:
        return "" if self.speculative is None else f"; {self.speculative.describe()}"


def in_whole_pages(profile: PhaseProfile, pages: int) -> PhaseProfile:
    """``profile`` with its prefill batch cap cut to whole KV pages of ``pages`` tokens: the chunk a prefill rank
    takes (:func:`pdplan.engines.prompt_pages`, SGLang's on Blackwell), which a cap bound by the KV capacity or
    stated in a profile file may not be. The notes say so; a profile already in whole pages comes back as it is."""
    cap = profile.max_prefill_batch_tokens
    if cap % pages == 0:
        return profile
    if cap < pages:
        raise PdplanError(f"{profile.shape}: a prefill batch cap of {cap} tokens is less than one KV page of {pages} "
                          "tokens of its engine", field="max_prefill_batch_tokens")
    paged = cap // pages * pages
    note = f"prefill batch cap {cap:,} cut to {paged:,} tokens, whole KV pages of {pages}"
    prov = profile.provenance
    return replace(profile, max_prefill_batch_tokens=paged,
                   provenance=replace(prov, notes=f"{prov.notes}; {note}" if prov.notes else note))


def _decode_composed(data: dict) -> PhaseProfile | PdplanError:
    """A cached composition: the profile, or why the tables could not make one."""
    if "unavailable" in data:
        return PdplanError(str(data["unavailable"]), field=data.get("field"))
    return profile_from_dict(data, "cache")
