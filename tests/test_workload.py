"""The Workload: loading each format, statistics, arrival transforms and synthesis."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import InternalError, PdplanError
from pdplan.workload import (
    LengthDist,
    Workload,
    gamma_arrivals,
    load_trace,
    native_csv,
    parse_length_dist,
    poisson_arrivals,
    repeat,
    replace_arrivals,
    rescale_rate,
    synthesize,
    trace_stats,
    window,
)

NATIVE = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.fixture
def trace_file(tmp_path):
    """Write text (or bytes) to a file in a temp folder and return its path."""

    def write(text: str | bytes, name: str = "t.csv"):
        path = tmp_path / name
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path

    return write


def workload(arrival_s=None, prompt=None, output=None, **fields) -> Workload:
    """A workload from plain lists; lengths default to 1 token each."""
    n = len(arrival_s if arrival_s is not None else prompt)
    return Workload(
        arrival_s=None if arrival_s is None else np.array(arrival_s, dtype=np.float64),
        prompt_tokens=np.array(prompt or [1] * n, dtype=np.int64),
        output_tokens=np.array(output or [1] * n, dtype=np.int64), **fields)


# --- loading ---------------------------------------------------------------------------------


def test_native_csv_loads_columns_as_given(trace_file):
    w = load_trace(trace_file(NATIVE + "0.5,100,10\n1.25,200,20\n"))
    assert w.arrival_s.tolist() == [0.5, 1.25]
    assert w.prompt_tokens.tolist() == [100, 200]
    assert w.output_tokens.tolist() == [10, 20]
    assert (w.arrival_s.dtype, w.prompt_tokens.dtype, w.output_tokens.dtype) == (np.float64, np.int64, np.int64)
    assert (w.format, w.has_arrivals, w.request_id, w.hash_values) == ("native", True, None, None)


def test_native_request_ids_and_prefix_hashes_load_as_csr(trace_file):
    w = load_trace(trace_file("arrival_s,prompt_tokens,output_tokens,request_id,prefix_hashes\n"
                              "0,1024,1,a,7 8\n1,10,1,b,\n2,600,1,c,7 -9\n"))
    assert w.request_id.tolist() == ["a", "b", "c"]
    assert w.hash_values.tolist() == [7, 8, 7, -9]
    assert w.hash_offsets.tolist() == [0, 2, 2, 4]
    assert w.block_tokens == 512


def test_block_tokens_option_sets_the_prefix_block_size(trace_file):
    path = trace_file("arrival_s,prompt_tokens,output_tokens,prefix_hashes\n0,600,1,1 2 3\n")
    assert load_trace(path, block_tokens=256).block_tokens == 256
    with pytest.raises(PdplanError, match="fills at most 2 blocks of 512 tokens"):
        load_trace(path)


def test_azure_timestamps_become_seconds_after_the_first_row(trace_file):
    w = load_trace(trace_file("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                              "2023-11-16 18:17:03.9799600,4808,10\n"
                              "2023-11-16 18:17:04.0319600,3180,8\n"
                              "2023-11-16 18:18:03.9799601,10,1\n"))
    assert w.format == "azure"
    assert w.arrival_s.tolist() == pytest.approx([0.0, 0.052, 60.0000001], abs=1e-9)
    assert w.prompt_tokens.tolist() == [4808, 3180, 10]


def test_azure_timestamps_with_a_utc_offset_are_read_as_instants(trace_file):
    naive = load_trace(trace_file("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                  "2023-11-16 18:17:03.9799600,5,1\n2023-11-16 18:17:05.0000000,5,1\n"))
    offset = load_trace(trace_file("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2023-11-16 19:17:03.9799600+01:00,5,1\n"
                                   "2023-11-16 18:17:05.0000000+00:00,5,1\n", name="tz.csv"))
    assert offset.digest() == naive.digest()


def test_mooncake_timestamps_in_ms_become_seconds_and_hash_ids_become_blocks(trace_file):
    w = load_trace(trace_file('{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n'
                              '{"timestamp": 1500, "input_length": 20, "output_length": 7, "hash_ids": [0]}\n',
                              name="t.jsonl"))
    assert w.format == "mooncake"
    assert w.arrival_s.tolist() == [0.0, 1.5]
    assert w.hash_values.tolist() == [0, 1, 0]
    assert w.hash_offsets.tolist() == [0, 2, 3]


def test_burstgpt_failed_requests_are_counted_and_excluded(trace_file):
    w = load_trace(trace_file("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                              "5,ChatGPT,472,18,490,Conversation log\n"
                              "6,ChatGPT,300,0,300,Conversation log\n"
                              "8,GPT-4,20,7,27,API log\n"))
    assert w.format == "burstgpt"
    assert w.failed_requests == 1
    assert w.arrival_s.tolist() == [5.0, 8.0]
    assert w.prompt_tokens.tolist() == [472, 20]
    assert "1 failed requests" in trace_stats(w).notes[-1]


@pytest.mark.parametrize("header", ["num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio",
                                    "prompt_tokens,output_tokens"], ids=["vidur", "native-names"])
def test_lengths_only_trace_has_no_arrivals(trace_file, header):
    extra = ",3826,69.8" if header.startswith("num") else ""
    w = load_trace(trace_file(f"{header}\n3772,54{extra}\n2015,156{extra}\n"))
    assert (w.format, w.has_arrivals, w.arrival_s) == ("lengths", False, None)
    assert w.prompt_tokens.tolist() == [3772, 2015]
    assert w.output_tokens.tolist() == [54, 156]


def test_explicit_format_overrides_detection(trace_file):
    w = load_trace(trace_file(NATIVE + "0,5,1\n1,6,1\n"), format="lengths")
    assert (w.format, w.has_arrivals, w.prompt_tokens.tolist()) == ("lengths", False, [5, 6])


def test_blank_lines_crlf_bom_and_spaces_after_commas_are_accepted(trace_file):
    text = "\ufeffarrival_s, prompt_tokens, output_tokens\r\n0, 5, 1\r\n\r\n   \r\n1, 6, 2\r\n\r\n"
    w = load_trace(trace_file(text))
    assert w.arrival_s.tolist() == [0.0, 1.0]
    assert w.prompt_tokens.tolist() == [5, 6]


def test_sort_orders_arrivals_stably_and_moves_ids_and_hashes(trace_file):
    path = trace_file("arrival_s,prompt_tokens,output_tokens,request_id,prefix_hashes\n"
                      "2,1,1,a,1\n1,1,1,b,2\n1,1,1,c,\n0,1,1,d,4\n")
    w = load_trace(path, sort=True)
    assert w.arrival_s.tolist() == [0.0, 1.0, 1.0, 2.0]
    assert w.request_id.tolist() == ["d", "b", "c", "a"]
    assert w.hash_values.tolist() == [4, 2, 1]
    assert w.hash_offsets.tolist() == [0, 1, 2, 2, 3]


def test_reading_in_chunks_keeps_every_row_and_physical_line_numbers(trace_file, monkeypatch):
    monkeypatch.setattr("pdplan.workload.formats.csvfile.CHUNK_ROWS", 2)
    rows = "".join(f"{t},{t + 1},1\n" for t in range(7))
    assert load_trace(trace_file(NATIVE + rows)).prompt_tokens.tolist() == list(range(1, 8))
    # header on line 1, rows on lines 2-8, a blank line 9, the bad row on line 10 (in chunk 4)
    with pytest.raises(PdplanError, match=r"t.csv:10: prompt_tokens must be an integer from 1 to 10,000,000, got 'x'"):
        load_trace(trace_file(NATIVE + rows + "\n7,x,1\n"))
    with pytest.raises(PdplanError, match=r"t.csv:8: prompt_tokens must be an integer from 1 to 10,000,000, got '0'"):
        load_trace(trace_file(NATIVE + rows.replace("6,7,1", "6,0,1")))


def test_digest_depends_on_content_not_on_file_or_format(trace_file):
    a = load_trace(trace_file(NATIVE + "0,5,1\n1,6,2\n"))
    b = load_trace(trace_file(NATIVE + "0.0,5,1\n1.0,6,2\n", name="other.csv"))
    c = load_trace(trace_file(NATIVE + "0,5,1\n1,6,3\n", name="changed.csv"))
    assert a.digest() == b.digest()
    assert a.digest() != c.digest()


def test_native_csv_round_trips_to_the_same_digest(trace_file):
    original = workload([0.1, 1 / 3, 2e-7 + 5], [5, 600, 7], [1, 2, 3],
                        request_id=np.array(["x", "y,z", "w"], dtype=object),
                        hash_values=np.array([9, 8, 9], dtype=np.int64),
                        hash_offsets=np.array([0, 1, 3, 3], dtype=np.int64))
    again = load_trace(trace_file(native_csv(original)))
    assert again.digest() == original.digest()


@st.composite
def workloads(draw):
    """Small workloads with any finite arrivals, ids holding commas and quotes, int64 prefix blocks."""
    n = draw(st.integers(1, 20))
    arrival_s = sorted(draw(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=n, max_size=n)))
    prompt = draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 99), min_size=n, max_size=n))
    ids = draw(st.lists(st.text('ab,"x', min_size=1, max_size=6), min_size=n, max_size=n, unique=True))
    blocks = [draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=-(-p // 512))) for p in prompt]
    return workload(arrival_s, prompt, output, request_id=np.array(ids, dtype=object),
                    hash_values=np.array([h for b in blocks for h in b], dtype=np.int64),
                    hash_offsets=np.cumsum([0] + [len(b) for b in blocks], dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(original=workloads())
def test_any_workload_round_trips_through_native_csv(tmp_path_factory, original):
    path = tmp_path_factory.mktemp("roundtrip") / "w.csv"
    path.write_text(native_csv(original))
    assert load_trace(path).digest() == original.digest()


def test_native_csv_of_a_lengths_only_workload_asks_for_an_arrival_process():
    with pytest.raises(PdplanError, match=r"no arrival times .* --arrivals poisson\|gamma --rate R"):
        native_csv(workload(prompt=[5, 6]))


@pytest.mark.parametrize("fields, message", [
    (dict(prompt=[1, 0]), "prompt_tokens must be an integer from 1 to 10,000,000, got 0 at request 1"),
    (dict(arrival_s=[0.0, 2.0, 1.0]),
     r"arrival_s must be finite, within ±1e\+10 s and non-decreasing, got 1.0 at request 2"),
    (dict(prompt=[1, 1], request_id=np.array(["a", "a"], dtype=object)),
     "request_id must be unique, got 'a' again at request 1"),
], ids=["zero-prompt", "decreasing-arrivals", "repeated-id"])
def test_workload_checks_its_values_when_built_in_memory(fields, message):
    with pytest.raises(PdplanError, match=message):
        workload(**fields)


def test_workload_rejects_arrays_of_the_wrong_dtype():
    with pytest.raises(InternalError, match="prompt_tokens must be a 1-D numpy array of int64"):
        Workload(prompt_tokens=np.array([1.0]), output_tokens=np.array([1]))


# --- statistics ------------------------------------------------------------------------------


def test_stats_of_an_evenly_spaced_trace():
    s = trace_stats(workload(list(range(120))))
    assert (s.requests, s.duration_s) == (120, 119.0)
    assert s.mean_rate_rps == 120 / 119
    assert s.peak_rate_rps == 60 / 60
    assert s.interarrival_cv == 0.0


def test_peak_rate_counts_the_busiest_half_open_60_s_window():
    # [0, 60) holds 30 arrivals (the ones at 60 fall outside); [60, 120) holds 30 + 10.
    s = trace_stats(workload([0.0] * 30 + [60.0] * 30 + [100.0] * 10 + [200.0]))
    assert s.peak_rate_rps == 40 / 60


def test_peak_rate_of_a_trace_shorter_than_the_window_is_requests_over_duration():
    s = trace_stats(workload([0.0, 10.0, 20.0]))
    assert s.peak_rate_rps == s.mean_rate_rps == 3 / 20
    assert any("shorter than the 60 s peak window" in note for note in s.notes)


def test_interarrival_cv_is_population_std_over_mean_of_gaps():
    assert trace_stats(workload([0, 1, 4, 5, 8])).interarrival_cv == 0.5  # gaps 1,3,1,3


def test_length_stats_use_linear_percentiles():
    s = trace_stats(workload(prompt=list(range(1, 101))))
    p = s.prompt_tokens
    assert (p.mean, p.p50, p.p90, p.p99, p.max) == (50.5, 50.5, pytest.approx(90.1), pytest.approx(99.01), 100)


def test_prefix_reuse_counts_blocks_whose_hash_appeared_in_an_earlier_request():
    # Blocks 1 and 2 of request 1 were seen in request 0; the repeated 7 inside request 3 is not reuse.
    w = workload([0, 1, 2, 3], [2048] * 4, hash_values=np.array([1, 2, 3, 1, 2, 4, 5, 7, 7], dtype=np.int64),
                 hash_offsets=np.array([0, 3, 6, 7, 9], dtype=np.int64))
    assert trace_stats(w).prefix_reuse_fraction == 2 / 9


def test_stats_of_a_lengths_only_trace_null_the_arrival_fields_and_say_why():
    s = trace_stats(workload(prompt=[5, 6, 7]))
    assert (s.duration_s, s.mean_rate_rps, s.peak_rate_rps, s.interarrival_cv) == (None, None, None, None)
    assert s.notes[0].startswith("no arrival times (lengths-only trace)")


def test_stats_dict_keeps_the_contract_keys_in_order():
    keys = list(trace_stats(workload([0.0, 1.0])).to_dict())
    assert keys[:9] == ["requests", "duration_s", "mean_rate_rps", "peak_rate_rps", "interarrival_cv",
                        "prompt_tokens", "output_tokens", "prefix_reuse_fraction", "failed_requests"]


# --- arrival transforms ----------------------------------------------------------------------


def test_rescale_reaches_the_target_mean_rate_and_keeps_the_burst_shape():
    original = workload(list(gamma_arrivals(1000, rate_rps=2.0, cv=3.0, rng=1) + 7.0))
    scaled = rescale_rate(original, 10.0)
    before, after = trace_stats(original), trace_stats(scaled)
    assert after.mean_rate_rps == pytest.approx(10.0, rel=1e-12)
    assert after.interarrival_cv == pytest.approx(before.interarrival_cv, rel=1e-9)
    assert scaled.arrival_s[0] == 7.0
    assert scaled.prompt_tokens is original.prompt_tokens


def test_rescale_of_a_lengths_only_trace_asks_for_an_arrival_process():
    with pytest.raises(PdplanError, match=r"--arrivals poisson\|gamma --rate R"):
        rescale_rate(workload(prompt=[5, 6]), 3.0)


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf], ids=["zero", "negative", "nan", "inf"])
def test_transforms_reject_a_rate_that_is_not_positive_and_finite(rate):
    with pytest.raises(PdplanError, match="rate_rps must be a finite number > 0"):
        rescale_rate(workload([0.0, 1.0]), rate)


def test_poisson_arrivals_have_the_requested_rate_and_cv_1():
    """200k gaps: the standard errors are ~0.2 % (rate) and ~0.3 % (CV); tolerance 1 %."""
    s = trace_stats(workload(list(poisson_arrivals(200_000, rate_rps=5.0, rng=7))))
    assert s.mean_rate_rps == pytest.approx(5.0, rel=0.01)
    assert s.interarrival_cv == pytest.approx(1.0, rel=0.01)


def test_gamma_arrivals_have_the_requested_rate_and_cv():
    """Gamma(shape 1/4, scale 4/rate): CV 2; the CV's standard error is ~0.6 % at 200k gaps."""
    s = trace_stats(workload(list(gamma_arrivals(200_000, rate_rps=3.0, cv=2.0, rng=7))))
    assert s.mean_rate_rps == pytest.approx(3.0, rel=0.02)
    assert s.interarrival_cv == pytest.approx(2.0, rel=0.03)


def test_arrivals_start_at_zero_on_whole_microseconds_and_repeat_for_a_seed():
    times = gamma_arrivals(50, rate_rps=100.0, cv=2.0, rng=3)
    assert times[0] == 0.0
    assert np.array_equal(times, np.round(times, 6))
    assert np.array_equal(times, gamma_arrivals(50, rate_rps=100.0, cv=2.0, rng=np.random.default_rng(3)))


def test_replace_arrivals_resamples_whole_rows_from_the_trace():
    lengths = workload(prompt=[10, 20, 30], output=[1, 2, 3])
    w = replace_arrivals(lengths, rate_rps=4.0, n_requests=500, rng=11)
    assert len(w) == 500 and w.has_arrivals
    assert set(zip(w.prompt_tokens.tolist(), w.output_tokens.tolist())) == {(10, 1), (20, 2), (30, 3)}
    again = replace_arrivals(lengths, rate_rps=4.0, n_requests=500, rng=11)
    assert again.digest() == w.digest()


def test_replace_arrivals_drops_request_ids_because_rows_repeat():
    w = workload([0.0, 1.0], request_id=np.array(["a", "b"], dtype=object))
    assert replace_arrivals(w, rate_rps=1.0, n_requests=5, rng=0).request_id is None


def test_window_keeps_a_half_open_interval_after_the_first_arrival_and_shifts_it_to_zero():
    w = window(workload([10.0, 11.0, 12.5, 13.0, 14.0], [1, 2, 3, 4, 5]), start_s=1.0, duration_s=2.0)
    assert w.arrival_s.tolist() == [0.0, 1.5]
    assert w.prompt_tokens.tolist() == [2, 3]


def test_an_empty_window_is_an_error():
    with pytest.raises(PdplanError, match=r"window \[100, 110\) s holds no requests; the trace spans 1 s"):
        window(workload([0.0, 1.0]), start_s=100.0, duration_s=10.0)


# --- synthesis -------------------------------------------------------------------------------


def test_synthesize_gives_identical_text_for_the_same_seed():
    def text(seed):
        return native_csv(synthesize(n_requests=300, rate_rps=5.0, cv=2.0, rng=seed,
                                     prompt=parse_length_dist("lognormal:800:1.0:4096"),
                                     output=parse_length_dist("uniform:1:300")))

    assert text(5) == text(5)
    assert text(5) != text(6)


def test_const_and_uniform_lengths_stay_in_their_bounds():
    assert LengthDist(kind="const", params=(512,)).sample(5, 0).tolist() == [512] * 5
    draws = parse_length_dist("uniform:3:6").sample(10_000, 0)
    assert (draws.min(), draws.max()) == (3, 6)


def test_lognormal_lengths_have_the_requested_mean():
    """sigma 0.5: the sample mean's standard error at 100k draws is ~0.17 %; tolerance 1 %."""
    draws = parse_length_dist("lognormal:1000:0.5").sample(100_000, 0)
    assert draws.mean() == pytest.approx(1000, rel=0.01)


def test_lognormal_lengths_are_clipped_to_1_and_max():
    draws = parse_length_dist("lognormal:2:3:50").sample(10_000, 0)
    assert (draws.min(), draws.max()) == (1, 50)


@pytest.mark.parametrize("spec, message", [
    ("zipf:1.1", "--prompt 'zipf:1.1': unknown length kind 'zipf'; expected one of const, lognormal, uniform"),
    ("const:0", "--prompt 'const:0': const N must be an integer >= 1, got 0"),
    ("const:abc", r"--prompt 'const:abc': parameters must be finite numbers \(const:N"),
    ("uniform:10:5", "--prompt 'uniform:10:5': uniform needs integers 1 <= LO <= HI, got 10:5"),
    ("lognormal:100", "--prompt 'lognormal:100': lognormal takes 2 or 3 parameters, got 1"),
    ("lognormal:100:0.5:0", "--prompt 'lognormal:100:0.5:0': lognormal MAX must be an integer >= 1, got 0"),
], ids=["unknown-kind", "const-zero", "not-a-number", "uniform-reversed", "lognormal-arity", "lognormal-max"])
def test_bad_length_specs_name_the_flag_and_the_rule(spec, message):
    with pytest.raises(PdplanError, match=message):
        parse_length_dist(spec, what="--prompt")


def test_a_repeated_trace_keeps_ids_unique_and_invents_no_prefix_reuse():
    workload = Workload(arrival_s=np.array([0.0, 1.0, 2.0]), prompt_tokens=np.array([32, 32, 48]),
                        output_tokens=np.array([1, 2, 3]), request_id=np.array(["a", "b", "c"], dtype=object),
                        hash_values=np.array([7, 7, 9, 7]), hash_offsets=np.array([0, 1, 2, 4]), block_tokens=16)
    twice = repeat(workload, 2)
    assert list(twice.request_id) == ["a", "b", "c", "a#1", "b#1", "c#1"]
    np.testing.assert_array_equal(twice.arrival_s, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])  # period: span + a mean gap
    first, second = twice.hash_values[:4], twice.hash_values[4:]
    assert not set(first) & set(second)  # the copies share no prefix block
    assert (first[0] == first[1]) and (second[0] == second[1]) and first[2] != first[0]  # reuse inside a copy kept
    np.testing.assert_array_equal(twice.hash_offsets, [0, 1, 2, 4, 5, 6, 8])
