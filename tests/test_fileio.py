"""Reading inputs safely and writing outputs atomically."""

import os

import pytest

from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, load_yaml, read_text


def test_atomic_write_leaves_no_temp_file(tmp_path):
    atomic_write_text(tmp_path / "out.txt", "hello\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def crash(*args):
        raise OSError("disk on fire")

    monkeypatch.setattr("pdplan.fileio.os.replace", crash)
    with pytest.raises(PdplanError, match="cannot write output"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_binary_file_is_an_input_error_naming_the_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,2\n\x00\x01")
    with pytest.raises(PdplanError, match=r"t.csv:3: file contains binary data"):
        read_text(path)


def test_yaml_python_tag_is_refused_with_its_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\nb: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(PdplanError, match=r"x.yaml:2: invalid YAML"):
        load_yaml(path)


def test_yaml_mapping_remembers_key_lines(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\n\nb:\n  c: 2\n")
    data = load_yaml(path)
    assert data.lines == {"a": 1, "b": 3}
    assert data["b"].lines == {"c": 4}


def test_yaml_repeated_key_is_refused_with_its_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("tp: 4\nb:\n  c: 1\ntp: 8\n")
    with pytest.raises(PdplanError, match=r"x.yaml:4: invalid YAML: duplicate key 'tp'"):
        load_yaml(path)


def test_yaml_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 5\n")
    assert load_yaml(path)["c"] == {"x": 5, "y": 2}


def test_missing_file_is_named(tmp_path):
    with pytest.raises(PdplanError, match=r"nope.yaml: YAML file not found"):
        load_yaml(tmp_path / "nope.yaml")


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    atomic_write_text(tmp_path / "out.txt", "x")
    assert (tmp_path / "out.txt").stat().st_mode & 0o644 == 0o644


def test_writing_over_a_directory_is_an_input_error_and_leaves_no_temp_file(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(PdplanError, match="out: cannot write output: it is a directory"):
        atomic_write_text(tmp_path / "out", "hello\n")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_folder_is_replaced_in_one_exchange_on_linux(tmp_path, monkeypatch):
    from pdplan import fileio

    (tmp_path / "deploy" / "vllm").mkdir(parents=True)
    (tmp_path / "deploy" / "vllm" / "old.sh").write_text("old")
    renames = []
    monkeypatch.setattr(fileio.os, "replace", lambda a, b: renames.append((a, b)) or os.rename(a, b))
    outputs = fileio.Outputs()
    outputs.claim(tmp_path / "deploy", "--out", folder=True)
    outputs.put_folder(tmp_path / "deploy" / "vllm", {"new.sh": "new"}, "--out")
    outputs.commit()
    assert [p.name for p in (tmp_path / "deploy" / "vllm").iterdir()] == ["new.sh"]
    assert [p.name for p in (tmp_path / "deploy").iterdir()] == ["vllm"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    if fileio._exchange(tmp_path / "a", tmp_path / "b"):  # this file system can exchange names
        assert renames == []  # swapped by renameat2: never a moment without the folder


def test_a_folder_is_still_replaced_where_no_exchange_exists(tmp_path, monkeypatch):
    from pdplan import fileio

    (tmp_path / "deploy" / "vllm").mkdir(parents=True)
    (tmp_path / "deploy" / "vllm" / "old.sh").write_text("old")
    monkeypatch.setattr(fileio, "_exchange", lambda a, b: False)
    outputs = fileio.Outputs()
    outputs.put_folder(tmp_path / "deploy" / "vllm", {"new.sh": "new"}, "--out")
    outputs.commit()
    assert [p.name for p in (tmp_path / "deploy" / "vllm").iterdir()] == ["new.sh"]
    assert [p.name for p in (tmp_path / "deploy").iterdir()] == ["vllm"]


def test_ctrl_c_during_commit_waits_for_the_last_rename_and_leaves_no_temp_file(tmp_path, monkeypatch):
    import signal

    from pdplan import fileio
    from pdplan.interrupts import Interrupted, interruptible

    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "b.txt").write_text("old b")
    written = fileio._temp_beside

    def interrupt_while_writing(path, data):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the first temp file is written
        return written(path, data)

    monkeypatch.setattr(fileio, "_temp_beside", interrupt_while_writing)
    outputs = fileio.Outputs()
    outputs.put(tmp_path / "a.txt", "new a")
    outputs.put(tmp_path / "b.txt", "new b")
    with interruptible(), pytest.raises(Interrupted):
        outputs.commit()
    assert (tmp_path / "a.txt").read_text() == "new a" and (tmp_path / "b.txt").read_text() == "new b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]
