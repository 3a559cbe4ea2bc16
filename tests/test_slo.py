"""SLO specs from flags and files; attainment as 0x08C defines it."""

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.slo import attainment, load_slo, meets, slo_from_flags


def test_attainment_is_the_share_within_threshold():
    assert attainment(np.array([0.1, 0.2, 0.3, 0.4]), 0.25) == 0.5


def test_a_request_without_the_clock_passes_it():
    """One output token has no TPOT (docs/design.md, "Clocks and units"): NaN counts as meeting the TPOT clock."""
    assert attainment(np.array([np.nan, 0.5]), 0.1) == 0.5


def test_flags_make_one_objective_per_clock():
    slo = slo_from_flags(0.25, 0.1, 0.9)
    assert [o.label for o in slo.objectives] == ["p90 TTFT <= 250 ms", "p90 TPOT <= 100 ms"]


def test_meets_requires_every_objective():
    slo = slo_from_flags(0.25, 0.1, 0.5)
    assert meets(slo, {"ttft": np.array([0.1, 0.3]), "tpot": np.array([0.05, 0.05])})
    assert not meets(slo, {"ttft": np.array([0.3, 0.3]), "tpot": np.array([0.05, 0.05])})


def test_slo_file_with_several_percentiles(tmp_path):
    path = tmp_path / "slo.yaml"
    path.write_text("objectives:\n"
                    "  - {metric: ttft, threshold_ms: 250, attainment: 0.5}\n"
                    "  - {metric: ttft, threshold_ms: 1000, attainment: 0.99}\n"
                    "  - {metric: tpot, threshold_ms: 100, attainment: 0.9}\n")
    slo = load_slo(path)
    assert len(slo.for_metric("ttft")) == 2
    assert slo.threshold_s("ttft") == pytest.approx(0.25)


BAD_SLO_FILES = [
    ("objectives: []\n", r"slo.yaml:1: objectives must be a non-empty list"),
    ("objectives:\n  - {metric: itl, threshold_ms: 5, attainment: 0.9}\n",
     r"slo.yaml:2: objectives\[0\].metric must be one of e2e, tpot, ttft, got 'itl'"),
    ("objectives:\n  - {metric: ttft, threshold_ms: 250, attainment: 1.5}\n",
     r"slo.yaml:2: objectives\[0\].attainment must be <= 1, got 1.5"),
    ("objectives:\n  - {metric: ttft, threshold_ms: -1, attainment: 0.9}\n",
     r"slo.yaml:2: objectives\[0\].threshold_ms must be > 0, got -1"),
    ("objectives:\n  - {metric: ttft, attainment: 0.9}\n",
     r"slo.yaml:2: missing required field objectives\[0\].threshold_ms"),
    ("objectives:\n  - {metric: ttft, threshold_ms: 1.0e-323, attainment: 0.9}\n",
     r"slo.yaml:2: objectives\[0\].threshold_ms must be a latency > 0 in seconds too, got 1e-323"),
]


@pytest.mark.parametrize("text,message", BAD_SLO_FILES,
                         ids=["empty", "unknown-metric", "attainment-above-one", "negative", "missing",
                              "no-time-in-seconds"])
def test_bad_slo_file_names_file_line_and_field(tmp_path, text, message):
    path = tmp_path / "slo.yaml"
    path.write_text(text)
    with pytest.raises(PdplanError, match=message):
        load_slo(path)


def test_no_clock_given_is_an_input_error():
    with pytest.raises(PdplanError, match="no SLO given"):
        slo_from_flags(None, None, 0.9)
