"""The profile file: every shipped profile loads, and impossible latencies are refused."""

import pytest

from pdplan.errors import PdplanError
from pdplan.latency.profile import load_profile, profile_files, shipped_profiles_dir


def test_every_shipped_profile_loads_with_positive_latencies():
    for path in profile_files(shipped_profiles_dir()):
        profile = load_profile(path)
        assert profile.prefill_time_s([1]) > 0 and profile.decode_step_s(1, 1) > 0


def test_a_profile_with_negative_latency_is_refused(tmp_path):
    source = profile_files(shipped_profiles_dir())[0]
    text = source.read_text()
    broken = tmp_path / "neg.yaml"
    decode_start = text.index("decode:")
    head, tail = text[:decode_start], text[decode_start:]
    pieces_at = tail.index("pieces_ms:")
    line_end = tail.index("\n", pieces_at)
    next_end = tail.index("\n", line_end + 1)
    tail = tail[:line_end + 1] + "    - [-1000, -5, -1]" + tail[next_end:]
    broken.write_text(head + tail)
    with pytest.raises(PdplanError, match=r"neg.yaml:\d+: decode gives -10\d\d ms for one request of one token"):
        load_profile(broken)
