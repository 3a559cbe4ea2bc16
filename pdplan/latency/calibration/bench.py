"""Serving-benchmark results, read from the files the benchmark tools save.

Four formats, each read as its tool writes it:

* ``vllm-bench`` — ``vllm bench serve --save-result`` (and the older
  ``benchmarks/benchmark_serving.py``): one JSON object per run with the load (``max_concurrency``,
  ``request_rate``, ``num_prompts``), the aggregate metrics in milliseconds (``mean_ttft_ms``,
  ``median_ttft_ms``, ``p99_ttft_ms``, … for ttft and tpot) and, with ``--save-detailed``, every
  request (``input_lens``, ``output_lens``, ``ttfts`` in seconds, ``itls`` in seconds, ``errors``);
  with ``--append-result`` each run's object is appended on a line of its own;
* ``sglang-bench`` — ``python -m sglang.bench_serving --output-file`` (in 0.5.23 a forward to
  ``sglang.benchmark.serving``; 0.5.8 and 0.5.23 write alike): the same keys (the tool began as a
  copy of vLLM's), one run per line, every run appended to the file; per request with
  ``--output-details``. Its ``request_rate`` is ``Infinity`` for a closed loop and ``"trace"`` for a
  run sent at a trace's timestamps, which a result alone cannot replay;
* ``genai-perf`` — ``profile_export_genai_perf.json``: per metric (``time_to_first_token``,
  ``inter_token_latency``, ``input_sequence_length``, ``output_sequence_length``) a mapping of
  statistics (``avg``, ``p50``, ``p90``, ``p99``, …) with its ``unit``; ``request_count`` with its
  ``avg``; the load under ``input_config.perf_analyzer.stimulus`` (``concurrency`` or
  ``request_rate``; releases before March 2025: ``input_config.concurrency``);
* ``aiperf`` — ``profile_export_aiperf.json``: the same metrics at the top level (under
  ``records`` in 0.1 releases), the load under ``input_config.loadgen`` (``concurrency``,
  ``request_rate``, ``request_count``; up to 0.8, where an unset block means one client) or
  ``input_config.phases`` (0.9 on: the profiling phase's ``type`` concurrency or poisson, with
  ``concurrency``/``rate`` and ``requests``).

Each run in a file becomes a :class:`BenchRun`: the load to replay, the request lengths (every request's
when the file has them, else the mean lengths repeated) and the measured TTFT and TPOT
statistics in seconds. Every missing or malformed field is a :class:`~pdplan.errors.PdplanError`
naming the file, the line of a run appended to it, and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_bytes

FORMATS = ("vllm-bench", "sglang-bench", "genai-perf", "aiperf")
#: Formats whose files may hold several runs, one JSON object per line.
APPENDED = ("vllm-bench", "sglang-bench")
#: A statistic as the tools name it: the mean, the median or a percentile, whichever they were asked for
#: (vLLM's --metric-percentiles writes any, p99.9 included; SGLang 0.5.23 writes p90, p95 and p99).
_STATISTIC = re.compile(r"(avg|mean|median|p(\d{1,2}(?:\.\d+)?))")
UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "us": 1e-6, "ns": 1e-9}
#: Requests replayed when a result gives only mean lengths and no request count.
DEFAULT_REQUESTS = 1000
#: What a result that carries every request is compared by: the mean of each band of requests between
#: these percentiles, and the mean of all. A band's mean moves little when one request's clock jumps
#: (1/n of the jump per band member), where a percentile jumps with it when it falls between two modes of
#: the distribution, as TTFT's are when prefill batching makes requests wait either no batch or one.
BANDS = (0, 10, 25, 50, 75, 90, 99, 100)
PER_REQUEST = (*(f"b{low}-{high}" for low, high in zip(BANDS, BANDS[1:])), "mean")


def statistic_name(name: str) -> str | None:
    """pdplan's name of a statistic a tool wrote (``mean``, or ``p<q>``: the median is ``p50``), None for
    one it does not compare (the standard deviation, minimum, maximum)."""
    found = _STATISTIC.fullmatch(name)
    if found is None:
        return None
    if found.group(2) is not None:
        q = float(found.group(2))
        return f"p{q:g}" if 0 < q < 100 else None
    return "p50" if name == "median" else "mean"


def statistics(values: np.ndarray, names: Sequence[str] = PER_REQUEST) -> dict[str, float]:
    """The named statistics of per-request values (seconds), NaN (no such clock) left out: ``mean``,
    ``p<q>`` (a percentile) and ``b<low>-<high>`` (the mean of the requests between two percentiles)."""
    values = np.sort(values[np.isfinite(values)])
    if values.size == 0:
        return {}
    return {name: _statistic(values, name) for name in names}


def _statistic(ordered: np.ndarray, name: str) -> float:
    if name == "mean":
        return float(ordered.mean())
    if name.startswith("p"):
        return float(np.percentile(ordered, float(name[1:])))
    low, high = (float(q) / 100 * ordered.size for q in name[1:].split("-"))
    first = int(low)
    return float(ordered[first:max(int(high), first + 1)].mean())


def statistics_stated(measured: dict[str, dict[str, float]]) -> tuple[str, ...]:
    """Every statistic a measurement states: what a replay must compute to be compared with it."""
    return tuple(sorted({name for stats in measured.values() for name in stats}))


@dataclass(frozen=True, kw_only=True, eq=False)
class BenchRun:
    """One benchmark run: its load, its requests' lengths and what it measured."""

    file: str
    format: str
    concurrency: int | None          #: closed loop of this many clients; None: open loop
    #: the rate requests are sent at: an open loop's, or beside ``concurrency`` the rate that paces the clients
    #: (``--request-rate R --max-concurrency C``); None with no concurrency: all at once
    rate_rps: float | None
    prompt_tokens: np.ndarray        #: per request, in the order sent
    output_tokens: np.ndarray
    ttft_s: np.ndarray | None = None  #: per request, when the file has them
    tpot_s: np.ndarray | None = None
    reported: dict | None = None     #: {"ttft": {stat: s}, "tpot": {...}} when only aggregates exist

    def statistics(self) -> dict[str, dict[str, float]]:
        """The measured statistics to match: the band means and mean of every request (:data:`PER_REQUEST`),
        else those reported."""
        if self.ttft_s is not None and self.tpot_s is not None:
            return {"ttft": statistics(self.ttft_s), "tpot": statistics(self.tpot_s)}
        return self.reported or {}


def read_bench(path: str | Path, format: str) -> list[BenchRun]:
    """Every run a saved benchmark result in ``format`` (one of :data:`FORMATS`) holds, in the
    order written: one, or one per line where the tool appends runs (:data:`APPENDED`)."""
    if format not in FORMATS:
        raise PdplanError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}", field="format")
    raw = read_bytes(path, limit=limits.TABLE_BYTES, what="benchmark result")
    reader = {"vllm-bench": _vllm, "sglang-bench": _sglang, "genai-perf": _genai_perf, "aiperf": _aiperf}[format]
    runs = []
    for line, data in _objects(raw, path, appended=format in APPENDED):
        run = reader(_Doc(data, str(path), line=line))
        measured = run.statistics()
        if not measured.get("ttft") or not measured.get("tpot"):
            raise PdplanError("holds no TTFT and TPOT measurements to calibrate against", file=path, line=line,
                              field="ttft")
        runs.append(run)
    return runs


def _objects(raw: bytes, path: str | Path, *, appended: bool) -> list[tuple[int | None, dict]]:
    """The file's JSON objects with their line numbers: the whole file as one object, else (when
    runs are appended) each non-blank line as one; None stands for a file of a single object."""
    try:
        text = raw.decode("utf-8")
        return [(None, _object(json.loads(text), path, None))]
    except UnicodeDecodeError as err:
        raise PdplanError(f"not JSON ({type(err).__name__})", file=path) from None
    except (json.JSONDecodeError, RecursionError) as err:
        several = appended and isinstance(err, json.JSONDecodeError) and err.msg == "Extra data"
        if not several:
            raise PdplanError(f"not JSON ({type(err).__name__})", file=path, line=getattr(err, "lineno", None)) \
                from None
    objects = []
    for number, line in enumerate(text.splitlines(), start=1):
        if len(objects) == limits.MAX_BENCH_RUNS and line.strip():
            raise PdplanError(f"holds more than the {limits.MAX_BENCH_RUNS} runs a calibration replays",
                              file=path, line=number)
        if line.strip():
            try:
                objects.append((number, _object(json.loads(line), path, number)))
            except (json.JSONDecodeError, RecursionError) as err:
                raise PdplanError(f"not JSON ({type(err).__name__}); appended runs must be one JSON object per "
                                  "line", file=path, line=number) from None
    return objects


def _object(data: Any, path: str | Path, line: int | None) -> dict:
    if not isinstance(data, dict):
        raise PdplanError("top level must be a JSON object" if line is None else "each line must be a JSON object",
                          file=path, line=line)
    return data


class _Doc:
    """A JSON object with field access that names the file and the dotted field in errors."""

    def __init__(self, data: dict, file: str, prefix: str = "", line: int | None = None):
        self.data, self.file, self.prefix, self.line = data, file, prefix, line

    def fail(self, key: str, rule: str, value: Any = None) -> PdplanError:
        shown = "" if value is None else f", got {str(value)[:60]!r}"
        return PdplanError(f"{self.prefix}{key} {rule}{shown}", file=self.file, line=self.line,
                           field=f"{self.prefix}{key}")

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def sub(self, key: str) -> "_Doc | None":
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, "must be an object", value)
        return _Doc(value, self.file, f"{self.prefix}{key}.", self.line)

    def number(self, key: str, *, required: bool = True, minimum: float = 0.0, allow_inf: bool = False) -> float | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.fail(key, "is missing")
            return None
        if isinstance(value, str) and allow_inf and value.strip().lower() in ("inf", "infinity"):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, "must be a number", value)
        if math.isinf(value) and allow_inf and value > 0:
            return math.inf
        if not math.isfinite(value) or value < minimum or value > limits.MAX_NUMBER:
            raise self.fail(key, f"must be a finite number >= {minimum:g}", value)
        return float(value)

    def count(self, key: str) -> int | None:
        """A count of requests (None when absent or ""): whole, and at most
        :data:`~pdplan.limits.MAX_BENCH_REQUESTS`, since it sizes the replayed load."""
        if self.data.get(key) in (None, ""):
            return None
        value = self.number(key)
        if value != int(value) or not 1 <= value <= limits.MAX_BENCH_REQUESTS:
            raise self.fail(key, f"must be a whole number of requests in [1, {limits.MAX_BENCH_REQUESTS:,}]", value)
        return int(value)

    def array(self, key: str, *, nested: bool = False) -> list:
        value = self.data.get(key)
        if not isinstance(value, list):
            raise self.fail(key, "must be a list", value)
        for i, item in enumerate(value):
            items = item if nested and isinstance(item, list) else [item]
            if nested and not isinstance(item, list):
                raise self.fail(f"{key}[{i}]", "must be a list", item)
            for x in items:
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                    raise self.fail(f"{key}[{i}]", "must hold finite numbers >= 0", x)
        return value


def _load(doc: _Doc, concurrency: float | None, rate: float | None, *, keys: tuple[str, str] = ("concurrency",
          "request_rate")) -> tuple[int | None, float | None]:
    """(clients, rate): a finite rate alone is an open loop; a concurrency limit with an unlimited rate
    a closed loop; both, a closed loop paced by the rate (each request sent when the rate schedules it
    or when a client frees, if later); neither sends all at once. ``keys`` name the two settings as
    ``doc`` spells them, for errors."""
    if concurrency is not None and (concurrency != int(concurrency) or not 1 <= concurrency <= limits.MAX_CONCURRENCY):
        raise doc.fail(keys[0], f"must be an integer in [1, {limits.MAX_CONCURRENCY:,}]", concurrency)
    clients = None if concurrency is None else int(concurrency)
    if rate is not None and math.isfinite(rate):
        if not 0 < rate <= limits.MAX_RATE_RPS:
            raise doc.fail(keys[1], f"must be > 0 and <= {limits.MAX_RATE_RPS:,.0f}", rate)
        return clients, rate
    return clients, None


def _lengths(doc: _Doc, values: list, key: str) -> np.ndarray:
    """Token counts (whole, in [1, MAX_TOKENS_PER_REQUEST]) checked before they become integers, so
    none is truncated or overflows."""
    bad = next((x for x in values if x != int(x) or not 1 <= x <= limits.MAX_TOKENS_PER_REQUEST), None)
    if not values or bad is not None:
        raise doc.fail(key, f"must hold whole token counts in [1, {limits.MAX_TOKENS_PER_REQUEST:,}]", bad)
    return np.asarray(values, dtype=np.int64)


# --- vLLM and SGLang -------------------------------------------------------------------------------

def _vllm(doc: _Doc, fmt: str = "vllm-bench") -> BenchRun:
    if doc.get("request_rate") == "trace":  # SGLang: sent at a trace's timestamps, which the result lacks
        raise doc.fail("request_rate", "is 'trace': the run followed a trace's timestamps, which its result does "
                                       "not hold; calibrate from runs at a concurrency or a rate")
    concurrency, rate = _load(doc, doc.number("max_concurrency", required=False, minimum=1),
                              doc.number("request_rate", required=False, allow_inf=True),
                              keys=("max_concurrency", "request_rate"))
    if doc.get("ttfts") is not None:
        return _vllm_detailed(doc, fmt, concurrency, rate)
    reported = {clock: {statistic_name(key[:-len(f"_{clock}_ms")]): doc.number(key) / 1e3 for key in doc.data
                        if key.endswith(f"_{clock}_ms") and statistic_name(key[:-len(f"_{clock}_ms")])
                        and doc.get(key) is not None}
                for clock in ("ttft", "tpot")}
    completed = doc.count("completed") or DEFAULT_REQUESTS
    return BenchRun(file=doc.file, format=fmt, concurrency=concurrency, rate_rps=rate,
                    prompt_tokens=_repeated(doc, doc.number("total_input_tokens") / completed, completed,
                                            "total_input_tokens"),
                    output_tokens=_repeated(doc, doc.number("total_output_tokens") / completed, completed,
                                            "total_output_tokens"), reported=reported)


def _sglang(doc: _Doc) -> BenchRun:
    return _vllm(doc, "sglang-bench")


def _repeated(doc: _Doc, mean: float, n: int, key: str) -> np.ndarray:
    """The mean length of ``n`` requests (rounded, at least one token) as each one's length."""
    tokens = max(1, round(mean))
    if tokens > limits.MAX_TOKENS_PER_REQUEST:
        raise doc.fail(key, f"gives {tokens:,} tokens per request, over the {limits.MAX_TOKENS_PER_REQUEST:,} "
                            "a request may have")
    return np.full(n, tokens, np.int64)


def _vllm_detailed(doc: _Doc, fmt: str, concurrency: int | None, rate: float | None) -> BenchRun:
    inputs, outputs = doc.array("input_lens"), doc.array("output_lens")
    ttfts, itls = doc.array("ttfts"), doc.array("itls", nested=True)
    errors = doc.data.get("errors") or [""] * len(ttfts)
    if not isinstance(errors, list):
        raise doc.fail("errors", "must be a list (one error message per request, empty when it succeeded)", errors)
    if not len(inputs) == len(outputs) == len(ttfts) == len(itls) == len(errors):
        raise doc.fail("ttfts", f"must have one entry per request like input_lens ({len(inputs)})", len(ttfts))
    ok = [i for i, e in enumerate(errors) if not e and outputs[i] >= 1]
    if not ok:
        raise doc.fail("errors", "mark every request failed")
    out = np.asarray([outputs[i] for i in ok], dtype=np.int64)
    # TPOT as vLLM defines it: (latency − TTFT) / (output − 1), the latency being TTFT + Σ ITL
    tpot = np.array([sum(itls[i]) / (outputs[i] - 1) if outputs[i] > 1 else np.nan for i in ok])
    return BenchRun(file=doc.file, format=fmt, concurrency=concurrency, rate_rps=rate,
                    prompt_tokens=_lengths(doc, [inputs[i] for i in ok], "input_lens"),
                    output_tokens=_lengths(doc, list(out), "output_lens"),
                    ttft_s=np.asarray([ttfts[i] for i in ok], dtype=float), tpot_s=tpot)


# --- genai-perf and AIPerf ------------------------------------------------------------------------

def _metric(doc: _Doc, key: str, *, seconds: bool) -> dict[str, float] | None:
    """A metric's statistics (seconds for latencies, as written for lengths)."""
    metric = doc.sub(key)
    if metric is None and isinstance(doc.get("records"), dict):  # AIPerf 0.1 nests metrics here
        metric = doc.sub("records").sub(key)
    if metric is None:
        return None
    unit = str(metric.get("unit") or "ms").strip().lower()
    if seconds and unit not in UNITS:
        raise metric.fail("unit", f"must be one of {', '.join(UNITS)}", unit)
    factor = UNITS[unit] if seconds else 1.0
    return {statistic_name(name): metric.number(name) * factor for name in metric.data
            if statistic_name(name) and metric.get(name) is not None}


def _count(doc: _Doc) -> int | None:
    """The run's request count, a system metric with only its average."""
    metric = doc.sub("request_count")
    return None if metric is None else metric.count("avg")


def _setting(doc: _Doc | None, key: str, *, minimum: float = 0.0) -> float | None:
    """A load setting that may be absent or written as "" (None); a client count must be whole
    and a rate positive, checked here where the error can name the setting's full path."""
    if doc is None or doc.get(key) in (None, ""):
        return None
    is_rate = key in ("request_rate", "rate")
    value = doc.number(key, minimum=minimum, allow_inf=is_rate)
    if key == "concurrency" and value != int(value):
        raise doc.fail(key, "must be a whole number of clients", value)
    if is_rate and value <= 0:
        raise doc.fail(key, "must be > 0", value)
    return value


def _aggregate(doc: _Doc, fmt: str, concurrency: float | None, rate: float | None, count: int | None) -> BenchRun:
    ttft = _metric(doc, "time_to_first_token", seconds=True)
    tpot = _metric(doc, "inter_token_latency", seconds=True)
    if not ttft or not tpot:
        raise doc.fail("time_to_first_token" if not ttft else "inter_token_latency", "is missing")
    isl, osl = (_metric(doc, "input_sequence_length", seconds=False),
                _metric(doc, "output_sequence_length", seconds=False))
    if not isl or "mean" not in isl or not osl or "mean" not in osl:
        raise doc.fail("input_sequence_length" if not isl or "mean" not in isl else "output_sequence_length",
                       "needs its avg")
    clients, rate_rps = _load(doc, concurrency, rate)
    n = count or DEFAULT_REQUESTS
    return BenchRun(file=doc.file, format=fmt, concurrency=clients, rate_rps=rate_rps,
                    prompt_tokens=_repeated(doc, isl["mean"], n, "input_sequence_length.avg"),
                    output_tokens=_repeated(doc, osl["mean"], n, "output_sequence_length.avg"),
                    reported={"ttft": ttft, "tpot": tpot})


def _genai_perf(doc: _Doc) -> BenchRun:
    config = doc.sub("input_config")
    if config is None:
        raise doc.fail("input_config", "is missing (it holds the concurrency or request rate to replay)")
    analyzer = config.sub("perf_analyzer")
    stimulus = analyzer.sub("stimulus") if analyzer is not None else None
    load = stimulus if stimulus is not None else config  # releases before March 2025: flat settings
    return _aggregate(doc, "genai-perf", _setting(load, "concurrency", minimum=1), _setting(load, "request_rate"),
                      _count(doc))


def _aiperf(doc: _Doc) -> BenchRun:
    config = doc.sub("input_config")
    if config is None:
        raise doc.fail("input_config", "is missing (it holds the concurrency or request rate to replay)")
    phases = config.get("phases")
    if phases is not None:  # 0.9 on: a list of phases, the profiling one replayed
        if not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
            raise config.fail("phases", "must be a list of objects", phases)
        chosen = [p for p in phases if p.get("name") == "profiling"] or phases[-1:]
        if not chosen:
            raise config.fail("phases", "is empty")
        phase = _Doc(chosen[0], doc.file, f"{config.prefix}phases[{phases.index(chosen[0])}].", doc.line)
        kind = phase.get("type")
        if kind not in ("concurrency", "poisson", "constant", "rate"):
            raise phase.fail("type", "must be concurrency or a request rate (poisson, constant)", kind)
        if kind == "concurrency":
            return _aggregate(doc, "aiperf", _setting(phase, "concurrency", minimum=1), None,
                              phase.count("requests") or _count(doc))
        return _aggregate(doc, "aiperf", None, _setting(phase, "rate"), phase.count("requests") or _count(doc))
    loadgen = config.sub("loadgen")
    if loadgen is None:  # up to 0.8 an unset block is the default: one client
        return _aggregate(doc, "aiperf", 1, None, _count(doc))
    return _aggregate(doc, "aiperf", _setting(loadgen, "concurrency", minimum=1), _setting(loadgen, "request_rate"),
                      loadgen.count("request_count") or _count(doc))
