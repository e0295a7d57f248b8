"""A Python program that allocates device memory through the CUDA runtime
(ctypes): weights freed at the end, one KV block per request kept in a list
that is never emptied (the leak), a mark per request.  check_wheel.py runs it
under the wheel's `tensorleak run --sim` and the meson build's, and compares
the reports."""
import ctypes

cudart = ctypes.CDLL("libcudart.so.13")
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
process = ctypes.CDLL(None)
mark = getattr(process, "tensorleak_mark", None)
if mark is not None:
    mark.argtypes = [ctypes.c_char_p]

kv_cache = []


def cuda_malloc(nbytes):
    ptr = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(ptr), nbytes) == 0
    return ptr.value


def serve(request):
    kv_cache.append(cuda_malloc(1 << 20))
    scratch = cuda_malloc(256 << 10)
    cudart.cudaFree(scratch)


weights = cuda_malloc(8 << 20)
for request in range(4):
    serve(request)
    if mark is not None:
        mark(b"request")
cudart.cudaFree(weights)
print("app: served 4 requests, kept %d KV blocks" % len(kv_cache))
