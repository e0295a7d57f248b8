/*
 * Shareable VMM handles: cuMemExportToShareableHandle and
 * cuMemImportFromShareableHandle with POSIX file descriptors, each reached
 * through the driver's export and through cuGetProcAddress_v2 (10020).
 *
 *   vmm_share same   one process: a 4 MiB handle created to allow POSIX
 *                    descriptors is exported (export), imported back
 *                    (cuGetProcAddress), mapped and written through the
 *                    import; cuMemRetainAllocationHandle on that mapping and
 *                    its release; the created reference is released, the
 *                    imported one kept (4 MiB left, once); with `keep`
 *                    the created one is kept too.  Then the
 *                    refusals: an export of a handle created without the
 *                    type, an export as Win32, imports of a closed
 *                    descriptor, of /dev/null and as a fabric handle, a
 *                    create asking for Win32 handles.
 *   vmm_share pair   two processes: this one creates 6 MiB
 *                    (cuGetProcAddress), writes to it, exports it (cuGetProcAddress) and
 *                    sends the descriptor over a unix socket (SCM_RIGHTS) to
 *                    a child it starts (`vmm_share import FD`), which imports
 *                    it (export), maps it, reads what the parent wrote,
 *                    writes its own bytes, retains and releases through its
 *                    mapping and keeps its imported handle.  The parent then
 *                    reads the child's bytes and keeps its handle too.
 *
 * Prints every driver answer and the bytes read, so the test sees the
 * program's behaviour is unchanged under the preload.
 */
#include "cuda_compat.h"
#include "driver_entry.h"
#include "tests/gpu/kit_fd.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*export_fn)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);

static void *driver_fn(const char *name, int version)
{
    return driver_entry(cuGetProcAddress_v2, "vmm_share", name, version);
}

static CUmemAllocationProp prop_of(unsigned handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return p;
}

static void must(CUresult rc, const char *what)
{
    printf("%s %d\n", what, (int)rc);
    if (rc != CUDA_SUCCESS)
        exit(3);
}

/* Reserves, maps and opens for read-write `size` bytes of `h`. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size)
{
    CUdeviceptr va;
    must(cuMemAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
    must(cuMemMap(va, size, 0, h, 0), "cuMemMap");
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    must(cuMemSetAccess(va, size, &acc, 1), "cuMemSetAccess");
    return va;
}

typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);

static void put(CUdeviceptr va, const char *text)
{
    htod_fn htod = (htod_fn)driver_fn("cuMemcpyHtoD", 3020);
    must(htod(va, text, strlen(text) + 1), "cuMemcpyHtoD");
}

static void show(CUdeviceptr va)
{
    dtoh_fn dtoh = (dtoh_fn)driver_fn("cuMemcpyDtoH", 3020);
    char buf[64] = {0};
    must(dtoh(buf, va, sizeof buf - 1), "cuMemcpyDtoH");
    printf("read \"%s\"\n", buf);
}

static void unmap(CUdeviceptr va, size_t size)
{
    must(cuMemUnmap(va, size), "cuMemUnmap");
    must(cuMemAddressFree(va, size), "cuMemAddressFree");
}

static int same(bool keep_created)
{
    import_fn import = (import_fn)driver_fn("cuMemImportFromShareableHandle", 10020);
    CUmemAllocationProp prop = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h, imported, retained;
    must(cuMemCreate(&h, 4 * MiB, &prop, 0), "cuMemCreate"); /* VMM-SITE same create */
    int fd = -1;
    must(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "cuMemExportToShareableHandle");
    CUresult rc = import(&imported, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); /* VMM-SITE same import */
    must(rc, "import(10020)");
    close(fd);
    printf("same handle %d\n", imported == h);
    CUdeviceptr va = map_rw(imported, 4 * MiB);
    put(va, "written through the import");
    show(va);
    must(cuMemRetainAllocationHandle(&retained, (void *)(uintptr_t)(va + MiB)), "cuMemRetainAllocationHandle");
    printf("retained the import %d\n", retained == imported);
    must(cuMemRelease(retained), "cuMemRelease retained");
    unmap(va, 4 * MiB);
    if (!keep_created)
        must(cuMemRelease(h), "cuMemRelease created");

    /* What the driver refuses. */
    CUmemAllocationProp plain = prop_of(CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle p;
    must(cuMemCreate(&p, 2 * MiB, &plain, 0), "cuMemCreate plain");
    printf("export plain %d\n", (int)cuMemExportToShareableHandle(&fd, p, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    printf("export win32 %d\n", (int)cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0));
    must(cuMemRelease(p), "cuMemRelease plain");
    int closed = open("/dev/null", O_RDONLY);
    close(closed);
    printf("import closed fd %d\n",
           (int)cuMemImportFromShareableHandle(&p, (void *)(uintptr_t)closed, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    int devnull = open("/dev/null", O_RDONLY);
    printf("import /dev/null %d\n",
           (int)cuMemImportFromShareableHandle(&p, (void *)(uintptr_t)devnull, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(devnull);
    printf("import fabric %d\n", (int)cuMemImportFromShareableHandle(&p, &prop, CU_MEM_HANDLE_TYPE_FABRIC));
    CUmemAllocationProp win32 = prop_of(CU_MEM_HANDLE_TYPE_WIN32);
    printf("create win32 %d\n", (int)cuMemCreate(&p, 2 * MiB, &win32, 0));
    return 0;
}

static int importer(int sock)
{
    int fd = kit_recv_fd(sock);
    CUmemGenericAllocationHandle h, retained;
    CUresult rc = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); /* VMM-SITE pair import */
    must(rc, "child cuMemImportFromShareableHandle");
    close(fd);
    CUdeviceptr va = map_rw(h, 6 * MiB);
    show(va);
    put(va + 2 * MiB, "the importer was here");
    must(cuMemRetainAllocationHandle(&retained, (void *)(uintptr_t)va), "child cuMemRetainAllocationHandle");
    must(cuMemRelease(retained), "child cuMemRelease retained");
    unmap(va, 6 * MiB);
    fflush(stdout);
    if (write(sock, "d", 1) != 1)
        return 4;
    return 0; /* the imported handle is kept */
}

static int pair(const char *self)
{
    create_fn create = (create_fn)driver_fn("cuMemCreate", 10020);
    export_fn export = (export_fn)driver_fn("cuMemExportToShareableHandle", 10020);
    CUmemAllocationProp prop = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h;
    must(create(&h, 6 * MiB, &prop, 0), "create(10020)"); /* VMM-SITE pair create */
    /* Written before the export: the bytes the handle already holds travel. */
    CUdeviceptr va = map_rw(h, 6 * MiB);
    put(va, "the exporter's bytes");
    int fd = -1;
    must(export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export(10020)");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 4;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        char arg[16];
        snprintf(arg, sizeof arg, "%d", sv[1]);
        execl(self, self, "import", arg, (char *)NULL);
        _exit(5);
    }
    close(sv[1]);
    kit_send_fd(sv[0], fd);
    close(fd);
    char done;
    if (read(sv[0], &done, 1) != 1)
        return 4;
    int status;
    waitpid(pid, &status, 0);
    printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    show(va + 2 * MiB);
    unmap(va, 6 * MiB);
    return 0; /* the created handle is kept */
}

int main(int argc, char **argv)
{
    if (cuInit(0) != CUDA_SUCCESS)
        return 2;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 2;
    if (argc > 1 && !strcmp(argv[1], "same"))
        return same(argc > 2 && !strcmp(argv[2], "keep"));
    if (argc > 1 && !strcmp(argv[1], "pair"))
        return pair(argv[0]);
    if (argc > 2 && !strcmp(argv[1], "import"))
        return importer(atoi(argv[2]));
    fprintf(stderr, "usage: vmm_share same|pair\n");
    return 2;
}
