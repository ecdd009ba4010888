"""Serve the modules inside ``tern.pyz`` from a code cache compiled once per interpreter.

Why: zipimport reads only ``name.pyc`` beside ``name.py`` (no version tag) and never
writes bytecode, so a zip can carry bytecode for one Python at most; every other one
compiles each module it imports on every start, and CPython 3.10-3.13 even compile it
twice (``zipimporter.get_filename`` compiles a module to learn its path, then
``get_code`` compiles it again). So the pyz carries sources only and this module,
installed first by the pyz's ``__main__.py``, hooks a ``zipimporter`` subclass in for
the pyz that:

- answers ``get_filename`` from the zip's directory, compiling nothing;
- loads ``get_code`` from ``<cache>/code/<build>-<cache_tag>[-opt<N>]/<module>.pyc``,
  or compiles the source once and writes that file for the next start.

``<build>`` is a digest of the pyz's contents (``build_pyz.py`` writes it into
``__main__.py``): another pyz gets another directory, so two tern versions never
overwrite each other's code and ``tern cache prune`` can drop old ones.

A cache file is ``importlib.util.MAGIC_NUMBER`` (the interpreter's), ``b"tern"``, the source's CRC-32
and size as the zip's directory records them, the SipHash of the rest (``_imp.source_hash``), then
``marshal`` data. It is used only if all of that matches, it is a regular file owned
by this user and not group- or world-writable, and every directory of the chain
passed the same owner and mode checks as the native cache (else ``BundleError``).
Anything else (a stale, truncated, tampered or foreign file) is ignored: the module
is compiled from the pyz and the file replaced. The digest is the one PEP 552's
checked pycs use (``_imp.source_hash``, in C, ~0.2 ms per MB), taken over the code
rather than the source because a checked pyc only proves that its header matches the
source: its code can be changed under an intact header. SHA-256 would cost ~3 ms per
MB on every start (~7 ms for the 2.3 MB ``tern mcp`` loads) and buy nothing here: a digest stored
beside the data can be recomputed by whoever can write the file, and only this user
can (threat-model.md puts them out of scope, as for the native cache's stamps).

Writes are atomic: a new 0400 file ``.tmp-<module>-<pid>-<ns>`` in the same
directory, then ``os.replace`` onto the final name, so a reader sees a whole file or
none, and concurrent first runs each publish a complete, equal copy. The cache is
written even under ``PYTHONDONTWRITEBYTECODE``: it is tern's own directory, not a
``__pycache__`` in someone's source tree. A cache that cannot be made or written
(read-only home, full disk) only costs speed: modules are compiled in memory, once.

Standard library only, imported before anything else in the pyz and so compiled from
source on every start (once: ``__main__.py`` sidesteps zipimport's second compile):
keep it small.
"""

import marshal
import os
import sys
import zipimport

__all__ = ["cache_root", "code_dir", "install", "running_build", "unsafe_owner_or_mode"]

#: Second word of a cache file's header.
TAG = b"tern"
HEADER_BYTES = 24  # magic, TAG, CRC-32, size, 8-byte digest
#: The SipHash key of the digest (a constant: it detects change, it is not a secret).
DIGEST_KEY = 0x7465726E
#: A cache file larger than this is not ours (tern's largest module is ~0.2 MB of code).
MAX_CODE_BYTES = 16 << 20
#: Prefix of files being written (and directories being extracted, in runtime._bundle).
WORK_PREFIX = ".tmp-"

_build = None  # the BUILD of the running pyz
_archive = None  # its absolute path
_dir = None  # the code cache directory in use, or None (compile in memory)
_magic = b""  # importlib.util.MAGIC_NUMBER, read at install (importing it costs the venv)


def cache_root():
    """tern's cache directory (it may not exist yet).

    ``TERN_CACHE_DIR`` if set; else ``$XDG_CACHE_HOME/tern`` or ``~/.cache/tern`` on
    Linux, ``~/Library/Caches/tern`` on macOS, ``%LOCALAPPDATA%\\tern\\Cache`` on Windows.
    """
    explicit = os.environ.get("TERN_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return os.path.join(base, "tern", "Cache")
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "tern")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "tern")
    return os.path.join(os.path.expanduser("~"), ".cache", "tern")


def running_build():
    """The BUILD of the running pyz, or None when tern does not run from one."""
    return _build


def code_dir():
    """The code cache directory this process reads and writes, or None."""
    return _dir


def unsafe_owner_or_mode(st, what):
    """Why ``what`` (with stat ``st``) is not safe to trust, or "": another user owns it,
    or its group or others may write to it. Here, stdlib-only, because the bootstrap
    checks the cache with it before anything else loads; the daemon's state directory
    and discovery file are checked with it too (``runtime.host.discovery``)."""
    if os.name != "posix":
        return ""
    if st.st_uid != os.geteuid():
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{what} is group- or world-writable (mode {st.st_mode & 0o7777:o})"
    return ""


def bundle_error(message):
    """A BundleError, imported only when needed: runtime.errors is not small."""
    from runtime.errors import BundleError

    return BundleError(message)


def refuse(why):
    return bundle_error(
        f"refusing tern's cache: {why}, so another user could replace the code tern loads. "
        "Fix its owner or mode (chmod 700), or set TERN_CACHE_DIR to a private directory."
    )


def private_dir(path, follow=False):
    """Make ``path`` (and missing parents) 0700, or check the existing one is private.
    Raises BundleError for a directory another user could write; OSError if it cannot
    be made."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent and parent != path and not os.path.lexists(parent):
            private_dir(parent, follow=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        else:
            if os.name == "posix":
                os.chmod(path, 0o700)  # mkdir's mode is cut by the umask, never widened: be exact anyway
        st = os.stat(path) if follow else os.lstat(path)
    if (st.st_mode & 0o170000) != 0o040000:
        raise NotADirectoryError(f"{path} is not a directory")  # unusable, not unsafe: compile in memory
    why = unsafe_owner_or_mode(st, path)
    if why:
        raise refuse(why)


def install(main_file, build):
    """Serve the pyz holding ``main_file`` (its ``__main__.py``) through the code cache.

    Raises BundleError if the cache exists but another user could write to it. Returns
    the cache directory, or None when there is none (modules are then compiled in
    memory, once each).
    """
    global _build, _archive, _dir, _magic
    from importlib.util import MAGIC_NUMBER as _magic

    archive = os.path.abspath(os.path.dirname(main_file))
    _build, _archive = build, archive
    tag = sys.implementation.cache_tag
    if tag:
        name = f"{build}-{tag}" + (f"-opt{sys.flags.optimize}" if sys.flags.optimize else "")
        root = cache_root()
        try:
            private_dir(root, follow=True)
            private_dir(os.path.join(root, "code"))
            private_dir(os.path.join(root, "code", name))
            _dir = os.path.join(root, "code", name)
        except OSError:
            _dir = None
    if _hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _hook)
    for key, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter and _ours(key):
            sys.path_importer_cache[key] = CachedZipImporter(key)
    return _dir


def _ours(path):
    path = os.path.abspath(path)
    return path == _archive or path.startswith(_archive + os.sep)


def _hook(path):
    if _archive is None or not _ours(path):
        raise ImportError("not the running pyz")
    return CachedZipImporter(path)


class CachedZipImporter(zipimport.zipimporter):
    """A zipimporter for the running pyz whose code comes from the code cache."""

    def _source(self, fullname):
        """(zip-relative path, CRC-32, size) of the module's ``.py``, or None."""
        # zipimport's parsed directory (private, but in every CPython since 3.8): it has
        # each member's CRC-32 and size for free. Without it, the BUILD alone keys the code.
        toc = getattr(zipimport, "_zip_directory_cache", {}).get(self.archive)
        tail = self.prefix + fullname.rpartition(".")[2]
        for rel in (tail + os.sep + "__init__.py", tail + ".py"):
            if toc is None:
                if self.is_package(fullname) != rel.endswith("__init__.py"):
                    continue
                return rel, 0, 0
            entry = toc.get(rel)
            if entry is not None:
                return rel, entry[7], entry[3]
        return None

    def get_filename(self, fullname):
        source = self._source(fullname)
        if source is None:
            return super().get_filename(fullname)
        return self.archive + os.sep + source[0]

    def get_code(self, fullname):
        source = self._source(fullname)
        if source is None:  # not a module we shipped as source: zipimport's own rules
            return super().get_code(fullname)
        rel, crc, size = source
        path = self.archive + os.sep + rel
        key = _magic + TAG + crc.to_bytes(4, "little") + size.to_bytes(4, "little")
        cached = os.path.join(_dir, fullname + ".pyc") if _dir else None
        if cached:
            code = _read(cached, key)
            if code is not None:
                import _imp

                _imp._fix_co_filename(code, path)  # the pyz may have moved since
                return code
        code = compile(self.get_data(rel), path, "exec", dont_inherit=True)
        if cached:
            _write(cached, key, marshal.dumps(code))
        return code


def _digest(data):
    import _imp

    return _imp.source_hash(DIGEST_KEY, data)


def _read(path, key):
    """The code object in cache file ``path`` if it is whole, ours and for ``key``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or unsafe_owner_or_mode(st, path) \
                or not HEADER_BYTES < st.st_size <= MAX_CODE_BYTES:
            return None
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    body = memoryview(data)[HEADER_BYTES:]
    if data[:16] != key or data[16:HEADER_BYTES] != _digest(body):
        return None
    try:
        return marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None


def _write(path, key, body):
    """Publish ``path`` atomically; on failure leave no file behind and say nothing."""
    import time

    work = os.path.join(os.path.dirname(path), f"{WORK_PREFIX}{os.path.basename(path)}-{os.getpid()}-"
                                               f"{time.monotonic_ns()}")
    try:
        fd = os.open(work, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o400)
        with open(fd, "wb") as out:
            out.write(key + _digest(body) + body)
        os.replace(work, path)
    except OSError:  # full disk, read-only cache, Windows holding the target open: next start tries again
        try:
            os.unlink(work)
        except OSError:
            pass
