// The C++ library the hosts load after the preload: every way an exception
// or a forced unwind crosses frames that a mixed-up unwinder gets wrong.
// Each function prints what it saw and returns 1 when the C++ rules held.
#include <cstdio>
#include <dlfcn.h>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <stdexcept>
#include <unistd.h>

#define API extern "C" __attribute__((visibility("default")))

extern "C" void cxx_inner_throw(void);

namespace {

struct Guard {
    const char *what;
    bool *ran;
    ~Guard()
    {
        *ran = true;
        std::printf("%s: guard destroyed\n", what);
        std::fflush(stdout);
    }
};

std::once_flag once;

void *exit_thread(void *arg)
{
    Guard g{"pthread_exit", static_cast<bool *>(arg)};
    pthread_exit(nullptr);
}

void *cancelled_thread(void *arg)
{
    Guard g{"pthread_cancel", static_cast<bool *>(arg)};
    for (;;)
        pause(); // a cancellation point
}

} // namespace

API int cxx_plain_throw(void)
{
    try {
        throw std::runtime_error("plain");
    } catch (const std::exception &e) {
        std::printf("plain throw caught: %s\n", e.what());
        return 1;
    }
    return 0;
}

// std::call_once runs the callable under __once_proxy; the exception leaves
// through glibc's pthread_once, whose cleanup is a forced-unwind handler.
API int cxx_call_once_throw(void)
{
    int calls = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        try {
            std::call_once(once, [&] {
                calls++;
                if (attempt == 0)
                    throw std::runtime_error("once");
            });
        } catch (const std::exception &e) {
            std::printf("call_once threw: %s\n", e.what());
        }
    }
    // The first, throwing call leaves the flag unset, so the second runs.
    std::printf("call_once ran %d times\n", calls);
    return calls == 2;
}

API int cxx_rethrow_across_libraries(void)
{
    try {
        try {
            cxx_inner_throw();
        } catch (const std::runtime_error &) {
            throw;
        }
    } catch (const std::runtime_error &e) {
        std::printf("rethrow across libraries caught: %s\n", e.what());
        return std::strcmp(e.what(), "inner") == 0;
    }
    return 0;
}

API int cxx_pthread_exit_runs_destructors(void)
{
    bool ran = false;
    pthread_t t;
    if (pthread_create(&t, nullptr, exit_thread, &ran) != 0 || pthread_join(t, nullptr) != 0)
        return 0;
    return ran;
}

API int cxx_pthread_cancel_runs_destructors(void)
{
    bool ran = false;
    pthread_t t;
    void *status = nullptr;
    if (pthread_create(&t, nullptr, cancelled_thread, &ran) != 0)
        return 0;
    usleep(1000);
    if (pthread_cancel(t) != 0 || pthread_join(t, &status) != 0)
        return 0;
    return ran && status == PTHREAD_CANCELED;
}

namespace cxx_plugin {
// A device allocation from a C++ function of a library loaded locally: the
// report names its frame demangled, the raw name beside it.  cudaMalloc is
// the host's (the preload's hook first in the global scope).
__attribute__((noinline)) bool keep_device(unsigned bytes)
{
    auto malloc_fn = reinterpret_cast<int (*)(void **, size_t)>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
    void *dev = nullptr;
    return malloc_fn && malloc_fn(&dev, bytes) == 0;
}
} // namespace cxx_plugin

API int cxx_keep_device(unsigned bytes)
{
    return cxx_plugin::keep_device(bytes) ? 1 : 0;
}
