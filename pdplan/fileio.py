"""Safe reading of YAML and atomic writing of output files."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import yaml

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.interrupts import interrupts_held


def input_file(path: str | Path, *, what: str, limit: int) -> Path:
    """``path`` as an input may be read: it exists, it is a regular file (not a directory, FIFO,
    device or socket, which could block or never end) and it holds at most ``limit`` bytes."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise PdplanError(f"{what} not found", file=path) from None
    except OSError as err:
        raise PdplanError(f"cannot read {what}: {err.strerror}", file=path) from None
    _check_input(info, path, what, limit)
    return Path(path)


def _check_input(info: os.stat_result, path: str | Path, what: str, limit: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise PdplanError(f"{what} is a directory, expected a file", file=path)
    if not stat.S_ISREG(info.st_mode):
        raise PdplanError(f"{what} is not a regular file (a FIFO, device or socket); give a file", file=path)
    if info.st_size > limit:
        raise PdplanError(f"{what} is {_size(info.st_size)}, over the {_size(limit)} a {what} may be", file=path)


def _size(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


@contextmanager
def _opened(path: str | Path, what: str, limit: int) -> Iterator[BinaryIO]:
    """An input opened for reading. It is opened without blocking (a FIFO put in place after a
    check cannot stall the open) and checked as :func:`input_file` does on the opened file
    itself; OS errors while reading are a one-line PdplanError. Every read and every hash of an
    input goes through here."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PdplanError(f"{what} not found", file=path) from None
    except OSError as err:
        raise PdplanError(f"cannot read {what}: {err.strerror}", file=path) from None
    try:
        _check_input(os.fstat(fd), path, what, limit)
    except PdplanError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        try:
            yield handle
        except OSError as err:
            raise PdplanError(f"cannot read {what}: {err.strerror}", file=path) from None


def _over(path: str | Path, what: str, limit: int) -> PdplanError:
    """A file that grew past ``limit`` since it was checked (or lies about its size)."""
    return PdplanError(f"{what} is over the {_size(limit)} a {what} may be", file=path)


def read_bytes(path: str | Path, *, what: str = "file", limit: int = limits.YAML_BYTES) -> bytes:
    """Read a whole input file of at most ``limit`` bytes (see :func:`input_file`), turning OS
    errors into a one-line PdplanError."""
    with _opened(path, what, limit) as handle:
        size = os.fstat(handle.fileno()).st_size  # read(limit) would set aside the whole limit at once
        data = handle.read(size + 1)
        if len(data) > size:  # it grew since (or lies about its size)
            data += handle.read(limit + 1 - len(data))
    if len(data) > limit:
        raise _over(path, what, limit)
    return data


def read_text(path: str | Path, *, what: str = "file", limit: int = limits.YAML_BYTES) -> str:
    """Read a UTF-8 text file; binary content is an input error, not a crash."""
    data = read_bytes(path, what=what, limit=limit)
    nul = data.find(b"\0")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise PdplanError(f"{what} contains binary data (NUL byte)", file=path, line=line)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise PdplanError(f"{what} is not UTF-8 text (byte 0x{data[err.start]:02x})",
                          file=path, line=line) from None


class LineDict(dict):
    """A mapping read from YAML that remembers the line of each key, for error messages."""

    lines: dict[Any, int]


class _LineLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no python tags, no object construction) that records key lines and
    refuses a document of more than ``limits.YAML_VALUES`` values once its aliases are expanded:
    a "billion laughs" file of 9 anchors, each listing the previous one 8 times, is 72 aliases
    that every later walk of the data would see as 8**9 values. A recursive alias is refused too."""

    def __init__(self, stream):
        super().__init__(stream)
        self._values: dict[int, int] = {}  # id(node) -> values it stands for, aliases expanded

    def compose_node(self, parent, index):
        alias = self.check_event(yaml.AliasEvent)
        mark = self.peek_event().start_mark
        node = super().compose_node(parent, index)
        if id(node) not in self._values:
            if alias:  # an alias to a node still being composed: the node would contain itself
                raise yaml.composer.ComposerError(None, None, "an alias refers to the node that holds it", mark)
            self._values[id(node)] = count = 1 + sum(self._values[id(child)] for child in _children(node))
            if count > limits.YAML_VALUES:
                raise yaml.composer.ComposerError(None, None, f"the document holds more than {limits.YAML_VALUES:,} "
                                                              "values once its aliases are expanded", node.start_mark)
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()  # a repeated key would silently replace the first; merged (<<) keys may be overridden
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        mapping = LineDict(super().construct_mapping(node, deep=deep))
        mapping.lines = {self.construct_object(k, deep=True): k.start_mark.line + 1
                         for k, _ in node.value}
        return mapping


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                            _LineLoader.construct_mapping)


def load_yaml(path: str | Path, *, what: str = "YAML file") -> Any:
    """Parse YAML safely (a ``SafeLoader``); a python tag or a syntax error names the line.

    Mappings come back as :class:`LineDict`, so later field checks can name the line too.
    """
    text = read_text(path, what=what, limit=limits.YAML_BYTES)
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except RecursionError:
        raise PdplanError("invalid YAML: nested too deeply", file=path) from None
    except ValueError as err:  # an integer of more digits than Python converts
        raise PdplanError(f"invalid YAML: {err}", file=path) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = None if mark is None else mark.line + 1
        problem = err.problem or err.context or "invalid YAML"
        raise PdplanError(f"invalid YAML: {problem}", file=path, line=line) from None
    except yaml.YAMLError as err:
        raise PdplanError(f"invalid YAML: {err}", file=path) from None


def sha256_file(path: str | Path, *, what: str = "input", limit: int = limits.TRACE_BYTES) -> str:
    """Hex sha256 of an input's bytes, for provenance records; read as every input is (a FIFO, a
    device, a directory or a missing file is a PdplanError naming ``what``, never an endless read)."""
    return update_digest(hashlib.sha256(), path, what=what, limit=limit).hexdigest()


def update_digest(digest, path: str | Path, *, what: str, limit: int):
    """``digest`` (a hashlib object) updated with an input's bytes, read 1 MiB at a time as
    :func:`read_bytes` reads (at most ``limit`` bytes)."""
    total = 0
    with _opened(path, what, limit) as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
            if total > limit:
                raise _over(path, what, limit)
            digest.update(chunk)
    return digest


@contextmanager
def atomic_output(path: str | Path, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success rename it over ``path``, else delete it.

    A crash or an error half-way leaves either the old file or none, never a partial one.
    The file gets the permissions a plain ``open(path, "w")`` would (mkstemp's are 0600). Any
    OS error (a full disk, a read-only folder) is a one-line PdplanError naming the path.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
    except OSError as err:
        raise PdplanError(f"cannot write output: {err.strerror}", file=path) from None
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except IsADirectoryError:
        raise PdplanError("cannot write output: it is a directory, expected a file path", file=path) from None
    except OSError as err:
        raise PdplanError(f"cannot write output: {err.strerror or err}", file=path) from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_output`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_output`)."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


class Outputs:
    """The files one command writes.

    Each is claimed before any work, so a path that cannot be written fails at once: one that is
    an input of the command, a directory (or, for a folder, a file), a FIFO or a device, or a
    path two flags share. Contents are held in memory while the command runs and written only
    when :meth:`commit` is called at its very end, each to a temp file beside its target and then
    renamed over it: an error anywhere writes nothing, and a kill leaves the old files whole. A
    folder held whole (:meth:`put_folder`) is written as a new folder beside it and swapped in,
    so none of its earlier files survives.
    """

    def __init__(self, *inputs: str | Path | None):
        self._inputs = [Path(p) for p in inputs if p is not None]
        self._claimed: dict[str, str] = {}
        self._staged: dict[Path, bytes] = {}
        self._folders: dict[Path, dict[Path, tuple[bytes, int]]] = {}

    def claim(self, path: str | Path, flag: str, *, folder: bool = False) -> Path:
        """Reserve ``path`` (a file, or with ``folder`` a folder of files) for ``flag``."""
        path = Path(path)
        if os.path.exists(path):
            mode = os.stat(path).st_mode
            if folder and not stat.S_ISDIR(mode):
                raise PdplanError(f"{flag} must name a folder, got a file", file=path, field=flag.lstrip("-"))
            if not folder and stat.S_ISDIR(mode):
                raise PdplanError(f"{flag} names a directory; give a file path", file=path, field=flag.lstrip("-"))
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise PdplanError(f"{flag} names a FIFO, device or socket; pdplan replaces only regular files",
                                  file=path, field=flag.lstrip("-"))
        self._check_not_input(path, flag)
        key = os.path.realpath(path)
        if key in self._claimed:
            raise PdplanError(f"{flag} and {self._claimed[key]} name the same path", file=path,
                              field=flag.lstrip("-"))
        self._claimed[key] = flag
        return path

    def _check_not_input(self, path: Path, flag: str) -> None:
        for source in self._inputs:
            same = (os.path.samefile(path, source) if path.exists() and source.exists()
                    else os.path.realpath(path) == os.path.realpath(source))
            if same:
                raise PdplanError(f"{flag} would overwrite the input {source}; write the output elsewhere",
                                  file=path, field=flag.lstrip("-"))

    def put(self, path: str | Path, data: bytes | str, flag: str = "output") -> None:
        """Hold ``data`` for ``path`` (a claimed file, or a file in a claimed folder)."""
        path = Path(path)
        if os.path.realpath(path) not in self._claimed:
            self._check_not_input(path, flag)
            if path.is_dir():
                raise PdplanError(f"{flag} would replace a directory", file=path, field=flag.lstrip("-"))
        self._staged[path] = _encoded(data)

    def put_folder(self, folder: str | Path, files: dict[str, bytes | str], flag: str, *,
                   executable: frozenset[str] = frozenset()) -> None:
        """Hold the whole content of ``folder`` (in a claimed folder): ``files`` by names relative
        to it, ``executable`` ones with execute permission. On commit it replaces the folder, and
        every earlier file in it goes. A name must stay inside (no absolute path, no ``..``); the
        folder may not be a link or a file, nor hold an input."""
        folder = Path(folder)
        field = flag.lstrip("-")
        if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            raise PdplanError(f"{flag}: pdplan replaces this folder whole, and it is a link or a file; move it away",
                              file=folder, field=field)
        for source in self._inputs:
            if _within(source, folder):
                raise PdplanError(f"{flag} would replace the folder holding the input {source}; write the output "
                                  "elsewhere", file=folder, field=field)
        self._folders[folder] = {_inside(folder, name, flag): (_encoded(data), 0o777 if name in executable else 0o666)
                                 for name, data in files.items()}

    def commit(self) -> None:
        """Write every held file and folder: all to temp files and folders first, then all renamed
        into place. Ctrl-C waits until the last rename, so it leaves every output old or every
        output new, and no temp file."""
        temps: list[tuple[Path, Path]] = []
        built: list[tuple[Path, Path]] = []
        with interrupts_held(), _cleaned(temps, built):
            for path, data in self._staged.items():
                temps.append((_temp_beside(path, data), path))
            for folder, files in self._folders.items():
                built.append((_folder_beside(folder, files), folder))
            for tmp, path in temps:
                try:
                    os.replace(tmp, path)
                except OSError as err:
                    raise PdplanError(f"cannot write output: {err.strerror or err}", file=path) from None
            for tmp, folder in built:
                _swap_folder(tmp, folder)
        self._staged.clear()
        self._folders.clear()


@contextmanager
def _cleaned(temps: list[tuple[Path, Path]], built: list[tuple[Path, Path]]) -> Iterator[None]:
    """Remove whatever temp file or folder is left when the block ends (renamed ones are gone)."""
    try:
        yield
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        for tmp, _ in built:
            shutil.rmtree(tmp, ignore_errors=True)


def _encoded(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _within(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies below it (links resolved)."""
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == os.path.realpath(folder)


def _inside(folder: Path, name: str, flag: str) -> Path:
    """The relative file name ``name`` of a file in ``folder``, refused when it could lead out."""
    parts = name.split("/")
    if "\0" in name or any(part in ("", ".", "..") for part in parts):
        raise PdplanError(f"{flag}: the output file name {name!r} would lead out of its folder (an absolute name "
                          "or '..')", file=folder, field=flag.lstrip("-"))
    return Path(*parts)


def _folder_beside(folder: Path, files: dict[Path, tuple[bytes, int]]) -> Path:
    """A new folder beside ``folder`` holding ``files`` (name -> data, mode before the umask)."""
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".new", dir=folder.parent))
        umask = _umask()
        os.chmod(tmp, 0o777 & ~umask)
        for name, (data, mode) in sorted(files.items()):
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
            os.chmod(tmp / name, mode & ~umask)
        return tmp
    except OSError as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise PdplanError(f"cannot write output: {err.strerror or err}", file=folder) from None


def _swap_folder(tmp: Path, folder: Path) -> None:
    """Put the folder ``tmp`` in the place of ``folder``. Where the kernel can exchange two names
    in one step (Linux's renameat2 RENAME_EXCHANGE) a kill leaves the old folder or the new one,
    never neither; elsewhere the old one is renamed aside, the new one renamed in (the old one
    back on failure). The old one is then removed."""
    old = None
    try:
        if os.path.lexists(folder) and _exchange(tmp, folder):
            shutil.rmtree(tmp)  # the old folder, now under the temporary name
            return
        if os.path.lexists(folder):
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
            os.replace(folder, old)  # onto the empty folder just made: a unique free name
        try:
            os.replace(tmp, folder)
        except OSError:
            if old is not None:
                os.replace(old, folder)
            raise
        if old is not None:
            shutil.rmtree(old)
    except OSError as err:
        raise PdplanError(f"cannot replace the output folder: {err.strerror or err}", file=folder) from None


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


@cache
def _renameat2():
    """The C library's renameat2(2), loaded once; None off Linux or before glibc 2.28."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return function


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` atomically (renameat2(2) with RENAME_EXCHANGE); False where
    the platform, the C library or the file system cannot, so the caller falls back."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # no such call, or not on this file system
        return False
    raise OSError(error, os.strerror(error), str(b))


def _temp_beside(path: Path, data: bytes) -> Path:
    """``data`` in a new temp file in ``path``'s folder (with the permissions open() would give)."""
    folder = path.parent if str(path.parent) else Path(".")
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        return tmp
    except OSError as err:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise PdplanError(f"cannot write output: {err.strerror or err}", file=path) from None


#: Significant digits of fitted or simulated floats written to files: a refit on another machine
#: (another BLAS, another summation order) differs around the 15th digit, far below this.
WRITTEN_DIGITS = 6


def significant(value: float | None, digits: int = WRITTEN_DIGITS) -> float | None:
    """``value`` rounded to ``digits`` significant digits, as written files carry it (None stays)."""
    return None if value is None else float(f"{value:.{digits}g}")


class _Dumper(yaml.SafeDumper):
    """The safe dumper, writing a vocabulary word (a StrEnum member) as the plain string it is."""


_Dumper.add_multi_representer(StrEnum, lambda dumper, word: dumper.represent_str(str(word)))


def dump_yaml(data: Any) -> str:
    """YAML text with keys in the order given, so outputs are byte-stable."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)
