"""Request traces: the ``Workload`` object and everything that reads, summarises, reshapes or makes one.

Modules: :mod:`.model` (the object, validated once), :mod:`.formats` (native CSV, Azure LLM trace,
Mooncake JSONL, BurstGPT, lengths-only CSV, one module each; reading with row-numbered errors, and writing),
:mod:`.stats` (lengths, rates, burstiness, prefix reuse), :mod:`.reshape` (rescaling, subsets,
windows, new arrival processes), :mod:`.ticks` (arrival times rounded to a grid, spread over it for replay)
and :mod:`.synth` (synthetic traces from length specs).
"""

from pdplan.workload.formats import FORMATS, load_trace
from pdplan.workload.formats.csvfile import CHUNK_ROWS
from pdplan.workload.formats.native import native_csv
from pdplan.workload.model import DEFAULT_BLOCK_TOKENS, NO_ARRIVALS_HINT, Workload, max_blocks
from pdplan.workload.reshape import (
    diurnal_arrivals,
    gamma_arrivals,
    head,
    poisson_arrivals,
    poisson_resample,
    repeat,
    replace_arrivals,
    rescale_rate,
    rescaled_arrivals,
    stretch,
    thin,
    window,
)
from pdplan.workload.stats import (
    PEAK_WINDOW_S,
    LengthStats,
    TraceStats,
    interarrival_cv,
    peak_rate_rps,
    prefix_reuse_fraction,
    trace_stats,
)
from pdplan.workload.synth import (
    LENGTH_KINDS,
    LENGTH_SPEC_HELP,
    MAX_SPEC_TOKENS,
    LengthDist,
    parse_length_dist,
    synthesize,
)
from pdplan.workload.ticks import arrival_grid_s, spread_over_grid

__all__ = [
    "CHUNK_ROWS", "DEFAULT_BLOCK_TOKENS", "FORMATS", "LENGTH_KINDS", "LENGTH_SPEC_HELP", "MAX_SPEC_TOKENS",
    "NO_ARRIVALS_HINT", "PEAK_WINDOW_S", "LengthDist", "LengthStats", "TraceStats", "Workload", "arrival_grid_s",
    "diurnal_arrivals",
    "gamma_arrivals", "head", "interarrival_cv", "load_trace", "max_blocks", "native_csv", "parse_length_dist",
    "peak_rate_rps", "poisson_arrivals", "poisson_resample", "prefix_reuse_fraction", "repeat", "replace_arrivals",
    "rescale_rate", "rescaled_arrivals", "spread_over_grid", "stretch", "synthesize", "thin", "trace_stats",
    "window",
]
