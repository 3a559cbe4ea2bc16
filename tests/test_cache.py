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
