"""An allocation from a sub-interpreter (the interpreter's private
_xxsubinterpreters / _interpreters module, 3.9+), for test_pyframes.py."""
try:
    import _interpreters as interpreters
except ImportError:
    import _xxsubinterpreters as interpreters

CODE = '''
import ctypes
def sub_alloc():
    rt = ctypes.CDLL("libcudart.so.13")
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(2 << 20))
sub_alloc()
'''


def run_in_subinterpreter():
    try:
        interp = interpreters.create(isolated=False)  # ctypes is a single-phase module
    except TypeError:
        interp = interpreters.create()
    interpreters.run_string(interp, CODE)  # RUN-LINE


if __name__ == "__main__":
    run_in_subinterpreter()
