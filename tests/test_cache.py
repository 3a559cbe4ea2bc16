"""The goodput cache: hits only for identical keys, misses when disabled or corrupt."""

from pdplan.cache import ResultCache, cache_key, default_cache_dir


def test_a_stored_value_comes_back(tmp_path):
    cache = ResultCache(tmp_path)
    cache.put(cache_key({"a": 1}), {"goodput_rps": 3.5})
    assert cache.get(cache_key({"a": 1})) == {"goodput_rps": 3.5}
    assert cache.hits == 1


def test_key_does_not_depend_on_dict_order():
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})


def test_a_changed_part_misses(tmp_path):
    cache = ResultCache(tmp_path)
    cache.put(cache_key({"seed": 1}), 1)
    assert cache.get(cache_key({"seed": 2})) is None


def test_disabled_cache_always_misses(tmp_path):
    cache = ResultCache(tmp_path, enabled=False)
    cache.put("k" * 64, 1)
    assert cache.get("k" * 64) is None
    assert not any(tmp_path.iterdir())


def test_corrupt_entry_is_a_miss(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key({"x": 1})
    cache.put(key, 1)
    (tmp_path / key[:2] / f"{key}.json").write_text("{not json")
    assert cache.get(key) is None


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"


import json  # noqa: E402

import pytest  # noqa: E402


@pytest.mark.parametrize("entry", ["{}", "[]", '"a string"', "null", '{"sha256": "0", "value": 1}'],
                         ids=["empty-object", "list", "string", "null", "wrong-checksum"])
def test_an_entry_that_parses_but_is_not_one_of_ours_is_a_miss(tmp_path, entry):
    cache = ResultCache(tmp_path)
    key = cache_key({"x": 1})
    cache.put(key, 1)
    (tmp_path / key[:2] / f"{key}.json").write_text(entry)
    assert cache.get(key) is None and cache.misses == 1


def test_a_hand_edited_value_fails_its_checksum(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key({"x": 1})
    cache.put(key, {"goodput_rps": 3.5})
    path = tmp_path / key[:2] / f"{key}.json"
    entry = json.loads(path.read_text())
    entry["value"]["goodput_rps"] = 1e6
    path.write_text(json.dumps(entry))
    assert cache.get(key) is None


def test_a_value_that_does_not_decode_is_a_miss(tmp_path):
    cache = ResultCache(tmp_path)
    key = cache_key({"x": 1})
    cache.put(key, {"rate": "fast"})
    assert cache.get(key, lambda v: float(v["rate"])) is None
    assert cache.get(key, lambda v: v["missing"]) is None


def test_an_unwritable_folder_warns_once_and_the_run_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    said = []
    cache = ResultCache(blocker / "cache", warn=said.append)
    for i in range(3):
        cache.put(cache_key({"i": i}), i)
        assert cache.get(cache_key({"i": i})) is None
    assert len(said) == 1 and "going on without it" in said[0]
