"""Bad traces: each gives exactly one ``Error:`` line naming file, line and field, and exit code 2."""

from __future__ import annotations

import pytest

from pdplan.errors import PdplanError
from pdplan.workload import load_trace

NATIVE = "arrival_s,prompt_tokens,output_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
MOON = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
HEADERS = ("azure (TIMESTAMP,ContextTokens,GeneratedTokens); burstgpt (Timestamp,Request tokens,"
           "Response tokens); lengths (num_prefill_tokens,num_decode_tokens); native (arrival_s,"
           "prompt_tokens,output_tokens)")

# id, file name, content (None: do not create; "DIR": a directory), --format, field, the Error line
CASES = [
    ("missing-file", "t.csv", None, None, None, "t.csv: trace not found"),
    ("directory", "t.csv", "DIR", None, None, "t.csv: trace is a directory, expected a file"),
    ("empty-file", "t.csv", "", None, None, "t.csv:1: trace is empty: expected a header line"),
    ("blank-lines-only", "t.csv", "\n  \n\n", None, None, "t.csv:1: trace is empty: expected a header line"),
    ("header-only", "t.csv", NATIVE, None, None, "t.csv:1: trace has a header but no requests"),
    ("negative-prompt", "t.csv", NATIVE + "0.0,10,5\n1.0,-5,5\n", None, "prompt_tokens",
     "t.csv:3: prompt_tokens must be an integer from 1 to 10,000,000, got '-5'"),
    ("zero-output", "t.csv", NATIVE + "0.0,10,0\n", None, "output_tokens",
     "t.csv:2: output_tokens must be an integer from 1 to 10,000,000, got '0'"),
    ("text-in-number", "t.csv", NATIVE + "0.0,10,5\n1.0,abc,5\n", None, "prompt_tokens",
     "t.csv:3: prompt_tokens must be an integer from 1 to 10,000,000, got 'abc'"),
    ("fraction-in-integer", "t.csv", NATIVE + "0.0,12.5,5\n", None, "prompt_tokens",
     "t.csv:2: prompt_tokens must be an integer from 1 to 10,000,000, got '12.5'"),
    ("integer-overflow", "t.csv", NATIVE + "0.0,99999999999999999999,5\n", None, "prompt_tokens",
     "t.csv:2: prompt_tokens must be an integer from 1 to 10,000,000, got '99999999999999999999'"),
    ("empty-field", "t.csv", NATIVE + "0.0,10,5\n1.0,,5\n", None, "prompt_tokens",
     "t.csv:3: prompt_tokens must be an integer from 1 to 10,000,000, got ''"),
    ("nan-arrival", "t.csv", NATIVE + "0.0,10,5\nnan,10,5\n", None, "arrival_s",
     "t.csv:3: arrival_s must be a finite number of seconds within ±1e+10, got 'nan'"),
    ("inf-arrival", "t.csv", NATIVE + "0.0,10,5\ninf,10,5\n", None, "arrival_s",
     "t.csv:3: arrival_s must be a finite number of seconds within ±1e+10, got 'inf'"),
    ("unsorted-arrivals", "t.csv", NATIVE + "0.0,1,1\n2.0,1,1\n1.0,1,1\n", None, "arrival_s",
     "t.csv:4: arrival_s must be non-decreasing, got '1.0' after '2.0' on line 3; "
     "pass --sort to sort stably"),
    ("extra-field", "t.csv", NATIVE + "0.0,1,1\n1.0,1,1,9\n", None, None,
     "t.csv:3: row has 4 fields, the header has 3"),
    ("extra-field-in-first-row", "t.csv", NATIVE + "0.0,1,1,9\n1.0,1,1\n", None, None,
     "t.csv:2: row has 4 fields, the header has 3"),
    ("missing-field", "t.csv", NATIVE + "0.0,1,1\n1.0,1\n", None, None,
     "t.csv:3: row has 2 fields, the header has 3"),
    ("blank-lines-keep-physical-line-numbers", "t.csv", NATIVE + "0.0,1,1\n\n   \n1.0,x,1\n", None,
     "prompt_tokens", "t.csv:5: prompt_tokens must be an integer from 1 to 10,000,000, got 'x'"),
    ("nul-byte", "t.csv", NATIVE + "0.0,1,1\n\0\1\2\n", None, None,
     "t.csv:3: trace contains binary data (NUL byte)"),
    ("binary-file", "t.csv", b"\x1f\x8b\x08\x00\x00\x00\xff", None, None,
     "t.csv:1: trace contains binary data (NUL byte)"),
    ("not-utf8", "t.csv", NATIVE.encode() + b"0.0,1,1\n1.0,\xff,1\n", None, None,
     "t.csv:3: trace is not UTF-8 text (byte 0xff)"),
    ("unknown-header", "t.csv", "a,b,c\n1,2,3\n", None, None,
     f"t.csv:1: unrecognised trace header 'a,b,c'; expected columns of {HEADERS}, mooncake JSONL, "
     "or pass --format"),
    ("unknown-format", "t.csv", NATIVE + "0.0,1,1\n", "parquet", None,
     "unknown trace format 'parquet'; expected one of azure, burstgpt, lengths, mooncake, native"),
    ("missing-column", "t.csv", "arrival_s,prompt_tokens\n0.0,1\n", "native", "output_tokens",
     "t.csv:1: missing column 'output_tokens' for format native; the header has arrival_s, prompt_tokens"),
    ("duplicate-column", "t.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0.0,1,1,1\n",
     None, "prompt_tokens", "t.csv:1: column 'prompt_tokens' appears 2 times in the header"),
    ("duplicate-request-id", "t.csv", "arrival_s,prompt_tokens,output_tokens,request_id\n"
     "0.0,1,1,r1\n1.0,1,1,r2\n2.0,1,1,r1\n", None, "request_id",
     "t.csv:4: request_id must be unique, got 'r1' again (first on line 2)"),
    ("bad-prefix-hashes", "t.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes\n"
     "0.0,600,1,1 2\n1.0,600,1,1 x\n", None, "prefix_hashes",
     "t.csv:3: prefix_hashes must be space-separated integers, got '1 x'"),
    ("prefix-hash-beyond-int64", "t.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes\n"
     "0.0,600,1,9223372036854775807 9223372036854775808\n", None, "prefix_hashes",
     "t.csv:2: prefix_hashes values must lie in [-2**63, 2**63), got '9223372036854775807 9223372036854775808'"),
    ("too-many-prefix-blocks", "t.csv", "arrival_s,prompt_tokens,output_tokens,prefix_hashes\n"
     "0.0,600,1,1 2 3\n", None, "prefix_hashes",
     "t.csv:2: prefix_hashes has 3 blocks, but prompt_tokens 600 fills at most 2 blocks of 512 tokens"),
    ("azure-bad-timestamp", "t.csv", AZURE + "2023-11-16 18:17:03.9799600,10,5\nyesterday,10,5\n", None,
     "TIMESTAMP", "t.csv:3: TIMESTAMP must be a timestamp like '2023-11-16 18:17:03.9799600', got 'yesterday'"),
    ("azure-unsorted", "t.csv", AZURE + "2023-11-16 18:17:03.9799600,10,5\n2023-11-16 18:17:02.0000000,10,5\n",
     None, "TIMESTAMP", "t.csv:3: TIMESTAMP must be non-decreasing, got '2023-11-16 18:17:02.0000000' "
     "after '2023-11-16 18:17:03.9799600' on line 2; pass --sort to sort stably"),
    ("azure-zero-context", "t.csv", AZURE + "2023-11-16 18:17:03.9799600,0,5\n", None, "ContextTokens",
     "t.csv:2: ContextTokens must be an integer from 1 to 10,000,000, got '0'"),
    ("burstgpt-all-failed", "t.csv", BURST + "5,ChatGPT,472,0,472,Conversation log\n"
     "6,ChatGPT,10,0,10,Conversation log\n", None, "Response tokens",
     "t.csv: no successful requests: all 2 rows have 0 Response tokens"),
    ("burstgpt-empty-request", "t.csv", BURST + "5,ChatGPT,472,18,490,Conversation log\n"
     "6,ChatGPT,0,7,7,Conversation log\n", None, "Request tokens",
     "t.csv:3: Request tokens must be an integer from 1 to 10,000,000, got '0'"),
    ("lengths-zero-decode", "t.csv", "num_prefill_tokens,num_decode_tokens\n5,3\n5,0\n", None,
     "num_decode_tokens", "t.csv:3: num_decode_tokens must be an integer from 1 to 10,000,000, got '0'"),
    ("jsonl-truncated-line", "t.jsonl", MOON + '{"timestamp": 5, "input_length": 10, "outp\n', None, None,
     "t.jsonl:2: invalid JSON: Unterminated string starting at column 38"),
    ("jsonl-not-an-object", "t.jsonl", MOON + "[1, 2]\n", "mooncake", None,
     "t.jsonl:2: each line must be a JSON object, got '[1, 2]'"),
    ("jsonl-missing-field", "t.jsonl", '{"timestamp": 0, "input_length": 6, "hash_ids": []}\n', None,
     "output_length", "t.jsonl:1: missing field 'output_length'"),
    ("jsonl-fractional-length", "t.jsonl", MOON + '{"timestamp": 1, "input_length": 10.5, '
     '"output_length": 5, "hash_ids": []}\n', None, "input_length",
     "t.jsonl:2: input_length must be an integer from 1 to 10,000,000, got 10.5"),
    ("jsonl-length-beyond-int64", "t.jsonl", '{"timestamp": 0, "input_length": 100000000000000000000, '
     '"output_length": 5, "hash_ids": []}\n', None, "input_length",
     "t.jsonl:1: input_length must be an integer from 1 to 10,000,000, got 100000000000000000000"),
    ("jsonl-nan-timestamp", "t.jsonl", MOON + '{"timestamp": NaN, "input_length": 10, '
     '"output_length": 5, "hash_ids": []}\n', None, "timestamp",
     "t.jsonl:2: timestamp must be a finite number within ±1e+13, got NaN"),
    ("jsonl-unsorted", "t.jsonl", '{"timestamp": 9, "input_length": 10, "output_length": 5, "hash_ids": []}\n'
     "\n" + MOON, None, "timestamp",
     "t.jsonl:3: timestamp must be non-decreasing, got 0 after 9 on line 1; pass --sort to sort stably"),
    ("jsonl-too-many-blocks", "t.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5, '
     '"hash_ids": [1, 2]}\n', None, "hash_ids",
     "t.jsonl:1: hash_ids has 2 blocks, but input_length 10 fills at most 1 blocks of 512 tokens"),
    ("jsonl-hash-ids-not-a-list", "t.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5, '
     '"hash_ids": "ab"}\n', None, "hash_ids", 't.jsonl:1: hash_ids must be a list of integers, got "ab"'),
]


@pytest.fixture
def bad_trace(tmp_path, monkeypatch):
    """Write one corpus case into an empty working folder; returns its relative name."""
    monkeypatch.chdir(tmp_path)

    def write(name: str, content: str | bytes | None) -> str:
        if content == "DIR":
            (tmp_path / name).mkdir()
        elif content is not None:
            data = content.encode() if isinstance(content, str) else content
            (tmp_path / name).write_bytes(data)
        return name

    return write


@pytest.mark.parametrize("case_id, name, content, fmt, field, expected", CASES,
                         ids=[case[0] for case in CASES])
def test_bad_trace_gives_one_error_line_and_exit_2(run_cli, bad_trace, case_id, name, content, fmt,
                                                    field, expected):
    """`trace stats` prints exactly ``Error: <file>:<line>: <message>`` and nothing else."""
    args = ["trace", "stats", bad_trace(name, content)] + (["--format", fmt] if fmt else [])
    code, out, err = run_cli(*args)
    assert code == 2
    assert out == ""
    assert err == f"Error: {expected}\n"
    assert "Traceback" not in err


@pytest.mark.parametrize("case_id, name, content, fmt, field, expected", CASES,
                         ids=[case[0] for case in CASES])
def test_bad_trace_error_carries_its_field(bad_trace, case_id, name, content, fmt, field, expected):
    """The library's PdplanError names the offending field, for tools that point at it."""
    with pytest.raises(PdplanError) as caught:
        load_trace(bad_trace(name, content), format=fmt)
    assert caught.value.field == field
    assert str(caught.value) == expected
