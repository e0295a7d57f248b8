// A second C++ library: its exception crosses into the plugin, which
// catches it, rethrows it and catches it again.
#include <stdexcept>

extern "C" __attribute__((visibility("default"))) void cxx_inner_throw(void)
{
    throw std::runtime_error("inner");
}
