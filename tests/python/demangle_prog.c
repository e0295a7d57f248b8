/* A C++-named allocation site: the function is given PyTorch's real mangled
 * name for DeviceCachingAllocator::alloc_block (c10/cuda/CUDACachingAllocator.cpp,
 * as a torch 2.11 report showed it), so the report must print it demangled.
 * Linked with libstdc++, as every C++ program is, which brings __cxa_demangle. */
#include "cudart_compat.h"

void *alloc_block(size_t bytes) __asm__(
    "_ZN3c104cuda20CUDACachingAllocator6Native22DeviceCachingAllocator11alloc_blockERNS2_12_GLOBAL__N_1"
    "11AllocParamsEbRKSt10shared_ptrINS_15GatheredContextEERSt11unique_lockISt15recursive_mutexE");

__attribute__((noinline)) void *alloc_block(size_t bytes)
{
    void *p = 0;
    cudaMalloc(&p, bytes);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    return alloc_block(1 << 20) ? 0 : 1;
}
