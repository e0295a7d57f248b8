/*
 * ipc.c: CUDA IPC between two processes, the way torch.multiprocessing shares CUDA
 * tensors and multi-process servers hand KV blocks between workers.
 *
 * The exporter (this process) allocates A (4 MiB, never freed: its leak) and B
 * (2 MiB, freed at the end), fills them, exports both with cuIpcGetMemHandle and
 * starts the importer (itself with --import, fork + exec) with the two handles on
 * a pipe.  The importer opens both with cuIpcOpenMemHandle (cuda.h maps it to
 * cuIpcOpenMemHandle_v2), reads A's first bytes back, closes B, closes it once more
 * (the driver's answer is printed) and exits with A still mapped: a mapping never
 * closed, at open_mapping_leak.
 *
 * Ground truth (compare.py): the exporter's TL_GROUND_TRUTH line (its pid, its one
 * leak, cuMemGetInfo before and after; "ipc" says an importer ran), and the
 * importer's TL_IPC_IMPORT line: its pid, the bytes the driver says the mapping
 * holds (cuMemGetAddressRange), the function that opened it, whether the bytes read
 * back are the exporter's.  The importer's report must list one ipc_mapping leak of
 * those bytes at that function, none of them in its own memory figures, and name
 * the exporter's handle.
 */
#include <cuda.h>
#include <stdint.h>
#include <sys/wait.h>
#include "kit_common.h"

#define CK(call) KIT_CHECK_RT(call)

__attribute__((noinline)) static CUdeviceptr alloc_exported_leak(size_t bytes)
{
    CUdeviceptr d = 0;
    CK(cuMemAlloc(&d, bytes));
    return d;
}

__attribute__((noinline)) static CUdeviceptr open_mapping_leak(CUipcMemHandle h)
{
    CUdeviceptr d = 0;
    CK(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    return d;
}

static void start_context(void)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
}

static int importer(void)
{
    CUipcMemHandle h[2];
    if (fread(h, sizeof h[0], 2, stdin) != 2)
        return 3;
    start_context();
    CUdeviceptr a = open_mapping_leak(h[0]);
    CUdeviceptr b = 0;
    CK(cuIpcOpenMemHandle(&b, h[1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CUdeviceptr base = 0;
    size_t mapped = 0;
    CK(cuMemGetAddressRange(&base, &mapped, a));
    unsigned char back[4096];
    CK(cuMemcpyDtoH(back, a, sizeof back));
    int same = 1;
    for (size_t i = 0; i < sizeof back; i++)
        same &= back[i] == 0x5a;
    CK(cuIpcCloseMemHandle(b));
    int again = (int)cuIpcCloseMemHandle(b);
    printf("TL_IPC_IMPORT {\"pid\":%d,\"mapped_bytes\":%zu,\"open_function\":\"open_mapping_leak\","
           "\"bytes_as_written\":%s,\"second_close\":%d}\n",
           (int)getpid(), mapped, same ? "true" : "false", again);
    fflush(stdout);
    return 0; /* A stays mapped */
}

int main(int argc, char **argv)
{
    if (kit_has_flag(argc, argv, "--import"))
        return importer();
    size_t free0 = 0, free1 = 0, total = 0;
    start_context();
    CUdeviceptr w = 0; /* warm-up outside the measured window */
    CK(cuMemAlloc(&w, 2 * KIT_MIB));
    kit_memset(w, 0, 2 * KIT_MIB);
    CK(cuMemFree(w));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free0, &total));

    CUdeviceptr a = alloc_exported_leak(4 * KIT_MIB);
    CUdeviceptr b = 0;
    CK(cuMemAlloc(&b, 2 * KIT_MIB));
    kit_memset(a, 0x5a, 4 * KIT_MIB);
    kit_memset(b, 0x33, 2 * KIT_MIB);
    CK(cuCtxSynchronize());
    CUipcMemHandle h[2];
    CK(cuIpcGetMemHandle(&h[0], a));
    CK(cuIpcGetMemHandle(&h[1], b));

    int fds[2];
    if (pipe(fds) != 0)
        return 3;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[0], 0);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", argv[0], "--import", (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    if (write(fds[1], h, sizeof h) != (ssize_t)sizeof h)
        return 3;
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "ipc: importer failed (status %d)\n", status);
        return 3;
    }
    CK(cuMemFree(b));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free1, &total));

    const unsigned long long M = KIT_MIB;
    printf("TL_GROUND_TRUTH {\"sample\":\"ipc\",\"api\":\"driver\",\"pid\":%d,"
           "\"requests\":0,\"marks\":0,\"expect_growth\":null,"
           "\"leaks\":{\"count\":1,\"bytes\":%llu},"
           "\"kinds\":{\"device\":[1,%llu]},"
           "\"sites\":[{\"function\":\"alloc_exported_leak\",\"count\":1,\"bytes\":%llu}],"
           "\"ipc\":{\"importer\":%d,\"exported\":1},"
           "\"expected_held\":%llu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), 4 * M, 4 * M, 4 * M, (int)pid, 4 * M, free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    return 0;
}
