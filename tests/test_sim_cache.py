"""The compiled engine's numba cache is dropped whenever any kernel source changes (numba itself
checks a cached function against its own file only, not the kernels it compiled in)."""

from pdplan.sim import fast


def fake_package(tmp_path):
    kernels = tmp_path / "sim" / "fast"
    (kernels / "__pycache__").mkdir(parents=True)
    (kernels / "clock.py").write_text("x = 1\n")
    (kernels / "batch.py").write_text("y = 2\n")
    (tmp_path / "sim" / "events.py").write_text("BOUNDARY = 4\n")
    return kernels


def cached(kernels):
    for name in ("batch.run-1.py311.nbi", "batch.run-1.py311.1.nbc"):
        (kernels / "__pycache__" / name).write_bytes(b"compiled")


def left(kernels):
    return sorted(p.name for p in (kernels / "__pycache__").glob("*.nb?"))


def test_an_edit_to_any_kernel_module_or_the_priorities_drops_the_cache(tmp_path, monkeypatch):
    kernels = fake_package(tmp_path)
    monkeypatch.setattr(fast, "_HERE", kernels)
    cached(kernels)
    fast._drop_stale_kernels()  # no stamp yet: what is there may predate it
    assert left(kernels) == []
    cached(kernels)
    fast._drop_stale_kernels()  # nothing changed: the cache stays
    assert len(left(kernels)) == 2
    (kernels / "clock.py").write_text("x = 3\n")
    fast._drop_stale_kernels()
    assert left(kernels) == []
    cached(kernels)
    (tmp_path / "sim" / "events.py").write_text("BOUNDARY = 5\n")
    fast._drop_stale_kernels()
    assert left(kernels) == []
