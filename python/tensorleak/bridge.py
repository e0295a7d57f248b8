"""The Python side of tensorleak's framework bridge (src/families/bridge.c).

A daemon thread blocks in the library's tensorleak_bridge_wait() through
ctypes.CDLL, which releases the GIL while it waits.  When a report or a mark
wants the frameworks' state, the thread reads the allocators of the
frameworks this program imported (sys.modules; never importing one) and hands
the state to tensorleak_bridge_submit() as JSON.  At exit an atexit handler
submits the final state and closes the bridge, so the exit report (written
after the interpreter finalized) has the last state and says when it was
read.  tensorleak.mark()/snapshot() call submit_now() in the caller's thread
first, so their report never waits.

Errors never reach the program: each framework's failure is one line in the
state's "errors" (and so in the report), and the bridge keeps going.

Switches: TENSORLEAK_PYTHON (the library starts this module when it is 1;
`tensorleak run` sets it), TENSORLEAK_TORCH_HISTORY=1 (turn on PyTorch's
allocation history from the start so live blocks name their Python line;
cost measured on the H200 GPT-2 loop: 0.063 -> 0.071 s per request).
Unset (or `auto`), the history is turned on once the library suspects a
pool's growth (tensorleak_bridge_lines_wanted), so a growth row names its
line; TENSORLEAK_TORCH_HISTORY=0 never turns it on.
"""

import atexit
import ctypes
import importlib
import json
import os
import sys
import threading
import time

WAIT_MS = 1000

_lock = threading.Lock()
_state = {"lib": None, "thread": None, "closed": False, "history": False, "hooks": False, "submitter": None,
          "oom_observer": False}


def _library(path=None):
    """The library's exports, typed; None when not under tensorleak.  A
    preloaded library is in the process's global namespace; one that
    `tensorleak attach` loaded is not, and comes as PATH, opened without
    loading (RTLD_NOLOAD: the copy in the process, never a second one)."""
    try:
        if path:
            proc = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        else:
            proc = ctypes.CDLL(None)
        wait, submit, close = (proc.tensorleak_bridge_wait, proc.tensorleak_bridge_submit,
                               proc.tensorleak_bridge_close)
    except (OSError, AttributeError):
        return None
    wait.argtypes, wait.restype = (ctypes.c_int,), ctypes.c_int
    submit.argtypes, submit.restype = (ctypes.c_char_p,), ctypes.c_int
    close.argtypes, close.restype = (), None
    # Says a read begins, so that the state answers only what was asked
    # before it (a library without it: every request made until the submit).
    reading = getattr(proc, "tensorleak_bridge_reading", None)
    if reading is not None:
        reading.argtypes, reading.restype = (), None
    # The out-of-memory report written with the state of that moment (a
    # library without them: the report written inside the allocation).
    observer, oom = getattr(proc, "tensorleak_bridge_oom_observer", None), getattr(proc, "tensorleak_bridge_oom", None)
    if observer is not None and oom is not None:
        observer.argtypes, observer.restype = (ctypes.c_char_p,), None
        oom.argtypes, oom.restype = (ctypes.c_int, ctypes.c_ulonglong), ctypes.c_int
    return proc


def _reader(name):
    return importlib.import_module("tensorleak.frameworks." + name)


def _maybe_enable_history(modules):
    """TENSORLEAK_TORCH_HISTORY=1: PyTorch records the Python stack of each
    allocation from now on (live blocks then name their line).  And, once
    PyTorch's CUDA is up, our out-of-memory observer."""
    mod = modules.get("torch")
    if mod is None:
        return
    if not _state["oom_observer"]:
        _attach_oom_observer(mod)
    setting = os.environ.get("TENSORLEAK_TORCH_HISTORY")
    if setting in (None, "", "auto"):
        on = _lines_wanted()
    else:
        on = setting == "1"  # "0": never, even when growth is suspected
    if _state["history"] or not on:
        return
    _state["history"] = _reader("torch").enable_history(mod)


def _lines_wanted():
    """The library suspects a pool's growth (a high short of a growth
    row): its blocks from now on should name their Python line."""
    fn = getattr(_state["lib"], "tensorleak_bridge_lines_wanted", None)
    return fn is not None and fn() != 0


# The bridge thread and a thread reading the state itself may both set
# PyTorch up: one observer only (each would write a report).
_setup_lock = threading.Lock()


def _attach_oom_observer(torch):
    lib = _state["lib"]
    if lib is None or getattr(lib, "tensorleak_bridge_oom", None) is None:
        return
    with _setup_lock:
        if _state["oom_observer"]:
            return
        module = _reader("torch").attach_oom_observer(torch, _on_oom)
        if module is not None:  # "": none taken; failures are then reported inside the allocation
            _state["oom_observer"] = True
            lib.tensorleak_bridge_oom_observer(module.encode())


def _on_oom(device, alloc, device_total, device_free):
    """PyTorch's out-of-memory observer: in the failing thread, after the
    allocator let go of its lock and before it raises OutOfMemoryError.
    Reads the state here (without history a snapshot costs about 0.2 ms)
    and has the library write the out-of-memory report with it.  Never
    raises: the program gets PyTorch's own OutOfMemoryError."""
    try:
        lib = _state["lib"]
        if lib is None or _state["closed"]:
            return
        submit_now(full=True)
        lib.tensorleak_bridge_oom(int(device), int(alloc))
    except Exception:
        pass


def read_state(modules=None, full=True):
    """{"time", "full", "pools", "errors"} for the frameworks in `modules`
    (default sys.modules): only those the program imported itself.  `full`
    (a report): with PyTorch's segments and blocks; otherwise (a mark) the
    statistics only, which cost microseconds, unless history is on (the live
    blocks' Python lines need the blocks)."""
    modules = sys.modules if modules is None else modules
    from .frameworks import READERS
    pools, errors = [], []
    for name in READERS:
        mod = modules.get(name)
        if mod is None or getattr(getattr(mod, "__spec__", None), "_initializing", False):
            continue  # not imported, or still being imported by the program
        try:
            if name == "torch" and modules is sys.modules:
                _maybe_enable_history(modules)
            reader = _reader(name)
            if name == "torch":
                pools.extend(reader.read(mod, layout=full or _state["history"]))
            elif name == "jax":  # live arrays' Python sites in full reads only
                pools.extend(reader.read(mod, sites=full, errors=errors))
            else:
                pools.extend(reader.read(mod))
        except Exception as e:  # a framework's failure is reported, never raised
            errors.append("%s: %s: %s" % (name, type(e).__name__, e))
    return {"time": time.time(), "full": full, "pools": pools, "errors": errors}


# One state read and handed over at a time: the library keeps the last
# submission, so a state read earlier (the bridge thread answering a live
# update) must never arrive after one read later (the final state at exit).
_submit_lock = threading.Lock()


def submit_now(full=True):
    """Reads the state in this thread and hands it to the library: `full` for
    a report, figures only for a mark."""
    with _submit_lock:
        _state["submitter"] = threading.get_ident()
        try:
            return _submit_locked(full)
        finally:
            _state["submitter"] = None


def _submit_locked(full):
    """submit_now's work, with _submit_lock held."""
    lib = _state["lib"]
    if lib is None or _state["closed"]:
        return False
    reading = getattr(lib, "tensorleak_bridge_reading", None)
    if reading is not None:
        reading()
    try:
        text = json.dumps(read_state(full=full), separators=(",", ":"))
    except Exception as e:
        text = json.dumps({"time": time.time(), "pools": [], "errors": ["bridge: %s: %s" % (type(e).__name__, e)]})
    return lib.tensorleak_bridge_submit(text.encode()) == 0


# The bridge starts at the program's first CUDA call, often inside
# PyTorch's lazy CUDA initialization, before torch.cuda.is_initialized():
# PyTorch's out-of-memory observer (which PyTorch drops when registered
# before its allocator is initialized) and history are set up by the
# bridge thread as soon as it is, polling every SETUP_POLL_MS for at most
# SETUP_POLL_S.  Later, any state read sets them up.
SETUP_POLL_MS = 10
SETUP_POLL_S = 10.0


def _setup_pending():
    torch = sys.modules.get("torch")
    return (torch is not None and not _state["oom_observer"]
            and not getattr(getattr(torch, "__spec__", None), "_initializing", False))


def _serve():
    lib = _state["lib"]
    poll_until = time.monotonic() + SETUP_POLL_S
    while True:
        polling = time.monotonic() < poll_until and _setup_pending()
        try:
            r = lib.tensorleak_bridge_wait(SETUP_POLL_MS if polling else WAIT_MS)
        except Exception:
            return
        if r < 0:
            return
        if r > 0:
            submit_now(full=r == 1)
        elif polling:
            try:
                _maybe_enable_history(sys.modules)
            except Exception:
                pass


def _at_exit():
    # The interpreter is about to finalize: the last state a report can have,
    # and no submission after it.  Read, handed over and closed in one hold
    # of the lock: a figures-only read waiting for it (the live state's)
    # would otherwise become the last state, and the exit report would lose
    # the layouts.
    with _submit_lock:
        if _state["lib"] is None or _state["closed"]:
            return
        _state["submitter"] = threading.get_ident()
        try:
            _submit_locked(True)
        finally:
            _state["submitter"] = None
        _state["closed"] = True
        _state["lib"].tensorleak_bridge_close()


def activate(library=None):
    """Starts the bridge once (idempotent).  False when not under tensorleak.
    LIBRARY: the path of a library `tensorleak attach` loaded (see _library)."""
    with _lock:
        if _state["thread"] is not None:
            # Started already: the library schedules this again after the
            # program's next allocations until PyTorch is set up.
            try:
                _maybe_enable_history(sys.modules)
            except Exception:
                pass
            return True
        lib = _library(library)
        if lib is None:
            return False
        _state["lib"] = lib
        try:
            _maybe_enable_history(sys.modules)  # before the program's next allocation
        except Exception:
            pass
        t = threading.Thread(target=_serve, name="tensorleak-bridge", daemon=True)
        _state["thread"] = t
        t.start()
        # Tells the library a bridge serves from now on (before the thread
        # gets the GIL to wait), answering a request that is already there.
        if lib.tensorleak_bridge_wait(0) == 1:
            submit_now()
        # Once per process tree: a forked child inherits both registrations,
        # and registering again there would start one more thread per
        # handler in each later generation.
        if not _state["hooks"]:
            _state["hooks"] = True
            atexit.register(_at_exit)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                                    after_in_child=_after_fork_child)
        return True


# A fork waits for a state read in progress on the bridge thread (bounded):
# the read imports the frameworks' readers on first use, and a module lock
# held by the bridge thread at the fork would stay held in the child, whose
# own bridge thread would then hang importing that module.  The wait lets go
# of the GIL, so the read can finish.
FORK_WAIT_S = 5.0
_fork = threading.local()


def _before_fork():
    # A fork from a signal handler that interrupted this thread's own read
    # would wait for itself: it goes ahead.
    _fork.held = _state["submitter"] != threading.get_ident() and _submit_lock.acquire(timeout=FORK_WAIT_S)


def _after_fork_parent():
    if getattr(_fork, "held", False):
        _submit_lock.release()  # the parent's; only a child makes a new one
    _fork.held = False


def _after_fork_child():
    # The thread is gone in a forked child; the child reports on its own.
    # A lock another thread held at the fork stays held in the child: a new one.
    global _lock, _submit_lock, _setup_lock
    _lock = threading.Lock()
    _submit_lock = threading.Lock()
    _setup_lock = threading.Lock()
    _state["thread"] = None
    _state["closed"] = False
    try:
        activate()
    except Exception:
        pass


def active():
    return _state["thread"] is not None and not _state["closed"]
