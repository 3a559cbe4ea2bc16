"""KV transfer schedules of 0x08I: per-layer streaming recurrence versus request-level transfer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.sim import layer_visibility, request_completion
from pdplan.sim.fast.links import layer_schedule_end
from pdplan.sim.transfer import uniform_layer_ready_s

READY_S = [0.025, 0.050, 0.075, 0.100]


def test_per_layer_visibility_is_35_60_85_110_ms():
    """Each layer is sent as soon as it is ready and the engine is free."""
    assert layer_visibility(READY_S, 0.010) == pytest.approx([0.035, 0.060, 0.085, 0.110])


def test_request_level_transfer_completes_at_140_ms():
    """The whole cache moves after the last layer: 100 ms + 4 × 10 ms."""
    assert request_completion(READY_S, 0.010) == pytest.approx(0.140)


def test_a_busy_engine_delays_the_first_layer():
    """v_{-1} is when the engine frees: busy until 80 ms, layer 0 lands at 90 ms."""
    assert layer_visibility(READY_S, 0.010, free_s=0.080) == pytest.approx([0.090, 0.100, 0.110, 0.120])


@settings(max_examples=300, deadline=None)
@given(free=st.floats(0, 2), start=st.floats(0, 2), duration=st.floats(1e-4, 2),
       setup=st.floats(0, 0.01), payload=st.floats(0, 2), layers=st.integers(1, 96))
def test_closed_form_of_the_uniform_layer_recurrence_matches_the_loop(free, start, duration, setup,
                                                                      payload, layers):
    """The engine's closed form equals the 0x08I recurrence with setup paid before layer 0."""
    end = start + duration
    x = np.full(layers, payload / layers)
    x[0] += setup
    loop = layer_visibility(uniform_layer_ready_s(start, end, layers), x, free_s=free)[-1]
    assert layer_schedule_end(free, start, end, setup, payload, layers) == pytest.approx(loop, abs=1e-12)
