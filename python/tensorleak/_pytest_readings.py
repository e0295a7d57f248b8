"""What the pytest gate reads of the library and the frameworks: the call
sites' live bytes (tensorleak_site_bytes, microseconds), the framework pools
as the bridge reads them, and, only when something rose, a report
(tensorleak_snapshot_to, which symbolizes every live stack) to tell leaked
from held and to give the stacks."""

import ctypes
import json
import os
import sys

import tensorleak


class State:
    """What the plugin reads at a test's start and end without writing a
    report: live bytes and allocations per call site (the library's counters,
    tensorleak_site_bytes) and the framework pools as the bridge reads them
    (PyTorch, JAX, CuPy: figures, and the live blocks' sites when the
    framework records them)."""

    def __init__(self, sites, pools):
        self.sites = sites  # {site id: (bytes, count)}
        self.pools = pools  # {(name, device): pool row}

    def pool_reserves(self):
        """{(name, device): reserved bytes} per framework pool."""
        return {key: pool.get("reserved_bytes") or 0 for key, pool in self.pools.items()}

    def rose_since(self, start):
        """Whether any call site's live bytes or framework pool's allocated
        or reserved bytes are higher now than at `start`."""
        if any(b > start.sites.get(i, (0, 0))[0] for i, (b, _) in self.sites.items()):
            return True
        for key, pool in self.pools.items():
            old = start.pools.get(key, {})
            for figure in ("allocated_bytes", "reserved_bytes"):
                if (pool.get(figure) or 0) > (old.get(figure) or 0):
                    return True
        return False


class SiteCounters:
    """tensorleak_site_bytes through ctypes, with a buffer that grows."""

    def __init__(self, lib):
        self.fn = getattr(lib, "tensorleak_site_bytes", None) if lib is not None else None
        if self.fn is not None:
            self.fn.restype = ctypes.c_long
            self.fn.argtypes = (ctypes.POINTER(ctypes.c_uint64), ctypes.c_long)
        self.rows = 1024
        self.buf = (ctypes.c_uint64 * (3 * self.rows))()

    def read(self):
        """{site id: (live bytes, live allocations)}, or None when not tracking."""
        while True:
            n = self.fn(self.buf, self.rows)
            if n < 0:
                return None
            if n <= self.rows:
                b = self.buf
                return {b[3 * i]: (b[3 * i + 1], b[3 * i + 2]) for i in range(n)}
            self.rows = n + n // 2
            self.buf = (ctypes.c_uint64 * (3 * self.rows))()


def framework_pools():
    """{(name, device): pool} from the bridge's reading of the frameworks this
    program imported; {} without any (or without the bridge)."""
    bridge = sys.modules.get("tensorleak.bridge")
    if bridge is None or not any(name in sys.modules for name in ("torch", "jax", "cupy", "rmm")):
        return {}
    try:
        state = bridge.read_state(full=False)
    except Exception:
        return {}
    return {(p.get("name"), p.get("device")): p for p in state.get("pools") or ()}


def pool_site_key(site):
    return tuple((f.get("function"), f.get("file"), f.get("line")) for f in site.get("frames") or ())


def _silenced_stderr(call):
    """call() with file descriptor 2 on /dev/null: the library prints one line
    per snapshot ("tensorleak: snapshot ...: report: PATH") unless
    TENSORLEAK_QUIET, two per test here; the plugin reads the file and reports
    a failed snapshot itself.  Output of other threads in that moment is lost
    with it; without a /dev/null the line stays."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        return call()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        os.close(saved)
        return call()
    try:
        os.dup2(devnull, 2)
        return call()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def snapshot(path, label):
    """The report written now to `path` and read back (the file is removed),
    or None when it could not be written or read."""
    try:
        if _silenced_stderr(lambda: tensorleak.snapshot_to(path, label)) != 0:
            return None
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
