"""Device memory for the suite, from the simulated CUDA runtime through
ctypes (pytest --tensorleak --tensorleak-sim puts it first on the library
path)."""
import ctypes

import pytest

_cudart = ctypes.CDLL("libcudart.so.13")
_cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
_cudart.cudaFree.argtypes = [ctypes.c_void_p]


def cuda_malloc(nbytes):
    ptr = ctypes.c_void_p()
    assert _cudart.cudaMalloc(ctypes.byref(ptr), nbytes) == 0
    return ptr.value


def cuda_free(ptr):
    assert _cudart.cudaFree(ptr) == 0


@pytest.fixture
def device_buffer():
    """A function-scoped fixture's 256 KiB, freed at teardown: not the test's."""
    ptr = cuda_malloc(256 << 10)
    yield ptr
    cuda_free(ptr)


@pytest.fixture(scope="module")
def module_buffer():
    """A module-scoped fixture's 128 KiB, alive across tests: not a leak of the first test using it."""
    ptr = cuda_malloc(128 << 10)
    yield ptr
    cuda_free(ptr)
