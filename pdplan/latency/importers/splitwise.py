"""Splitwise's ``perf_model.csv`` read into measured points (prefill batches and decode steps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdplan.fileio import sha256_file
from pdplan.latency.fit import ShapePoints, decode_point, prefill_point
from pdplan.latency.importers.common import Row, csv_rows, source_label

#: A Splitwise run whose e2e_time implies more than this many times its decode steps was
#: preempted or restarted; its token_time is not the step time of a batch of that size.
SPLITWISE_E2E_FACTOR = 1.5

SPLITWISE_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time",
                     "token_time", "e2e_time", "tensor_parallel")


def read_splitwise(path: str | Path, *, label: str | None = None) -> tuple[ShapePoints, ...]:
    """Measured points of every (model, hardware, TP) in Splitwise's ``perf_model.csv``; PP is 1.

    Columns: ``model, hardware, prompt_size, batch_size, token_size, prompt_time, token_time,
    e2e_time, tensor_parallel`` (the power columns are not read). Each row is one run of
    ``batch_size`` requests of ``prompt_size`` prompt tokens that generate ``token_size`` tokens.

    * **Prefill**: ``prompt_time`` (ms) is one prefill batch of B prompts of ``prompt_size``.
    * **Decode**: ``token_time`` (ms) is the mean time per output token after the first; the data
      bear this reading out: on the uncapped GPUs every batched run (B ≥ 2, 128 tokens) has
      ``e2e_time = prompt_time + token_time·(token_size − 1)`` within 1%, but for llama2-70b TP2
      at batch 32 (A100, +16%) and 64 (13–16×). So the run made
      ``n = (e2e_time − prompt_time)/token_time`` decode steps, and ``token_time`` is the step
      time of a batch of B requests at their mean context. Step i runs with ``prompt_size + i``
      tokens of context, so the mean over steps 1..n is ``prompt_size + (n + 1)/2`` and
      ``Σctx = B·(prompt_size + (n + 1)/2)``. n is the median over the repeats of a grid point,
      at most ``token_size − 1``: long runs stop early (for 1024–8192 tokens ``e2e_time``
      implies a median of about 600 steps — end-of-sequence), and the context they ran at is
      what their time measured.
    * **Rejected decode rows**: a run whose ``e2e_time`` implies more than
      :data:`SPLITWISE_E2E_FACTOR` × (token_size − 1) steps did far more work than its tokens
      explain (preemption and recomputation — llama2-70b TP2 at batch 64 needs 41k KV tokens,
      most of the 51k that 90% of two 80 GiB GPUs hold beside the weights, before activations);
      its token_time is reported as an outlier, never fitted.

    The capped ``h100-80gb-pcap`` rows repeat the uncapped H100's token_time and e2e_time
    (Splitwise found the token phase insensitive to the cap); only their prompt_time differs.
    """
    file = str(path)
    rows = csv_rows(path, SPLITWISE_COLUMNS, what="Splitwise perf_model CSV", allow_extra=True)
    runs: dict[tuple, list[tuple[Row, dict]]] = {}
    for row in rows:
        run = {
            "model": row.text("model"), "hardware": row.text("hardware"),
            "tp": row.integer("tensor_parallel"),
            "prompt": row.integer("prompt_size"), "batch": row.integer("batch_size"),
            "tokens": row.integer("token_size", minimum=2),
            "prompt_ms": row.number("prompt_time"), "token_ms": row.number("token_time"),
            "e2e_ms": row.number("e2e_time"),
        }
        if run["e2e_ms"] < run["prompt_ms"] + run["token_ms"]:
            raise row.fail("e2e_time", f"must be at least prompt_time + token_time "
                           f"({run['prompt_ms'] + run['token_ms']:.6g} ms: one decode step)",
                           row.values["e2e_time"].strip())
        key = (run["model"], run["hardware"], run["tp"], run["prompt"], run["batch"], run["tokens"])
        runs.setdefault(key, []).append((row, run))

    sha = sha256_file(path)
    points: dict[tuple[str, str, int], list] = {}
    for (model, hardware, tp, prompt, batch, tokens), members in sorted(runs.items()):
        bucket = points.setdefault((model, hardware, tp), [])
        limit = SPLITWISE_E2E_FACTOR * (tokens - 1)
        steps = [(r["e2e_ms"] - r["prompt_ms"]) / r["token_ms"] for _, r in members]
        kept = [s for s in steps if s <= limit]
        n = min(tokens - 1, float(np.median(kept))) if kept else tokens - 1
        context = batch * (prompt + (n + 1) / 2)
        for (row, run), s in zip(members, steps):
            origin = f"line {row.line}"
            bucket.append(prefill_point(batch_size=batch, prompt_tokens=prompt,
                                        latency_s=run["prompt_ms"] / 1e3, origin=origin))
            rejected = ""
            if s > limit:
                rejected = (f"e2e_time implies more than {SPLITWISE_E2E_FACTOR:g}x the {tokens - 1} "
                            f"decode steps of {tokens} tokens (preempted or restarted run; its "
                            "token_time is not a step time)")
            bucket.append(decode_point(batch_size=batch, context_tokens=context,
                                       latency_s=run["token_ms"] / 1e3, origin=origin,
                                       rejected=rejected))
    notes = ("Splitwise perf_model.csv: prefill = prompt_time of B prompts; decode step = "
             "token_time at Σctx = B·(prompt + (n+1)/2), n = (e2e_time − prompt_time)/token_time "
             f"decode steps (≤ token_size − 1); runs implying > {SPLITWISE_E2E_FACTOR:g}x their steps "
             "are rejected for decode")
    return tuple(
        ShapePoints(model=model, gpu=hardware, tp=tp, pp=1, points=tuple(bucket),
                    source=source_label(path, label), sha256=sha, file=file, notes=notes)
        for (model, hardware, tp), bucket in sorted(points.items())
    )
