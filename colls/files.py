"""Reading the files a user names and writing the one a user asks for, without surprises.

Input (``colls verify FILE``, ``--hardware PATH``): only a regular file is read, never a device, a pipe
or a socket (``/dev/zero`` would be read forever, a pipe with no writer waited on forever). The type is
checked before opening, the file is opened non-blocking and checked again, and at most a fixed number of
bytes is read (:data:`MAX_XML_BYTES`, :data:`MAX_PROFILE_BYTES`).

Output (``-o PATH``): a regular file or a new name in an existing folder, written only through
:func:`write_atomic` (a temporary file in the same folder, renamed over the target): a device, a pipe,
a folder or a name ending in ``/`` is refused before any work is done, and nothing is written on failure.

Messages quote what a user gave only as a short printable excerpt (:func:`excerpt`), never a whole value.
"""

from __future__ import annotations

import os
import stat
import tempfile

from colls.errors import CollsError, excerpt

MAX_XML_BYTES = 256 * 2**20
MAX_PROFILE_BYTES = 16 * 2**20
# A YAML hardware profile: PyYAML builds every value in Python, about 300 KB a second here even on libyaml's
# parser (a 900 KB file of 30,000 NICs took 3.5 s to read), so a larger one could not be answered in seconds.
# The shipped profiles are 2-3 KB; a graph's links fit a matrix (128 GPUs: 50 KB).
MAX_YAML_PROFILE_BYTES = 2**20


def _mib(n: int) -> str:
    return f"{n // 2**20} MB"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _os_message(e: OSError) -> str:
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        return "no such file"
    if isinstance(e, PermissionError):
        return "permission denied"
    return (e.strerror or type(e).__name__).lower()


def read_text(path: str, limit: int, option: str | None = None) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes.

    Raises CollsError naming ``path`` (or ``option`` when the path is empty) for a missing, unreadable,
    non-regular, oversized or non-UTF-8 file.
    """
    path = os.fspath(path)
    if not path:
        raise CollsError("must name a file, got an empty path", key=option)
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise CollsError(_os_message(e) if isinstance(e, OSError) else "invalid path", source=path) from None
    _check_regular(path, st.st_mode, "read")
    if st.st_size > limit:
        raise CollsError(f"is {st.st_size} bytes; colls reads files of at most {_mib(limit)}", source=path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise CollsError(f"cannot read ({_os_message(e)})", source=path) from None
    try:
        _check_regular(path, os.fstat(fd).st_mode, "read")  # replaced between stat and open
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise CollsError(f"cannot read ({_os_message(e)})", source=path) from None
    finally:
        os.close(fd)
    if size > limit:
        raise CollsError(f"is more than {_mib(limit)}; colls reads files of at most {_mib(limit)}",
                         source=path)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CollsError(f"is not UTF-8 text (byte {e.start} is {data[e.start]:#04x})", source=path) from None


def _check_regular(path: str, mode: int, verb: str) -> None:
    if not stat.S_ISREG(mode):
        raise CollsError(f"is {_kind(mode)}; colls {verb}s only regular files", source=path)


def check_output(path, option: str = "-o") -> str:
    """The path to write for the output option ``option``: an existing regular file (a symbolic link is
    followed) or a new name in an existing folder. Refuses anything else, naming the option."""
    path = os.fspath(path)
    quoted = excerpt(path, 80)
    if not path:
        raise CollsError("must name a file, got an empty path", key=option)
    if "\0" in path:
        raise CollsError(f"{quoted} is not a valid path", key=option)
    if path.endswith(("/", os.sep)) or os.path.basename(path) in (".", ".."):
        raise CollsError(f"{quoted} names a folder; give a file name", key=option)
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise CollsError(f"{quoted}: {_os_message(e)}", key=option) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise CollsError(f"{quoted} is {_kind(st.st_mode)}; colls writes only regular files", key=option)
    if st is not None and not os.access(target, os.W_OK):
        # the atomic rename would replace it anyway (the folder is writable): refuse as cp or > would
        raise CollsError(f"{quoted} is write-protected; make it writable or remove it first", key=option)
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        raise CollsError(f"{quoted}: folder {excerpt(folder, 80)} does not exist", key=option)
    return target


def write_atomic(path, text: str | bytes, option: str | None = "-o") -> None:
    """Write ``text`` (ASCII text, or bytes as they are) to ``path`` so that readers see either the old
    file or the whole new one.

    ``path`` must pass :func:`check_output`. The text goes to a temporary file in the same folder, is
    flushed to disk, then renamed over ``path``; on any failure the temporary file is removed and
    ``path`` is left as it was.
    """
    target = check_output(path, option)
    folder = os.path.dirname(target) or "."
    name = os.path.basename(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise CollsError(f"cannot write there ({_os_message(e)})", source=str(path)) from None
    try:
        binary = isinstance(text, bytes)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="ascii", newline="\n")) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        check_output(target, option)  # still a regular file or absent, just before the rename
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise CollsError(f"cannot write ({_os_message(e)})", source=str(path)) from None
        raise
