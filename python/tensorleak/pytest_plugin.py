"""pytest plugin (entry point pytest11): `pytest --tensorleak` makes each test an
epoch and fails a test that leaves device memory allocated.

A test's leak is what its body allocated and still holds once its teardown ran:
the call sites (stacks) whose live bytes rose between the test body's start
(after fixture setup) and the end of its teardown (after a garbage
collection), and that a report then shows as leaked, not held.  Memory that a
cache or library owner holds (the report's "held": PyTorch's caching
allocator, cuBLAS workspaces, annotated pools, see data/owners.rules) is not a
leak; neither is what fixtures set up, so a module- or session-scoped
fixture's buffers are not charged to the first test that uses them.  A
framework's caching allocator (PyTorch, JAX, CuPy, read by the bridge:
bridge.py) keeps its segments as the cache's, so a tensor the test keeps
alive is the rise of that pool's allocated bytes, reported with the blocks'
sites when the framework records them (TENSORLEAK_TORCH_HISTORY=1).

Growth: a test run several times (parametrized, or @pytest.mark.repeat) is a
server's request loop with one mark per run, judged by the library's rules
(tensorleak/_growth_rule.py, from src/families/growth.c) with its
TENSORLEAK_GROWTH_MARKS (default 3): a call site held by an owner grows when
its live bytes rose at each of the last K runs; a framework pool's reserve
grows when it set K new highs of at least 1 MiB without a longer pause than
its longest step.  What differs from a server's run is only what is fed to
them: each test's runs make a series of their own (the library's marks
interleave every test), and a site that leaks is reported as a leak at each
run rather than as growth.

Allowances: `--tensorleak-limit SIZE` (default 0) for every test,
`@pytest.mark.limit_gpu_leaks("1 MiB")` for one; a leak or growth per run up to
the allowance passes.  Sizes are read as the library reads its TENSORLEAK_*
sizes (tensorleak.parse_size: whole bytes, K/M/G/T, optional i and B, powers of
1024), blanks before the unit allowed.

The failure text's first line names the test's bytes and its own line; the
rest is the test's report as `tensorleak report --format text` prints it
(tensorleak/_pytest_render.py).  Leaks fail the test's call report through
pytest's runtest hooks (tensorleak/_pytest_gate.py); under
pytest-rerunfailures a leaking test is rerun like any failing one.

When the library is not loaded (pytest was not started under `tensorleak run`
or LD_PRELOAD), the plugin re-runs pytest with the library preloaded and says
so; `--tensorleak-sim` also puts the simulated CUDA driver and runtime first on
the library path (tests without a GPU; tensorleak/_pytest_preload.py).
"""

import pytest

import tensorleak
from tensorleak._pytest_gate import LeakGate
from tensorleak._pytest_preload import rerun_under_preload, sim_on_library_path


def pytest_addoption(parser):
    group = parser.getgroup("tensorleak", "GPU memory leaks (tensorleak)")
    group.addoption("--tensorleak", action="store_true", default=False,
                    help="fail tests that leave device memory allocated (re-runs pytest under the "
                         "tensorleak preload when it is not loaded)")
    group.addoption("--tensorleak-limit", metavar="SIZE", default="0",
                    help="device memory a test may leave allocated (default 0); per test: "
                         "@pytest.mark.limit_gpu_leaks(SIZE)")
    group.addoption("--tensorleak-report", metavar="DIR", default=None,
                    help="keep the report (JSON and text) of each leaking test in DIR")
    group.addoption("--tensorleak-sim", action="store_true", default=False,
                    help="run on tensorleak's simulated CUDA driver and runtime (no GPU needed)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "limit_gpu_leaks(size): device memory this test may leave allocated under --tensorleak "
        "(e.g. \"1 MiB\")")
    if not config.getoption("tensorleak"):
        return
    try:
        limit = tensorleak.parse_size(config.getoption("tensorleak_limit"))
    except ValueError as err:
        raise pytest.UsageError("--tensorleak-limit: %s" % err)
    sim = config.getoption("tensorleak_sim")
    if not tensorleak.loaded() or (sim and not sim_on_library_path()):
        rerun_under_preload(config, sim)
    config.pluginmanager.register(LeakGate(config, limit), "tensorleak-gate")
