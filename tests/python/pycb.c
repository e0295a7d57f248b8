/* A C library that calls back into Python (through a ctypes CFUNCTYPE):
 * the Python -> C -> Python -> allocation case of the pyframes tests. */
__attribute__((noinline, visibility("default"))) void pyframes_call_back(void (*cb)(void))
{
    cb();
    __asm__ volatile("" ::: "memory"); /* keeps the call a call, not a tail jump */
}
