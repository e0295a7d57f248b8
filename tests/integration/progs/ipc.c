/*
 * CUDA IPC between two processes, through one load path at a time:
 *
 *   ipc runtime|driver|procaddr
 *
 * The exporter (this process) allocates A (1 MiB) and B (256 KiB) and C
 * (64 KiB), writes a pattern into A and B, exports all three, frees C, and
 * tries to open A's handle itself.  It then starts the importer (itself,
 * `ipc import API`) and sends it the three handles over a pipe.  The
 * importer opens A twice and B once, reads both back through copies, closes
 * B, closes A once (one reference of A stays open: a mapping never closed),
 * closes B again, and tries C's handle (its memory was freed) and a handle
 * that is no handle.  When the importer is done the exporter frees B and
 * exits: A was never freed.
 *
 *   runtime   cudaMalloc, cudaIpc*;
 *   driver    the driver's exports: cuMemAlloc_v2, cuIpcGetMemHandle,
 *             cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle;
 *   procaddr  the same through cuGetProcAddress_v2, at the versions cuda.h
 *             maps the names to (cuIpcOpenMemHandle at 11000; A's second
 *             open through the CUDA 4.1 variant, at 4010);
 *   dlsym     the same variants through dlsym on libcuda.so.1's handle.
 *
 *   ipc gone API   the exporter exports A and exits at once; the importer
 *             (`ipc import-gone API`) waits for the exporter's end (its pipe
 *             closes) and tries A's handle: the exporter is gone.
 *
 *   ipc reset API  the exporter as above; the importer (`ipc import-reset
 *             API`) opens A twice and B once, then resets its primary context
 *             (cudaDeviceReset, cuDevicePrimaryCtxReset_v2, or that through
 *             cuGetProcAddress / dlsym), which unmaps both whatever their
 *             references; a close of A's address is then refused, and A opened
 *             again is a new mapping, read back and closed.
 *
 * Every driver answer is printed (both processes write to the same stdout,
 * one after the other), so a test sees the program's behaviour is unchanged
 * under the preload.
 */
#include "cuda_compat.h"
#include "driver_entry.h"
#include "cudart_compat.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*get_handle_fn)(CUipcMemHandle *, CUdeviceptr);
typedef CUresult (*open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);
typedef CUresult (*close_fn)(CUdeviceptr);

enum api { RUNTIME, DRIVER, PROCADDR, DLSYM };
static enum api api;

/* The exported variant a (base name, version) lookup resolves to, for dlsym. */
static const char *variant_of(const char *name, int version)
{
    if (!strcmp(name, "cuMemAlloc"))
        return "cuMemAlloc_v2";
    if (!strcmp(name, "cuMemFree"))
        return "cuMemFree_v2";
    if (!strcmp(name, "cuIpcOpenMemHandle") && version >= 11000)
        return "cuIpcOpenMemHandle_v2";
    return name;
}

static void *driver_fn(const char *name, int version)
{
    void *fn = NULL;
    if (api == DLSYM) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        fn = lib ? dlsym(lib, variant_of(name, version)) : NULL;
        if (!fn) {
            fprintf(stderr, "ipc: no %s\n", variant_of(name, version));
            exit(2);
        }
        return fn;
    }
    return driver_entry(cuGetProcAddress_v2, "ipc", name, version);
}

static void start(void)
{
    if (api == RUNTIME) {
        printf("cudaFree(0) %d\n", (int)cudaFree(0));
        return;
    }
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        exit(2);
}

/* ---- exporter ---- */

static __attribute__((noinline)) CUdeviceptr allocate(size_t bytes)
{
    CUdeviceptr p = 0;
    int rc;
    if (api == RUNTIME) {
        void *v = NULL;
        rc = cudaMalloc(&v, bytes); /* IPC-SITE export runtime */
        p = (uintptr_t)v;
    } else if (api == DRIVER) {
        rc = cuMemAlloc_v2(&p, bytes); /* IPC-SITE export driver */
    } else {
        rc = ((alloc_fn)driver_fn("cuMemAlloc", 3020))(&p, bytes); /* IPC-SITE export procaddr */
    }
    printf("allocate %zu %d\n", bytes, rc);
    return p;
}

static void release(CUdeviceptr p)
{
    int rc = api == RUNTIME ? (int)cudaFree((void *)(uintptr_t)p)
             : api == DRIVER ? (int)cuMemFree_v2(p)
                             : (int)((free_fn)driver_fn("cuMemFree", 3020))(p);
    printf("free %d\n", rc);
}

static CUipcMemHandle export_handle(CUdeviceptr p)
{
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    int rc = api == RUNTIME ? (int)cudaIpcGetMemHandle((cudaIpcMemHandle_t *)&h, (void *)(uintptr_t)p)
             : api == DRIVER ? (int)cuIpcGetMemHandle(&h, p)
                             : (int)((get_handle_fn)driver_fn("cuIpcGetMemHandle", 4010))(&h, p);
    printf("export %d\n", rc);
    return h;
}

static void fill(CUdeviceptr p, size_t bytes, unsigned char seed)
{
    unsigned char *host = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        host[i] = (unsigned char)(seed + i * 7);
    printf("write %d\n", (int)cuMemcpyHtoD_v2(p, host, bytes));
    free(host);
}

/* ---- importer ---- */

static __attribute__((noinline)) CUdeviceptr open_handle(CUipcMemHandle h, int legacy)
{
    CUdeviceptr p = 0;
    int rc;
    if (api == RUNTIME) {
        void *v = NULL;
        rc = cudaIpcOpenMemHandle(&v, *(cudaIpcMemHandle_t *)&h, cudaIpcMemLazyEnablePeerAccess); /* IPC-SITE open runtime */
        p = (uintptr_t)v;
    } else if (api == DRIVER) {
        rc = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS); /* IPC-SITE open driver */
    } else {
        open_fn open = (open_fn)driver_fn("cuIpcOpenMemHandle", legacy ? 4010 : 11000);
        rc = open(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS); /* IPC-SITE open procaddr */
    }
    printf("open %d\n", rc);
    return p;
}

static void close_mapping(CUdeviceptr p)
{
    int rc = api == RUNTIME ? (int)cudaIpcCloseMemHandle((void *)(uintptr_t)p)
             : api == DRIVER ? (int)cuIpcCloseMemHandle(p)
                             : (int)((close_fn)driver_fn("cuIpcCloseMemHandle", 4010))(p);
    printf("close %d\n", rc);
}

/* Reads `bytes` back and says whether they are the exporter's pattern. */
static void verify(CUdeviceptr p, size_t bytes, unsigned char seed)
{
    unsigned char *host = calloc(1, bytes);
    CUresult rc = cuMemcpyDtoH_v2(host, p, bytes);
    size_t same = 0;
    for (size_t i = 0; i < bytes; i++)
        same += host[i] == (unsigned char)(seed + i * 7);
    printf("read %d, %zu of %zu bytes as written\n", (int)rc, same, bytes);
    free(host);
}

static int importer(void)
{
    CUipcMemHandle h[3];
    if (fread(h, sizeof h[0], 3, stdin) != 3)
        return 2;
    start();
    CUdeviceptr a = open_handle(h[0], 0);
    CUdeviceptr a2 = open_handle(h[0], 1);
    printf("same address %d\n", a == a2);
    CUdeviceptr b = open_handle(h[1], 0);
    verify(a, 1 << 20, 1);
    verify(b, 256 << 10, 2);
    size_t size = 0;
    CUdeviceptr base = 0;
    CUresult rc = cuMemGetAddressRange_v2(&base, &size, a + 100);
    printf("address range %d, base %s, %zu bytes\n", (int)rc, base == a ? "the mapping's" : "another", size);
    close_mapping(b);
    close_mapping(a);
    verify(a, 1 << 20, 1); /* one reference left: still mapped */
    close_mapping(b);      /* closed already */
    open_handle(h[2], 0);  /* freed memory */
    CUipcMemHandle bogus;
    memset(&bogus, 0x3c, sizeof bogus);
    open_handle(bogus, 0);
    fflush(stdout);
    return 0;
}

static void reset_context(void)
{
    typedef CUresult (*reset_fn)(CUdevice);
    int rc = api == RUNTIME ? (int)cudaDeviceReset()
             : api == DRIVER ? (int)cuDevicePrimaryCtxReset_v2(0)
                             : (int)((reset_fn)driver_fn("cuDevicePrimaryCtxReset", 11000))(0);
    printf("reset %d\n", rc);
}

static int importer_of_reset(void)
{
    CUipcMemHandle h[3];
    if (fread(h, sizeof h[0], 3, stdin) != 3)
        return 2;
    start();
    CUdeviceptr a = open_handle(h[0], 0);
    open_handle(h[0], 1);
    open_handle(h[1], 0);
    reset_context();
    size_t size = 0;
    CUdeviceptr base = 0;
    printf("address range after reset %d\n", (int)cuMemGetAddressRange_v2(&base, &size, a));
    close_mapping(a); /* unmapped by the reset */
    CUdeviceptr again = open_handle(h[0], 0);
    verify(again, 1 << 20, 1);
    close_mapping(again);
    fflush(stdout);
    return 0;
}

/* The importer of `ipc gone`: the handle arrives, then end of file when the
 * exporter has exited (its descriptors, the memory file's among them, are
 * closed by then). */
static int importer_of_gone(void)
{
    CUipcMemHandle h;
    char rest;
    if (fread(&h, sizeof h, 1, stdin) != 1 || fread(&rest, 1, 1, stdin) != 0)
        return 2;
    start();
    open_handle(h, 0);
    fflush(stdout);
    return 0;
}

static int exporter_gone(const char *self, const char *name)
{
    start();
    CUdeviceptr a = allocate(1 << 20);
    CUipcMemHandle h = export_handle(a);
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0)
        return 2;
    if (fork() == 0) {
        dup2(fds[0], 0);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, "import-gone", name, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    if (write(fds[1], &h, sizeof h) != (ssize_t)sizeof h)
        return 2;
    return 0; /* exits with the pipe's write end open: the importer sees EOF then */
}

/* importer_mode: the importer's first argument (import, import-reset). */
static int exporter(const char *self, const char *name, const char *importer_mode)
{
    start();
    CUdeviceptr a = allocate(1 << 20), b = allocate(256 << 10), c = allocate(64 << 10);
    fill(a, 1 << 20, 1);
    fill(b, 256 << 10, 2);
    CUipcMemHandle h[3] = {export_handle(a), export_handle(b), export_handle(c)};
    CUipcMemHandle again = export_handle(a);
    printf("same handle %d\n", memcmp(&again, &h[0], sizeof again) == 0);
    release(c);
    open_handle(h[0], 0); /* in the exporting process */
    fflush(stdout);

    int fds[2];
    if (pipe(fds) != 0)
        return 2;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[0], 0);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, importer_mode, name, (char *)NULL);
        _exit(127);
    }
    close(fds[0]);
    if (write(fds[1], h, sizeof h) != (ssize_t)sizeof h)
        return 2;
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("importer exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    release(b);
    return 0;
}

static int parse_api(const char *s)
{
    if (!strcmp(s, "runtime"))
        api = RUNTIME;
    else if (!strcmp(s, "driver"))
        api = DRIVER;
    else if (!strcmp(s, "procaddr"))
        api = PROCADDR;
    else if (!strcmp(s, "dlsym"))
        api = DLSYM;
    else
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "import") && parse_api(argv[2]) == 0)
        return importer();
    if (argc == 3 && !strcmp(argv[1], "import-gone") && parse_api(argv[2]) == 0)
        return importer_of_gone();
    if (argc == 3 && !strcmp(argv[1], "gone") && parse_api(argv[2]) == 0)
        return exporter_gone("/proc/self/exe", argv[2]);
    if (argc == 3 && !strcmp(argv[1], "import-reset") && parse_api(argv[2]) == 0)
        return importer_of_reset();
    if (argc == 3 && !strcmp(argv[1], "reset") && parse_api(argv[2]) == 0)
        return exporter("/proc/self/exe", argv[2], "import-reset");
    if (argc == 2 && parse_api(argv[1]) == 0)
        return exporter("/proc/self/exe", argv[1], "import");
    fprintf(stderr, "usage: ipc [gone|reset] runtime|driver|procaddr|dlsym\n");
    return 2;
}
