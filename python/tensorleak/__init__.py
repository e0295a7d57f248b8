"""tensorleak from Python: marks, snapshots and pool annotations for a program
running under the preload library, and where the installed package keeps the
library, the CLI and the simulated CUDA stack.

Every call here is a cheap no-op when libtensorleak.so is not loaded (the
program was not started with `tensorleak run` or LD_PRELOAD): the library
interposes CUDA calls only when it is preloaded, so this module never loads it
itself.  It imports nothing but ctypes, os and sys (and, under tensorleak,
its framework bridge, which imports no framework), so importing it costs
nothing in a program that does not use it.
"""

import ctypes
import os
import re
import sys

__all__ = [
    "loaded", "mark", "snapshot", "snapshot_to",
    "pool_create", "pool_segment", "pool_segment_release", "pool_alloc", "pool_free", "pool_destroy",
    "Pool", "library_path", "cli_path", "sim_dir", "package_dir", "parse_size", "format_size",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# (name, restype, argtypes) of the library's exports (include/tensorleak.h).
_EXPORTS = (
    ("tensorleak_mark", None, (ctypes.c_char_p,)),
    ("tensorleak_snapshot", ctypes.c_int, (ctypes.c_char_p,)),
    ("tensorleak_snapshot_to", ctypes.c_int, (ctypes.c_char_p, ctypes.c_char_p)),
    ("tensorleak_pool_create", ctypes.c_void_p, (ctypes.c_char_p, ctypes.c_int)),
    ("tensorleak_pool_segment", None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)),
    ("tensorleak_pool_segment_release", None, (ctypes.c_void_p, ctypes.c_void_p)),
    ("tensorleak_pool_alloc", None, (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)),
    ("tensorleak_pool_free", None, (ctypes.c_void_p, ctypes.c_void_p)),
    ("tensorleak_pool_destroy", None, (ctypes.c_void_p,)),
)

_UNRESOLVED = object()
_lib_cache = _UNRESOLVED


def _lib():
    """The process's global namespace (ctypes.CDLL(None)) with the library's
    exports typed, when libtensorleak.so is loaded; None otherwise.

    LD_PRELOAD puts the library in the global namespace, which is where
    dlsym(RTLD_DEFAULT) and so CDLL(None) look.  Resolved once: a library that
    was not preloaded at start cannot interpose anything later.  Bridges and
    other modules use this rather than loading anything themselves.
    """
    global _lib_cache
    if _lib_cache is _UNRESOLVED:
        lib = None
        try:
            proc = ctypes.CDLL(None)
            proc.tensorleak_mark  # AttributeError when the library is absent
            lib = proc
        except (OSError, AttributeError):
            pass
        if lib is not None:
            for name, restype, argtypes in _EXPORTS:
                fn = getattr(lib, name, None)  # an older library may lack one
                if fn is not None:
                    fn.restype = restype
                    fn.argtypes = argtypes
        _lib_cache = lib
    return _lib_cache


def _export(name):
    lib = _lib()
    return getattr(lib, name, None) if lib is not None else None


def _bytes(text):
    if text is None:
        return None
    return text if isinstance(text, bytes) else os.fsencode(str(text))


def loaded():
    """True when the program runs under tensorleak (the library is preloaded)."""
    return _lib() is not None


def _submit_framework_state(full=True):
    # The framework bridge (bridge.py) hands the allocators' state over from
    # this thread, so a mark or snapshot taken here never waits for its thread.
    # A mark needs the figures only (full=False: no walk of every block).
    bridge = sys.modules.get(__name__ + ".bridge")
    if bridge is not None and bridge.active():
        bridge.submit_now(full=full)


def mark(label="mark"):
    """Ends a growth epoch (e.g. one request served): growth detection compares
    the live bytes of every call site from mark to mark."""
    fn = _export("tensorleak_mark")
    if fn is not None:
        _submit_framework_state(full=False)
        fn(_bytes(label))


def snapshot(label="snapshot"):
    """Writes a report now (reason "api") under TENSORLEAK_OUTPUT.  Returns 0 on
    success, -1 on failure or when not running under tensorleak."""
    fn = _export("tensorleak_snapshot")
    if fn is None:
        return -1
    _submit_framework_state()
    return fn(_bytes(label))


def snapshot_to(path, label="snapshot"):
    """Writes a report now to `path` (replaced if it exists).  Returns 0 on
    success, -1 on failure or when not running under tensorleak."""
    fn = _export("tensorleak_snapshot_to")
    if fn is None:
        return -1
    _submit_framework_state()
    return fn(_bytes(label), _bytes(path))


def _address(value):
    """A device pointer given as an int, a ctypes pointer or c_void_p."""
    if isinstance(value, ctypes.c_void_p):
        return value.value
    if isinstance(value, int) or value is None:
        return value
    return ctypes.cast(value, ctypes.c_void_p).value


def pool_create(name, device=0):
    """Declares a caching pool on `device`.  Returns its handle (an int), or
    None when not running under tensorleak; the other pool calls accept None."""
    fn = _export("tensorleak_pool_create")
    return fn(_bytes(name), int(device)) if fn is not None else None


def pool_segment(pool, base, nbytes):
    """The pool reserved [base, base+nbytes) from the driver."""
    fn = _export("tensorleak_pool_segment")
    if fn is not None and pool:
        fn(pool, _address(base), int(nbytes))


def pool_segment_release(pool, base):
    """The pool gives the segment at `base` back (call before freeing it)."""
    fn = _export("tensorleak_pool_segment_release")
    if fn is not None and pool:
        fn(pool, _address(base))


def pool_alloc(pool, ptr, nbytes):
    """The pool handed out [ptr, ptr+nbytes) from one of its segments."""
    fn = _export("tensorleak_pool_alloc")
    if fn is not None and pool:
        fn(pool, _address(ptr), int(nbytes))


def pool_free(pool, ptr):
    """The block at `ptr` came back to the pool."""
    fn = _export("tensorleak_pool_free")
    if fn is not None and pool:
        fn(pool, _address(ptr))


def pool_destroy(pool):
    """The pool is gone; its segments are no longer held by it."""
    fn = _export("tensorleak_pool_destroy")
    if fn is not None and pool:
        fn(pool)


class Pool:
    """A caching pool declared to tensorleak (the pool_* functions on one
    handle); every method is a no-op when not running under tensorleak."""

    def __init__(self, name, device=0):
        self.handle = pool_create(name, device)

    def segment(self, base, nbytes):
        pool_segment(self.handle, base, nbytes)

    def segment_release(self, base):
        pool_segment_release(self.handle, base)

    def alloc(self, ptr, nbytes):
        pool_alloc(self.handle, ptr, nbytes)

    def free(self, ptr):
        pool_free(self.handle, ptr)

    def destroy(self):
        pool_destroy(self.handle)
        self.handle = None


_SIZE_SHIFTS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
_SIZE_PATTERN = re.compile(r"([0-9]+)[ \t]*(?:([KkMmGgTt])[Ii]?[Bb]?)?")


def parse_size(value):
    """Bytes from a size as the library reads its TENSORLEAK_* sizes
    (src/base/options.c, tl_parse_size): whole bytes with an optional K, M, G or
    T, then an optional i and B, all powers of 1024 ("1048576", "1M",
    "1MiB", "4GB"), or a non-negative int.  One liberty, for sizes written
    in Python (markers, pytest options): blanks may separate the number
    from its unit, as the reports print sizes ("1 MiB").  Fractions
    ("1.5 GB"), a bare "B" and anything else the library refuses raise
    ValueError, so a size means the same in a marker and in the
    environment."""
    if isinstance(value, bool):
        raise ValueError("not a size: %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("negative size: %r" % (value,))
        return value
    match = _SIZE_PATTERN.fullmatch(str(value))
    if not match:
        raise ValueError("not a size: %r (expected whole bytes with an optional K, M, G or T unit, "
                         "e.g. 1048576, 1M, 1MiB, \"1 MiB\")" % (value,))
    nbytes = int(match.group(1)) << _SIZE_SHIFTS[(match.group(2) or "").lower()]
    if nbytes >= 1 << 64:
        raise ValueError("size out of range: %r" % (value,))
    return nbytes


def format_size(nbytes):
    """Bytes as tensorleak's reports write them: "512 B", "1.0 MiB"."""
    if nbytes < 1024:
        return "%d B" % nbytes
    value = nbytes / 1024.0
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024.0:
            return "%.1f %s" % (value, unit)
        value /= 1024.0
    return "%.1f TiB" % value


def package_dir():
    """The directory of this package."""
    return _PACKAGE_DIR


def _bundled(*parts):
    path = os.path.join(_PACKAGE_DIR, *parts)
    return path if os.path.exists(path) else None


def library_path():
    """The preload library to use: TENSORLEAK_LIBRARY when set, else the copy
    installed in this package (pip), else None."""
    override = os.environ.get("TENSORLEAK_LIBRARY")
    if override:
        return override
    return _bundled("lib", "libtensorleak.so")


def cli_path():
    """The tensorleak CLI installed in this package, or None."""
    return _bundled("bin", "tensorleak")


def sim_dir():
    """The directory of the simulated libcuda.so.1 and libcudart installed in
    this package (what `tensorleak run --sim` puts first on the library
    path), or None."""
    path = _bundled("lib", "tensorleak", "sim")
    return path if path and os.path.exists(os.path.join(path, "libcuda.so.1")) else None


def __getattr__(name):
    # The version lives in the package metadata; importlib.metadata is looked
    # up only when asked for.
    if name == "__version__":
        from importlib import metadata
        try:
            return metadata.version("tensorleak")
        except metadata.PackageNotFoundError:
            return "unknown"
    raise AttributeError("module 'tensorleak' has no attribute %r" % name)


def _bridge_switched_off():
    # TENSORLEAK_PYTHON as the library reads it (src/base/options.c, tl_parse_bool):
    # unset, the import starts the bridge; an explicit off, or a value the
    # library rejects ("the Python bridge stays off"), is honoured here too
    # (pytest imports this package for every run through its plugin).
    value = os.environ.get("TENSORLEAK_PYTHON", "")
    return value != "" and value.lower() not in ("1", "true", "yes", "on")


# Under tensorleak, the framework bridge (helper thread reading PyTorch, JAX,
# CuPy allocator state for the reports) starts with the first import, unless
# TENSORLEAK_PYTHON says off.
if loaded() and not _bridge_switched_off():
    try:
        from . import bridge as _bridge
        _bridge.activate()
    except Exception as _err:  # the program goes on without framework pools
        sys.stderr.write("tensorleak: the framework bridge did not start: %s\n" % (_err,))
