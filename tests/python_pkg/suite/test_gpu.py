"""The suite tests/python_pkg/check_wheel.py runs under pytest --tensorleak:
which of these pass and fail, and what the failures say, is asserted there
(line numbers included: keep the lines of the allocations where they are)."""
import gc

import pytest

import tensorleak
from conftest import cuda_free, cuda_malloc

kept = []


def test_leaks_one_mib():
    kept.append(cuda_malloc(1 << 20))


def test_frees_what_it_allocates(device_buffer, module_buffer):
    cuda_free(cuda_malloc(2 << 20))


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leak_under_allowance(module_buffer):
    kept.append(cuda_malloc(512 << 10))


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leak_over_allowance():
    kept.append(cuda_malloc(3 << 19))


annotated = tensorleak.Pool("suite-pool")


def test_segment_held_by_annotated_pool():
    segment = cuda_malloc(4 << 20)
    annotated.segment(segment, 4 << 20)
    annotated.alloc(segment, 1 << 20)
    annotated.free(segment)


growing = tensorleak.Pool("growing-pool")


@pytest.mark.parametrize("run", range(4))
def test_pool_grows_every_run(run):
    segment = cuda_malloc(2 << 20)
    growing.segment(segment, 2 << 20)


class _CyclicBuffer:
    """Device memory freed by __del__, in a reference cycle: only a garbage
    collection frees it."""

    def __init__(self):
        self.ptr = cuda_malloc(1 << 20)
        self.cycle = self

    def __del__(self):
        cuda_free(self.ptr)


@pytest.fixture
def no_automatic_gc():
    gc.disable()
    yield
    gc.enable()


def test_garbage_in_a_cycle_is_not_a_leak(no_automatic_gc):
    _CyclicBuffer()
