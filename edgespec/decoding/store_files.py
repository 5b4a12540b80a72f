"""The memory store's files, handled as ssh handles its own: the folder, the store file,
the temporary file of a save and the lock, each checked before it is trusted.

- The folder (``check_folder``) must be a folder, owned by this user and writable by
  nobody else (``EDGESPEC_MEMORY_DIR=/tmp`` is refused, one line); the folders it
  creates are 0700 whatever the umask. Its path is walked from the root as ssh checks
  ``~/.ssh``'s: every folder on it this user's or root's and writable by nobody else,
  or a sticky shared folder of root's (``/tmp``), where a symbolic link is never
  followed (another user may have planted it: saves and ``clear`` would go where it
  points). The folder itself is opened ``O_NOFOLLOW|O_DIRECTORY`` and checked by
  ``fstat``.
- A store file is opened only if ``lstat`` says it is a regular file (``open_regular``:
  never a FIFO, a device or a folder; a symbolic link is not followed), with
  ``O_NOFOLLOW|O_NONBLOCK``, and its owner and mode are checked like the folder's. Its
  size is the caller's to check before reading (``read_exact`` reads what it is asked).
- A save writes a ``mkstemp`` file (``O_CREAT|O_EXCL|O_NOFOLLOW``, 0600, a unique name)
  in the store's folder (``temp_file``), so nobody can plant the name beforehand.
- ``StoreLock``: ``fcntl.flock`` on ``<store>.lock``, which also holds the store's
  *generation*: ``clear`` adds one, and a save that finds another generation than the
  one its run loaded knows the store was cleared meanwhile. A lock held longer than
  ``LOCK_WAIT`` seconds is a refusal, not a hang. The lock file is never deleted (a
  deleted lock file is how two processes end up holding "the" lock at once). It is
  opened ``O_NOFOLLOW`` and must be a regular file of this user's with one name: a
  symbolic or hard link there is refused before anything is written through it, for
  a shared lock (a run's start) as for an exclusive one.
- ``printable``: a string from a file, its control characters written as escapes.

Every problem is an ``Unusable`` (the path and why, in words); what to do about it is the
caller's (``suffix_store``: one warning and a cold start, or a save refused). It knows
nothing of the file format.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; saves are not serialized there
    fcntl = None  # type: ignore[assignment]

LOCK_WAIT = 10.0  # seconds a save or clear waits for another process's lock
LOCK_SUFFIX = ".lock"
_RM = " (the lock file only: the memory is the file beside it)"


class Unusable(Exception):
    """A file or folder of the store that cannot be used: ``path`` and ``why``."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(why)
        self.path = Path(path)
        self.why = why


class Refused(Unusable):
    """A problem a save cannot get past (a newer edgespec's file, a folder or a FIFO at
    the store's path, the folder itself): nothing is loaded, and nothing saved."""


def kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "a file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\x1b``, ``\\u202e``): C0,
    DEL and C1 (ESC and CSI among them), line and paragraph separators, and the bidi
    controls. A name read from a file then prints neither terminal commands (a title, a
    cleared screen) nor a line of its own, nor text that reads backwards."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def check_owner(path: Path, st: os.stat_result, what: str) -> None:
    """Refuse ``path`` when another user owns it or others may write it (as ssh does)."""
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise Unusable(path, f"is owned by another user (uid {st.st_uid}); refused: use a {what} of your own")
    if st.st_mode & 0o022:
        raise Unusable(
            path,
            f"is writable by others (mode {stat.S_IMODE(st.st_mode):o}); refused: "
            f"`chmod go-w` it or use a {what} of your own",
        )


def check_folder(directory: Path, *, create: bool = False) -> bool:
    """Whether the store folder exists (created 0700 with ``create``); ``Unusable`` when
    it is not a folder, not this user's alone, or reached in a way another user could
    have chosen. Its path is walked from the root without trusting a link
    (``_walk``): each folder on it must be owned by this user or root and writable by
    nobody else, or be a shared folder with the sticky bit that root owns (``/tmp``),
    and a symbolic link is followed only where it sits in a folder nobody else may
    write (``~/.cache`` elsewhere: checked where it leads), never in a shared one. The
    folder itself is opened with ``O_NOFOLLOW|O_DIRECTORY`` and its owner and mode are
    read from the opened folder, so nothing swapped in since is trusted."""
    for _ in range(256):  # one missing folder created per pass (a path has fewer parts)
        real, missing = _walk(directory)
        if missing is None:
            break
        if not create:
            return False
        try:
            os.mkdir(missing, 0o700)  # 0700 whatever the umask (a umask only takes bits away)
        except FileExistsError:
            pass  # made meanwhile (by another run, or another user): the next pass checks it
        except OSError as e:
            raise Unusable(missing, f"cannot be created ({e.strerror or e})") from None
    else:
        raise Unusable(directory, "cannot be created (too many folders to make)")
    st = _opened_stat(directory, real)
    if not stat.S_ISDIR(st.st_mode):
        raise Unusable(directory, f"is {kind(st.st_mode)}, not a folder (check EDGESPEC_MEMORY_DIR)")
    check_owner(directory, st, "folder")
    return True


def _opened_stat(directory: Path, real: str) -> os.stat_result:
    """The folder's stat, read from the folder opened without following a link."""
    if os.name != "posix":
        return os.stat(real)  # (Windows: a folder cannot be opened as a file)
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise Unusable(directory, f"cannot be opened as a folder ({e.strerror or e})") from None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


_FOLDER_HINT = "set EDGESPEC_MEMORY_DIR to a folder of your own"


def _shared(st: os.stat_result) -> bool:
    """A folder others may write that is safe to pass through: sticky and root's (/tmp)."""
    return bool(st.st_mode & 0o022) and bool(st.st_mode & stat.S_ISVTX) and st.st_uid == 0


def _check_parent(path: str, st: os.stat_result) -> None:
    """A folder on the way to the store: this user's or root's, and writable by nobody
    else unless it is sticky and root's (``_shared``)."""
    if not stat.S_ISDIR(st.st_mode):
        raise Unusable(path, f"is {kind(st.st_mode)}, not a folder (check EDGESPEC_MEMORY_DIR)")
    if not hasattr(os, "geteuid"):
        return
    if st.st_uid not in (0, os.geteuid()):
        raise Unusable(
            path,
            f"is owned by another user (uid {st.st_uid}), and the memory folder is inside it: refused; {_FOLDER_HINT}",
        )
    if st.st_mode & 0o022 and not _shared(st):
        raise Unusable(
            path,
            f"is writable by others (mode {stat.S_IMODE(st.st_mode):o}), and the memory folder is inside it: "
            f"refused; `chmod go-w` it or {_FOLDER_HINT}",
        )


def _walk(directory: Path) -> tuple[str, str | None]:
    """``directory`` resolved component by component from the root, each folder checked
    (``_check_parent``; the last one is the caller's to check, opened): ``(its real path,
    None)``, or ``("", the real path of the first folder missing on the way)``.
    ``Unusable`` for a symbolic link in a shared folder (anyone may have planted it
    there, or may replace it), a part that is not a folder, or too many links."""
    if os.name != "posix":
        path = os.path.abspath(directory)
        return path, (None if os.path.lexists(path) else path)
    todo = list(reversed(Path(os.path.join(os.getcwd(), directory)).parts[1:]))  # (no normpath: ".." is walked)
    stack: list[tuple[str, bool]] = [("/", _shared(os.lstat("/")))]
    links = 0
    while todo:
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if len(stack) > 1:
                stack.pop()
            continue
        parent, parent_shared = stack[-1]
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return "", path
        except OSError as e:
            raise Unusable(path, f"cannot be read ({e.strerror or e})") from None
        if stat.S_ISLNK(st.st_mode):
            if parent_shared:
                raise Unusable(
                    path,
                    f"is a symbolic link in {parent}, a folder every user may write (anyone could have planted "
                    f"it): not followed, nothing saved or removed there; remove the link and {_FOLDER_HINT}",
                )
            links += 1
            if links > 40:
                raise Unusable(directory, "has too many symbolic links on its path (a loop?)")
            target = os.readlink(path)
            todo.extend(reversed(Path(target).parts[1:] if os.path.isabs(target) else Path(target).parts))
            if os.path.isabs(target):
                del stack[1:]
            continue
        if todo:  # a folder on the way; the last one is checked opened, by the caller
            _check_parent(path, st)
        elif not stat.S_ISDIR(st.st_mode):
            raise Unusable(path, f"is {kind(st.st_mode)}, not a folder (check EDGESPEC_MEMORY_DIR)")
        stack.append((path, _shared(st)))
    return stack[-1][0], None


def lexists(path: Path) -> bool:
    return os.path.lexists(path)


def open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """An fd open for reading on the regular file ``path`` and its stat; None if nothing
    is there. ``Unusable``: a symbolic link, a FIFO, a folder or a device (never opened,
    so a FIFO cannot hang the read), or a file another user owns or may write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unusable(path, f"cannot be read ({e.strerror or e})") from None
    if stat.S_ISLNK(st.st_mode):
        raise Unusable(path, "is a symbolic link (not followed; a save replaces the link itself)")
    if not stat.S_ISREG(st.st_mode):
        raise Unusable(path, f"is {kind(st.st_mode)}, not a memory file: remove it")
    check_owner(path, st, "file")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise Unusable(path, f"cannot be read ({e.strerror or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped between the lstat and the open
        os.close(fd)
        raise Unusable(path, f"is {kind(st.st_mode)}, not a memory file: remove it")
    return fd, st


def _pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # (Windows: no pread)
    return os.read(fd, n)


def read_exact(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` (fewer only at the end of the file)."""
    chunks, got = [], 0
    while got < n:
        chunk = _pread(fd, min(n - got, 1 << 24), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def temp_file(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` for a save: unique name, created exclusively, links not
    followed, readable by its owner only."""
    fd, name = tempfile.mkstemp(prefix=path.name + ".tmp-", dir=path.parent)  # O_EXCL|O_NOFOLLOW, 0600
    return fd, Path(name)


def remove_stale_temps(path: Path) -> None:
    """Temporary files of saves that were killed (call it holding the lock: no save is
    writing one then). Folders and other users' files are left alone."""
    for stale in path.parent.glob(path.name + ".tmp-*"):
        try:
            st = os.lstat(stale)
            if (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and (
                not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
            ):
                os.unlink(stale)
        except OSError:
            continue


class StoreLock:
    """``with StoreLock(store_path, exclusive=True) as lock:`` the store's lock, and
    ``lock.generation`` (``lock.bump()`` under an exclusive lock). On a folder where the
    lock file cannot be created (read-only), a shared lock is skipped (``held`` False,
    generation 0) and an exclusive one is ``Unusable``."""

    def __init__(self, store: Path, *, exclusive: bool, wait: float | None = None) -> None:
        self.path = store.with_name(store.name + LOCK_SUFFIX)
        self.exclusive = exclusive
        self.wait = LOCK_WAIT if wait is None else wait
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def __enter__(self) -> "StoreLock":
        flags = (
            os.O_RDWR
            | os.O_CREAT
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0)
        )
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EMLINK) or os.path.islink(self.path):
                raise Unusable(
                    self.path, f"is a symbolic link, not a lock file: not followed; remove it{_RM}"
                ) from None
            if not self.exclusive:
                return self
            raise Unusable(self.path, f"cannot be opened ({e.strerror or e})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Unusable(self.path, f"is {kind(st.st_mode)}, not a lock file: remove it{_RM}")
            check_owner(self.path, st, "file")
            if st.st_nlink != 1:  # a hard link: bump() would write into the other file
                raise Unusable(
                    self.path,
                    f"has {st.st_nlink} names (a hard link to another file), not a lock file of its own: "
                    f"not written; remove it{_RM}",
                )
            self._flock(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def _flock(self, fd: int) -> None:
        if fcntl is None:
            return
        op = (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, op)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Unusable(self.path, f"is held by another process for over {self.wait:.0f} s") from None
                time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None

    @property
    def generation(self) -> int:
        if self.fd is None:
            return 0
        try:
            return int(_pread(self.fd, 32, 0).decode("ascii").strip() or 0)
        except (ValueError, UnicodeDecodeError, OSError):
            return 0

    def bump(self) -> int:
        """Add one to the generation (``clear``: a run that loaded before will not save)."""
        assert self.fd is not None and self.exclusive
        new = self.generation + 1
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, f"{new}\n".encode("ascii"))
        os.fsync(self.fd)
        return new


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a platform without directory fds (Windows): the replace is what we have
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
