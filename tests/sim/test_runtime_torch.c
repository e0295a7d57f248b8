/*
 * test_runtime_torch.c — the simulated runtime's calls beyond allocation,
 * the ones PyTorch links (last error, device code, properties, copies,
 * streams, events, peers) and the simulated NVML.  Two devices of 64 MiB
 * (SIMCUDA_DEVICES=2); libnvidia-ml.so.1 is found on LD_LIBRARY_PATH.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "sim/runtime.h"
#include "sim_test.h"

#define CAPACITY (64 * MiB)
#define rt_ok(call) cr_assert_eq((call), cudaSuccess, "%s failed", #call)
#define rt_err(call, code) cr_assert_eq((int)(call), (int)(code), "%s: expected %d", #call, (int)(code))

static void *last_error_of_a_new_thread(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)cudaPeekAtLastError();
}

Test(runtime_torch, a_failed_call_is_the_threads_last_error_until_read)
{
    void *p;
    rt_ok(cudaGetLastError());
    rt_err(cudaMalloc(&p, CAPACITY + 1), cudaErrorMemoryAllocation);
    rt_ok(cudaMalloc(&p, 512)); /* a success leaves it */
    rt_err(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    rt_err(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    pthread_t t;
    void *other = NULL;
    pthread_create(&t, NULL, last_error_of_a_new_thread, NULL);
    pthread_join(t, &other);
    cr_assert_eq((intptr_t)other, cudaSuccess, "another thread has a last error of its own");
    rt_err(cudaGetLastError(), cudaErrorMemoryAllocation);
    rt_ok(cudaGetLastError());
    rt_err(cudaMemcpy(p, p, 4, (enum cudaMemcpyKind)7), SIMRT_ERROR_INVALID_MEMCPY_DIRECTION);
    rt_err(cudaGetLastError(), SIMRT_ERROR_INVALID_MEMCPY_DIRECTION);
}

static void kernel_stub(void) {}
static void not_a_kernel(void) {}
static int device_var;
static int host_only_var;

Test(runtime_torch, a_registered_kernel_fails_to_launch_with_not_supported_as_the_last_error)
{
    static const char image[64] = "not a real fat binary";
    void **fatbin = __cudaRegisterFatBinary((void *)image);
    cr_assert_not_null(fatbin);
    __cudaRegisterFunction(fatbin, (const char *)kernel_stub, (char *)"kernel_stub", "kernel_stub", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterVar(fatbin, (char *)&device_var, (char *)"device_var", "device_var", 0, sizeof device_var, 0, 0);
    __cudaRegisterFatBinaryEnd(fatbin);

    dim3 grid = { 4, 1, 1 }, block = { 128, 1, 1 }, g2, b2;
    size_t shared = 0;
    cudaStream_t stream = (cudaStream_t)0x1, s2 = NULL;
    cr_assert_eq(__cudaPushCallConfiguration(grid, block, 256, stream), 0u);
    rt_ok(__cudaPopCallConfiguration(&g2, &b2, &shared, &s2));
    cr_assert(g2.x == 4 && b2.x == 128 && shared == 256 && s2 == stream);
    rt_err(__cudaPopCallConfiguration(&g2, &b2, &shared, &s2), 52); /* cudaErrorMissingConfiguration */
    rt_err(cudaGetLastError(), 52);

    cudaKernel_t k = NULL;
    rt_ok(__cudaGetKernel(&k, (const void *)kernel_stub));
    rt_err(__cudaLaunchKernel(k, grid, block, NULL, 0, NULL), cudaErrorNotSupported);
    rt_err(cudaGetLastError(), cudaErrorNotSupported);
    rt_err(cudaLaunchKernel((const void *)kernel_stub, grid, block, NULL, 0, NULL), cudaErrorNotSupported);
    struct cudaFuncAttributes *attr = malloc(4096);
    rt_err(cudaFuncGetAttributes(attr, (const void *)kernel_stub), cudaErrorNotSupported);
    void *addr;
    rt_err(cudaGetSymbolAddress(&addr, &device_var), cudaErrorNotSupported);

    rt_err(__cudaGetKernel(&k, (const void *)not_a_kernel), SIMRT_ERROR_INVALID_DEVICE_FUNCTION);
    rt_err(cudaLaunchKernel((const void *)not_a_kernel, grid, block, NULL, 0, NULL), SIMRT_ERROR_INVALID_DEVICE_FUNCTION);
    rt_err(cudaFuncGetAttributes(attr, (const void *)not_a_kernel), SIMRT_ERROR_INVALID_DEVICE_FUNCTION);
    rt_err(cudaGetSymbolAddress(&addr, &host_only_var), SIMRT_ERROR_INVALID_SYMBOL);
    rt_err(cudaGetLastError(), SIMRT_ERROR_INVALID_SYMBOL);

    __cudaUnregisterFatBinary(fatbin);
    rt_err(cudaLaunchKernel((const void *)kernel_stub, grid, block, NULL, 0, NULL), SIMRT_ERROR_INVALID_DEVICE_FUNCTION);
    rt_err(cudaGetSymbolAddress(&addr, &device_var), SIMRT_ERROR_INVALID_SYMBOL);
    free(attr);
}

Test(runtime_torch, device_properties_are_the_drivers_attributes)
{
    struct cudaDeviceProp p;
    memset(&p, 0x55, sizeof p);
    rt_ok(cudaGetDeviceProperties(&p, 1));
    cr_assert_str_eq(p.name, "tensorleak simulated GPU");
    cr_assert_eq(p.totalGlobalMem, CAPACITY);
    cr_assert(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132);
    cr_assert(p.warpSize == 32 && p.maxThreadsPerBlock == 1024 && p.maxThreadsDim[2] == 64);
    cr_assert_eq(p.l2CacheSize, 52428800);
    cr_assert_eq(p.sharedMemPerBlockOptin, 232448);
    cr_assert_eq(p.pciBusID, 2);
    cr_assert_eq(p.streamPrioritiesSupported, 1);
    cr_assert_eq(p.reserved[0], 0, "unlisted fields are zero, not left as they were");
    cr_assert_eq(memcmp(p.uuid.bytes, "tensorleak-sim\0\1", 16), 0);
    int v = 0;
    rt_ok(cudaDeviceGetAttribute(&v, (enum cudaDeviceAttr)16, 1));
    cr_assert_eq(v, 132);
    rt_err(cudaGetDeviceProperties(&p, 2), cudaErrorInvalidDevice);
    char bus[32];
    rt_ok(cudaDeviceGetPCIBusId(bus, sizeof bus, 1));
    cr_assert_str_eq(bus, "0000:02:00.0");
    rt_ok(cudaDeviceCanAccessPeer(&v, 0, 1));
    cr_assert_eq(v, 0);
    rt_err(cudaDeviceEnablePeerAccess(1, 0), SIMRT_ERROR_PEER_ACCESS_UNSUPPORTED);
}

Test(runtime_torch, copies_and_memsets_move_real_bytes_and_pointers_say_what_they_are)
{
    unsigned char *d, *d2, *pinned, *managed;
    unsigned char host[4096], back[4096];
    rt_ok(cudaMalloc((void **)&d, sizeof host));
    rt_ok(cudaMalloc((void **)&d2, sizeof host));
    rt_ok(cudaMemset(d, 0xAB, sizeof host));
    rt_ok(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof back; i++)
        cr_assert_eq(back[i], 0xAB);
    for (size_t i = 0; i < sizeof host; i++)
        host[i] = (unsigned char)(i * 7);
    rt_ok(cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, NULL));
    rt_ok(cudaMemcpy(d2, d, sizeof host, cudaMemcpyDefault));
    rt_ok(cudaMemsetAsync(d2 + 100, 0, 10, NULL));
    /* 8 rows of 16 bytes out of rows 64 bytes apart */
    rt_ok(cudaMemcpy2DAsync(back, 16, d2, 64, 16, 8, cudaMemcpyDeviceToHost, NULL));
    rt_ok(cudaStreamSynchronize(NULL));
    for (size_t r = 0; r < 8; r++)
        for (size_t c = 0; c < 16; c++) {
            size_t at = r * 64 + c;
            cr_assert_eq(back[r * 16 + c], at >= 100 && at < 110 ? 0 : (unsigned char)(at * 7));
        }

    rt_ok(cudaMallocHost((void **)&pinned, 4096));
    rt_ok(cudaMallocManaged((void **)&managed, 4096, cudaMemAttachGlobal));
    struct cudaPointerAttributes a;
    rt_ok(cudaPointerGetAttributes(&a, d + 8));
    cr_assert(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == d + 8);
    rt_ok(cudaPointerGetAttributes(&a, pinned));
    cr_assert(a.type == cudaMemoryTypeHost && a.hostPointer == pinned);
    rt_ok(cudaPointerGetAttributes(&a, managed));
    cr_assert_eq(a.type, cudaMemoryTypeManaged);
    rt_ok(cudaPointerGetAttributes(&a, host));
    cr_assert(a.type == cudaMemoryTypeUnregistered && a.devicePointer == NULL);
}

static pthread_mutex_t host_fn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t host_fn_done = PTHREAD_COND_INITIALIZER;
static int host_fn_calls;

static void host_fn(void *arg)
{
    pthread_mutex_lock(&host_fn_lock);
    host_fn_calls += *(int *)arg;
    pthread_cond_signal(&host_fn_done);
    pthread_mutex_unlock(&host_fn_lock);
}

Test(runtime_torch, priority_streams_events_and_host_functions)
{
    int least = 1, greatest = 1, prio = 1;
    rt_ok(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cr_assert(least == 0 && greatest == -5);
    cudaStream_t s;
    rt_ok(cudaStreamCreateWithPriority(&s, 1, -3));
    rt_ok(cudaStreamGetPriority(s, &prio));
    cr_assert_eq(prio, -3);
    rt_ok(cudaStreamQuery(s));
    cudaEvent_t a, b;
    rt_ok(cudaEventCreate(&a));
    rt_ok(cudaEventCreateWithFlags(&b, 0));
    rt_ok(cudaEventRecord(a, s));
    rt_ok(cudaEventRecord(b, s));
    rt_ok(cudaStreamWaitEvent(NULL, b, 0));
    rt_ok(cudaEventSynchronize(b));
    rt_ok(cudaEventQuery(b));
    float ms = -1;
    rt_ok(cudaEventElapsedTime(&ms, a, b));
    cr_assert_geq(ms, 0.0f);
    rt_ok(cudaEventDestroy(a));

    /* The host function runs on a thread of its own while this one holds
     * the lock it takes: no deadlock. */
    static int one = 1;
    pthread_mutex_lock(&host_fn_lock);
    rt_ok(cudaLaunchHostFunc(s, host_fn, &one));
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    while (host_fn_calls == 0)
        cr_assert_eq(pthread_cond_timedwait(&host_fn_done, &host_fn_lock, &until), 0, "host function never ran");
    pthread_mutex_unlock(&host_fn_lock);
    rt_err(cudaLaunchHostFunc(s, NULL, NULL), cudaErrorInvalidValue);
    rt_ok(cudaStreamDestroy(s));
    rt_err(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
}

Test(runtime_torch, error_codes_torch_checks_have_names)
{
    static const struct { int code; const char *name, *text; } want[] = {
        { 13, "cudaErrorInvalidSymbol", "invalid device symbol" },
        { 98, "cudaErrorInvalidDeviceFunction", "invalid device function" },
        { 209, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device" },
        { 217, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices" },
        { 600, "cudaErrorNotReady", "device not ready" },
        { 801, "cudaErrorNotSupported", "operation not supported" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_str_eq(cudaGetErrorName((cudaError_t)want[i].code), want[i].name);
        cr_assert_str_eq(cudaGetErrorString((cudaError_t)want[i].code), want[i].text);
    }
}

/* ---- NVML ---- */

typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct {
    unsigned pid;
    unsigned long long used;
    unsigned gi, ci;
} nvml_process;

Test(runtime_torch, nvml_reports_the_simulated_drivers_memory_and_this_process)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    cr_assert_not_null(h, "%s", dlerror());
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
    int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
    int (*by_index)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*by_pci)(const char *, void **) = (int (*)(const char *, void **))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    int (*memory)(void *, nvml_memory *) = (int (*)(void *, nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    int (*procs)(void *, unsigned *, nvml_process *) =
        (int (*)(void *, unsigned *, nvml_process *))dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    int (*uuid)(void *, char *, unsigned) = (int (*)(void *, char *, unsigned))dlsym(h, "nvmlDeviceGetUUID");
    int (*nvlink)(void *, unsigned, int *) = (int (*)(void *, unsigned, int *))dlsym(h, "nvmlDeviceGetNvLinkRemoteDeviceType");
    cr_assert(init && shutdown && count && by_index && by_pci && memory && procs && uuid && nvlink);

    unsigned n = 0;
    cr_assert_eq(count(&n), 1, "before nvmlInit: NVML_ERROR_UNINITIALIZED");
    cr_assert_eq(init(), 0);
    cr_assert_eq(count(&n), 0);
    cr_assert_eq(n, 2);
    void *dev0, *dev1, *found;
    cr_assert_eq(by_index(0, &dev0), 0);
    cr_assert_eq(by_index(1, &dev1), 0);
    cr_assert_eq(by_pci("00000000:02:00.0", &found), 0);
    cr_assert_eq(found, dev1);
    cr_assert_eq(by_pci("0000:01:00.0", &found), 0);
    cr_assert_eq(found, dev0);
    cr_assert_eq(by_pci("0000:09:00.0", &found), 6, "NVML_ERROR_NOT_FOUND");
    char text[96];
    cr_assert_eq(uuid(dev1, text, sizeof text), 0);
    cr_assert_str_eq(text, "GPU-74656e73-6f72-6c65-616b-2d73696d0001");
    int type;
    cr_assert_eq(nvlink(dev0, 0, &type), 3, "NVML_ERROR_NOT_SUPPORTED");

    nvml_memory m;
    nvml_process p[2];
    unsigned np = 2;
    cr_assert_eq(memory(dev0, &m), 0);
    cr_assert(m.total == CAPACITY && m.used == 0 && m.free == CAPACITY);
    cr_assert_eq(procs(dev0, &np, p), 0);
    cr_assert_eq(np, 0, "no process holds memory yet");

    void *a;
    rt_ok(cudaMalloc(&a, 3 * MiB + 100));
    size_t free_bytes, total;
    rt_ok(cudaMemGetInfo(&free_bytes, &total));
    cr_assert_eq(memory(dev0, &m), 0);
    cr_assert_eq(m.used, total - free_bytes);
    cr_assert_eq(m.used, 3 * MiB + 512);
    np = 0;
    cr_assert_eq(procs(dev0, &np, NULL), 7, "NVML_ERROR_INSUFFICIENT_SIZE");
    cr_assert_eq(np, 1);
    np = 2;
    cr_assert_eq(procs(dev0, &np, p), 0);
    cr_assert(np == 1 && p[0].pid == (unsigned)getpid() && p[0].used == m.used);
    cr_assert_eq(memory(dev1, &m), 0);
    cr_assert_eq(m.used, 0, "device 1 holds nothing");
    cr_assert_eq(shutdown(), 0);
    cr_assert_eq(shutdown(), 1, "a second shutdown: NVML_ERROR_UNINITIALIZED");
}

Test(runtime_torch, a_captured_graph_lists_its_memory_nodes)
{
    cudaStream_t s;
    cudaGraph_t graph;
    void *p;
    rt_ok(cudaStreamCreateWithFlags(&s, 1));
    rt_ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    rt_ok(cudaStreamGetCaptureInfo(s, &status, &id, NULL, NULL, NULL, NULL));
    cr_assert(status == cudaStreamCaptureStatusActive && id != 0);
    rt_ok(cudaMallocAsync(&p, 1 * MiB, s));
    rt_ok(cudaFreeAsync(p, s));
    rt_ok(cudaStreamEndCapture(s, &graph));
    size_t n = 0;
    rt_ok(cudaGraphGetNodes(graph, NULL, &n));
    cr_assert_eq(n, 2);
    cudaGraphNode_t nodes[3] = { NULL, NULL, (cudaGraphNode_t)0x1 };
    n = 3;
    rt_ok(cudaGraphGetNodes(graph, nodes, &n));
    cr_assert(n == 2 && nodes[0] && nodes[1] && nodes[2] == NULL);
    rt_err(cudaGraphAddNode(NULL, graph, NULL, NULL, 0, NULL), cudaErrorNotSupported);
    rt_ok(cudaGraphDestroy(graph));
    rt_err(cudaGraphGetNodes(graph, NULL, &n), cudaErrorInvalidValue);
}

Test(runtime_torch, an_interprocess_event_handle_opens_as_a_completed_event)
{
    cudaEvent_t ev, plain, opened;
    cudaIpcEventHandle_t h;
    rt_ok(cudaEventCreateWithFlags(&ev, 2 | 4)); /* DisableTiming | Interprocess */
    rt_ok(cudaEventCreateWithFlags(&plain, 0));
    rt_ok(cudaEventRecord(ev, NULL));
    rt_ok(cudaIpcGetEventHandle(&h, ev));
    rt_err(cudaIpcGetEventHandle(&h, plain), cudaErrorInvalidValue);
    rt_ok(cudaIpcGetEventHandle(&h, ev));
    rt_ok(cudaIpcOpenEventHandle(&opened, h));
    rt_ok(cudaEventQuery(opened));
    rt_ok(cudaStreamWaitEvent(NULL, opened, 0));
    float ms;
    rt_err(cudaEventElapsedTime(&ms, opened, opened), cudaErrorInvalidResourceHandle); /* timing disabled */
    rt_ok(cudaEventDestroy(opened));

    cudaIpcEventHandle_t junk;
    memset(&junk, 0x5a, sizeof junk);
    rt_err(cudaIpcOpenEventHandle(&opened, junk), cudaErrorInvalidValue);
    /* The exporter gone: a handle naming a child that has exited. */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    cr_assert_gt(child, 0);
    waitpid(child, NULL, 0);
    cudaIpcEventHandle_t gone = h;
    int32_t dead = (int32_t)child;
    memcpy(gone.reserved + 16, &dead, sizeof dead);
    rt_err(cudaIpcOpenEventHandle(&opened, gone), SIMRT_ERROR_MAP_BUFFER_OBJECT_FAILED);
}
