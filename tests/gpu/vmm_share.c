/*
 * vmm_share.c: one physical allocation held by two processes, the way NCCL's
 * cuMem path and vLLM's cuMem allocator share one: cuMemCreate with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, cuMemExportToShareableHandle to a
 * file descriptor, the descriptor sent over a unix socket (SCM_RIGHTS) to a
 * second process that cuMemImportFromShareableHandle's it, maps it and reads
 * the exporter's bytes.  Both keep their handle (leaked on purpose: the
 * exporter's at create_shared, the importer's at import_shared).
 *
 * The importer is started first and has its context before free_start is
 * read, so the device's free memory between free_start and free_end (both
 * while the two hold the allocation) moves by the allocation once: what
 * tensorleak must count once over the two processes' reports.
 */
#include <cuda.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include "kit_common.h"
#include "kit_fd.h"

#define CK(call) KIT_CHECK_RT(call)
#define PIECES 3
#define PATTERN "bytes the exporter wrote"

static void wait_byte(int sock)
{
    char b;
    if (read(sock, &b, 1) != 1)
        exit(4);
}

static void send_byte(int sock)
{
    if (write(sock, "x", 1) != 1)
        exit(4);
}

static CUmemAllocationProp share_prop(CUdevice dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t bytes, CUdevice dev)
{
    CUdeviceptr va = 0;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = (int)dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
    CK(cuMemMap(va, bytes, 0, h, 0));
    CK(cuMemSetAccess(va, bytes, &access, 1));
    return va;
}

__attribute__((noinline)) static CUmemGenericAllocationHandle create_shared(size_t bytes, const CUmemAllocationProp *p)
{
    CUmemGenericAllocationHandle h = 0;
    CK(cuMemCreate(&h, bytes, p, 0));
    return h;
}

__attribute__((noinline)) static CUmemGenericAllocationHandle import_shared(int fd)
{
    CUmemGenericAllocationHandle h = 0;
    CK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    return h;
}

static void start_cuda(CUdevice *dev)
{
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
    CK(cuCtxSetCurrent(ctx));
}

/* The second process: imports, maps, checks the exporter's bytes, keeps its
 * handle (its exit releases it). */
static int importer(int sock)
{
    CUdevice dev;
    start_cuda(&dev);
    send_byte(sock); /* its context exists: the exporter may read free_start */
    int fd = kit_recv_fd(sock);
    size_t bytes = 0;
    if (read(sock, &bytes, sizeof bytes) != (ssize_t)sizeof bytes)
        return 4;
    CUmemGenericAllocationHandle h = import_shared(fd);
    close(fd);
    CUdeviceptr va = map_rw(h, bytes, dev);
    char seen[sizeof PATTERN] = {0};
    CK(cuMemcpyDtoH(seen, va, sizeof seen));
    CK(cuMemUnmap(va, bytes));
    CK(cuMemAddressFree(va, bytes));
    char ok = strcmp(seen, PATTERN) == 0;
    if (write(sock, &ok, 1) != 1)
        return 4;
    wait_byte(sock); /* the exporter has read free_end and taken its snapshot */
    return 0;
}

int main(int argc, char **argv)
{
    long child_sock = kit_int_arg(argc, argv, "--import", -1);
    if (child_sock >= 0)
        return importer((int)child_sock);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 4;
    pid_t pid = fork();
    if (pid == 0) {
        char arg[16];
        close(sv[0]);
        snprintf(arg, sizeof arg, "%d", sv[1]);
        execl("/proc/self/exe", argv[0], "--import", arg, (char *)NULL);
        _exit(5);
    }
    close(sv[1]);
    CUdevice dev;
    start_cuda(&dev);
    wait_byte(sv[0]);

    CUmemAllocationProp prop = share_prop(dev);
    size_t gran = 0, free0 = 0, free1 = 0, total = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t bytes = PIECES * (((2 * KIT_MIB + gran - 1) / gran) * gran);
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free0, &total));

    CUmemGenericAllocationHandle h = create_shared(bytes, &prop);
    int fd = -1;
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUdeviceptr va = map_rw(h, bytes, dev);
    CK(cuMemcpyHtoD(va, PATTERN, sizeof PATTERN));
    CK(cuCtxSynchronize());
    kit_send_fd(sv[0], fd);
    close(fd);
    if (write(sv[0], &bytes, sizeof bytes) != (ssize_t)sizeof bytes)
        return 4;
    char seen = 0;
    if (read(sv[0], &seen, 1) != 1)
        return 4;
    CK(cuMemUnmap(va, bytes));
    CK(cuMemAddressFree(va, bytes));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free1, &total)); /* both processes hold the allocation */

    printf("TL_GROUND_TRUTH {\"sample\":\"vmm_share\",\"api\":\"driver\",\"pid\":%d,"
           "\"requests\":0,\"marks\":0,\"expect_growth\":null,"
           "\"leaks\":{\"count\":1,\"bytes\":%zu},"
           "\"kinds\":{\"vmm_handle\":[1,%zu]},"
           "\"sites\":[{\"function\":\"create_shared\",\"count\":1,\"bytes\":%zu}],"
           "\"importer\":{\"pid\":%d,\"function\":\"import_shared\",\"bytes\":%zu,\"saw_bytes\":%s},"
           "\"granularity\":%zu,\"expected_held\":%zu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), bytes, bytes, bytes, (int)pid, bytes, seen ? "true" : "false", gran, bytes, free0, free1,
           total);
    fflush(stdout);
    kit_snapshot("end");
    send_byte(sv[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 6;
}
