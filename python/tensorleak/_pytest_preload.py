"""Re-running pytest under the preload: the gate needs libtensorleak.so loaded
before the first CUDA call, so a pytest started without it (not under
`tensorleak run` or LD_PRELOAD) is run again with the library preloaded,
and, for --tensorleak-sim, the simulated CUDA stack first on the library
path."""

import os
import re
import subprocess
import sys

import pytest

import tensorleak

# Set in the environment of the re-run (not TENSORLEAK_*: the library warns
# about names it does not know), so that a library that still does not
# load is an error rather than a loop.
_RERUN_GUARD = "PYTEST_TENSORLEAK_RERUN"


def sim_on_library_path():
    sim = tensorleak.sim_dir()
    return sim is not None and sim in os.environ.get("LD_LIBRARY_PATH", "").split(":")


def _prepend(variable, item, sep):
    old = os.environ.get(variable, "")
    parts = [p for p in re.split("[%s]" % re.escape(sep), old) if p]
    return sep[0].join([item] + [p for p in parts if p != item])


def rerun_under_preload(config, sim):
    """Re-runs this pytest command with the library preloaded (and the
    simulated CUDA stack first on the library path for --tensorleak-sim): in
    place (execve) when pytest runs from the command line, as a child whose
    status becomes this session's otherwise.  Does not return."""
    library = tensorleak.library_path()
    if os.environ.get(_RERUN_GUARD) and not tensorleak.loaded():
        raise pytest.UsageError(
            "--tensorleak: libtensorleak.so is still not loaded after re-running pytest with "
            "LD_PRELOAD=%s (is it the library of this platform?)" % os.environ.get("LD_PRELOAD", ""))
    if os.environ.get(_RERUN_GUARD):
        raise pytest.UsageError("--tensorleak-sim: the simulated CUDA stack is still not first on "
                                "LD_LIBRARY_PATH after re-running pytest")
    if not library:
        raise pytest.UsageError(
            "--tensorleak: libtensorleak.so is not loaded and this tensorleak package has no copy of it "
            "(install tensorleak with pip, run pytest under `tensorleak run`, or set TENSORLEAK_LIBRARY)")
    env = dict(os.environ)
    if not tensorleak.loaded():
        if re.search(r"[:\s]", library):
            raise pytest.UsageError("--tensorleak: the library path %r holds ':' or a blank, which "
                                    "LD_PRELOAD cannot hold; run pytest under `tensorleak run`" % library)
        env["LD_PRELOAD"] = _prepend("LD_PRELOAD", library, ": ")
    what = "libtensorleak.so preloaded (LD_PRELOAD=%s)" % library
    if sim:
        sim_dir = tensorleak.sim_dir()
        if not sim_dir:
            raise pytest.UsageError("--tensorleak-sim: the simulated CUDA stack is not installed with this "
                                    "tensorleak package")
        env["LD_LIBRARY_PATH"] = _prepend("LD_LIBRARY_PATH", sim_dir, ":")
        # As `tensorleak run --sim`: the simulated runtime preloaded after
        # the library, so a runtime found through a program's own RPATH
        # (PyTorch's wheels) is the simulated one.
        runtime = os.path.join(sim_dir, "libcudart.so.13")
        preload = [p for p in re.split("[: ]", env.get("LD_PRELOAD", "")) if p]
        if os.path.exists(runtime) and runtime not in preload:
            env["LD_PRELOAD"] = ":".join(preload + [runtime])
        what += " on the simulated CUDA stack (%s)" % sim_dir
    # The re-run's own reports: per test, not the library's stderr summary of
    # everything still alive when pytest exits (unless asked for).
    env.setdefault("TENSORLEAK_QUIET", "1")
    # As under `tensorleak run`: the framework bridge reports PyTorch's, JAX's
    # and CuPy's pools.
    env.setdefault("TENSORLEAK_PYTHON", "1")
    report_dir = config.getoption("tensorleak_report")
    if report_dir and "TENSORLEAK_OUTPUT" not in env:
        env["TENSORLEAK_OUTPUT"] = os.path.join(os.path.abspath(report_dir), "tensorleak.%p.json")
    env[_RERUN_GUARD] = "1"

    args = [sys.executable, "-m", "pytest"] + list(config.invocation_params.args)
    # Output captured by pytest so far goes to temporary files: the re-run
    # writes to the real stdout and stderr.
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stderr.write("tensorleak: re-running pytest with %s\n" % what)
    sys.stdout.flush()
    sys.stderr.flush()
    if list(config.invocation_params.args) == sys.argv[1:]:
        # The command as typed (`pytest ...` or `python -m pytest ...`, with
        # the interpreter's own options), so that sys.path is the same.
        orig = getattr(sys, "orig_argv", None)
        os.chdir(str(config.invocation_params.dir))
        os.execve(sys.executable, [sys.executable] + list(orig[1:]) if orig else args, env)
    # pytest.main() from a program: do not replace that program.
    status = subprocess.call(args, env=env, cwd=str(config.invocation_params.dir))
    pytest.exit("tensorleak: the re-run under the preload exited with %d" % status, returncode=status)
