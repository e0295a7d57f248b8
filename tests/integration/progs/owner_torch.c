/* A PyTorch-shaped program over the fake libc10_cuda.so (owner_c10.c):
 * four 3 MiB tensors, one of them freed, and a 1 MiB raw allocation.  What
 * holds the memory depends on the allocator's setting, as in PyTorch:
 * caching (segments: cache), expandable_segments:True (VMM ranges, handles,
 * mappings: cache) or PYTORCH_NO_CUDA_MEMORY_CACHING=1 (one cudaMalloc per
 * tensor: the program's, so the three kept tensors and the raw allocation
 * leak).  With "marks", each tensor is followed by a mark. */
#include "tensorleak.h"
#include <stdio.h>
#include <string.h>

void *c10_tensor(size_t bytes);
void *c10_raw_alloc(size_t bytes);
void c10_tensor_free(void *p);

int main(int argc, char **argv)
{
    int marks = argc > 1 && strcmp(argv[1], "marks") == 0;
    void *t[4];
    for (int i = 0; i < 4; i++) {
        if (!(t[i] = c10_tensor(3u << 20)))
            return 1;
        if (marks)
            tensorleak_mark("tensor");
    }
    c10_tensor_free(t[3]);
    if (!c10_raw_alloc(1u << 20))
        return 2;
    printf("owner_torch: 3 tensors kept\n");
    return 0;
}
