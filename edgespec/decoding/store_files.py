"""The memory store's files, handled as ssh handles its own: the folder, the store file,
the temporary file of a save and the lock, each checked before it is trusted.

- The folder (``check_folder``) must be a folder, owned by this user and writable by
  nobody else (``EDGESPEC_MEMORY_DIR=/tmp`` is refused, one line); the folders it
  creates are 0700 whatever the umask.
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
  deleted lock file is how two processes end up holding "the" lock at once).

Every problem is an ``Unusable`` (the path and why, in words); what to do about it is the
caller's (``suffix_store``: one warning and a cold start, or a save refused). It knows
nothing of the file format.
"""

from __future__ import annotations

import os
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
    it is not a folder, or not this user's alone. A folder reached through a symbolic
    link (``~/.cache`` elsewhere) is checked where it leads."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        if not create:
            return False
        _make_folders(directory)
        st = os.stat(directory)
    except OSError as e:
        raise Unusable(directory, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Unusable(directory, f"is {kind(st.st_mode)}, not a folder (check EDGESPEC_MEMORY_DIR)")
    check_owner(directory, st, "folder")
    return True


def _make_folders(directory: Path) -> None:
    missing = []
    d = Path(os.path.abspath(directory))
    while not os.path.lexists(d) and d != d.parent:
        missing.append(d)
        d = d.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)  # 0700 whatever the umask (a umask only takes bits away)
        except FileExistsError:
            pass
        except OSError as e:
            raise Unusable(folder, f"cannot be created ({e.strerror or e})") from None


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
            if not self.exclusive:
                return self
            raise Unusable(self.path, f"cannot be opened ({e.strerror or e})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Unusable(self.path, f"is {kind(st.st_mode)}, not a lock file: remove it")
            check_owner(self.path, st, "file")
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
