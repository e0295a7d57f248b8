// A C++ program linked as usual (libstdc++ and libgcc_s are its own
// DT_NEEDED, ahead of the preload's dependencies) running the plugin's
// cases, its own throw from main, and one kept device allocation.
#include <cstdio>
#include <stdexcept>

extern "C" {
int cudaMalloc(void **p, size_t size);
int cxx_plain_throw(void);
int cxx_call_once_throw(void);
int cxx_rethrow_across_libraries(void);
int cxx_pthread_exit_runs_destructors(void);
int cxx_pthread_cancel_runs_destructors(void);
}

namespace cxx_prog {
// The kept allocation, from a C++ function: its frame's name is mangled
// (_ZN8cxx_prog11keep_deviceEm), and reports show it demangled.
__attribute__((noinline)) void *keep_device(size_t bytes)
{
    void *dev = nullptr;
    return cudaMalloc(&dev, bytes) == 0 ? dev : nullptr;
}
} // namespace cxx_prog

int main()
{
    if (!cxx_prog::keep_device(1u << 20))
        return 3;
    int ok = cxx_plain_throw() + cxx_call_once_throw() + cxx_rethrow_across_libraries() +
             cxx_pthread_exit_runs_destructors() + cxx_pthread_cancel_runs_destructors();
    try {
        throw std::logic_error("from main");
    } catch (const std::logic_error &e) {
        std::printf("main caught: %s\n", e.what());
        ok++;
    }
    std::printf("%d of 6 cases ok\n", ok);
    return ok == 6 ? 0 : 1;
}
