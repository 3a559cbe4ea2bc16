"""The host's time in an eager prefill iteration of a mixture-of-experts model, which kernel timings miss.

The engines replay their decode steps as CUDA graphs but run a prompt iteration of a thousand tokens
or more eagerly: SGLang and TensorRT-LLM capture no prefill graphs unless asked, and vLLM's piecewise
graphs stop at its capture sizes, below such a batch. Each kernel of an eager forward is launched
by the host, from Python, so the iteration takes the kernels' time plus whatever of the host's the
GPU waits for. AIConfigurator's operator tables time the kernels alone (CUDA events around each
operator), so a profile composed from them, and a roofline fitted to those compositions, leave that
time out. A mixture-of-experts layer launches many more kernels than a dense one — routing, top-k,
token permutation, grouped expert GEMMs, the shared expert, the combine — and its prefill kernels are
short enough for the launches to show.

The one measurement of it published for these models: SGLang's pull request #12160 (DeepSeek-V3, a
prefill of one token) logged a forward of 82.6 ms eager and of 23.1 ms in a CUDA graph. The 59.5 ms
between them is the host's share of an eager forward over DeepSeek-V3's 61 layers, 0.975 ms per
layer. pdplan charges every prompt iteration of a mixture-of-experts model that per layer
(:func:`eager_prefill_host_s`), as the profile's ``prompt_iteration_s``: a mixed iteration pays it
once, a decode step never. It is a stated measurement of one engine, model and GPU carried to the
others: a pilot run of the user's own deployment measures theirs (``pdplan profile calibrate``).
Dense models are charged none: a dense layer's few kernels, each long at prompt lengths, hide their
launches.
"""

from __future__ import annotations

from dataclasses import replace

from pdplan.latency.profile import PhaseProfile, with_prompt_iteration
from pdplan.modelspec import ModelSpec

#: SGLang pull request #12160: DeepSeek-V3's forward over a one-token prefill, eager and in a CUDA graph
PULL_REQUEST = "SGLang PR #12160"
EAGER_FORWARD_S, GRAPHED_FORWARD_S, MEASURED_LAYERS = 82.6e-3, 23.1e-3, 61


def host_s_per_layer() -> float:
    """Seconds of host time per layer of an eager prefill forward: (eager − graphed) / layers of the
    measured forward (SGLang PR #12160, module docstring)."""
    return (EAGER_FORWARD_S - GRAPHED_FORWARD_S) / MEASURED_LAYERS


def eager_prefill_host_s(model: ModelSpec) -> float:
    """Seconds a prompt iteration of ``model`` adds to its kernels' time: :func:`host_s_per_layer` for
    each of a mixture-of-experts model's layers, none for a dense model (module docstring)."""
    return host_s_per_layer() * model.layers if model.is_moe else 0.0


def with_eager_prefill(profile: PhaseProfile, model: ModelSpec) -> PhaseProfile:
    """A profile timed from kernels, with the host time of ``model``'s eager prompt iterations added and
    named in its provenance: its method (which the manifest and every output carry) and its notes."""
    seconds = eager_prefill_host_s(model)
    if not seconds:
        return profile
    added = f"eager prefill host time {seconds * 1e3:.3g} ms per prompt iteration"
    measured = (f"{PULL_REQUEST}: DeepSeek-V3 one-token prefill, {EAGER_FORWARD_S * 1e3:g} ms eager vs "
                f"{GRAPHED_FORWARD_S * 1e3:g} ms in a CUDA graph")
    note = f"{added} ({host_s_per_layer() * 1e6:.0f} us x {model.layers} layers; {measured})"
    prov = profile.provenance
    return replace(with_prompt_iteration(profile, seconds),
                   provenance=replace(prov, method=f"{prov.method} + {added} ({PULL_REQUEST})",
                                      notes=f"{prov.notes}; {note}" if prov.notes else note))
