/* NVIDIA GPUs through the driver API, loaded at run time: a host without the driver (or
 * without a GPU) simply has no CUDA devices, with a note saying why. No CUDA header is
 * included; the few prototypes below are the driver API's stable C ABI. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "device/probe.h"
#include "device/probe_util.h"

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef void *CUcontext;

#define CUDA_ERROR_NO_DEVICE 100
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

typedef struct cu_api {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*PrimaryCtxRelease)(CUdevice);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*MemGetInfo)(size_t *, size_t *);
} cu_api;

/* Symbol name and where its pointer goes; versioned names are the ones today's headers map to. */
#define CU_SYM(field, name) {offsetof(cu_api, field), name}
static const struct {
    size_t off;
    const char *name;
} cu_syms[] = {
    CU_SYM(Init, "cuInit"),
    CU_SYM(DeviceGetCount, "cuDeviceGetCount"),
    CU_SYM(DeviceGet, "cuDeviceGet"),
    CU_SYM(DeviceGetName, "cuDeviceGetName"),
    CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    CU_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    CU_SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    CU_SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    CU_SYM(MemGetInfo, "cuMemGetInfo_v2"),
};

void vsr_probe_cuda(vsr_device_list *list) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        vsr_probe_note(list, "cuda: libcuda.so.1 not found (no NVIDIA driver on this host)");
        return;
    }
    cu_api cu;
    for (size_t i = 0; i < sizeof cu_syms / sizeof cu_syms[0]; i++) {
        void *p = dlsym(lib, cu_syms[i].name);
        if (!p) {
            vsr_probe_note(list, "cuda: libcuda.so.1 lacks %s (driver too old)", cu_syms[i].name);
            dlclose(lib);
            return;
        }
        memcpy((char *)&cu + cu_syms[i].off, &p, sizeof p); /* object <-> function pointer, POSIX dlsym */
    }
    int n = 0;
    CUresult rc = cu.Init(0);
    if (rc == CUDA_ERROR_NO_DEVICE) {
        vsr_probe_note(list, "cuda: the driver sees no GPU");
    } else if (rc != 0) {
        vsr_probe_note(list, "cuda: cuInit failed with CUresult %d", rc);
    } else if ((rc = cu.DeviceGetCount(&n)) != 0) {
        vsr_probe_note(list, "cuda: cuDeviceGetCount failed with CUresult %d", rc);
        n = 0;
    }
    for (int i = 0; i < n; i++) {
        if (list->count >= VSR_MAX_DEVICES) {
            vsr_probe_note(list, "cuda: only the first %d devices of the host are listed", VSR_MAX_DEVICES);
            break;
        }
        CUdevice dev;
        if (cu.DeviceGet(&dev, i)) continue;
        vsr_device *d = &list->dev[list->count];
        memset(d, 0, sizeof *d);
        d->kind = VSR_DEV_CUDA;
        d->index = i;
        if (cu.DeviceGetName(d->name, (int)sizeof d->name, dev)) snprintf(d->name, sizeof d->name, "NVIDIA GPU");
        d->name[sizeof d->name - 1] = '\0';
        if (cu.DeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
            cu.DeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) {
            vsr_probe_note(list, "cuda:%d: cannot read its compute capability; left out", i);
            continue;
        }
        size_t total = 0, free_b = 0, t2 = 0;
        cu.DeviceTotalMem(&total, dev);
        d->mem_total = total;
        /* Free memory needs a context. The primary context is the one the CUDA runtime uses
         * later, so retaining it here creates nothing extra; releasing it lets the driver tear
         * it down if nobody else holds it. */
        CUcontext ctx = NULL, popped = NULL;
        if (!cu.PrimaryCtxRetain(&ctx, dev)) {
            if (!cu.CtxPushCurrent(ctx)) {
                if (!cu.MemGetInfo(&free_b, &t2)) d->mem_free = free_b;
                cu.CtxPopCurrent(&popped);
            }
            cu.PrimaryCtxRelease(dev);
        }
        if (!free_b) vsr_probe_note(list, "cuda:%d: free memory unknown (no context); reported as 0", i);
        d->bf16 = vsr_device_bf16_by_arch(VSR_DEV_CUDA, d->cc_major, d->cc_minor, NULL);
        const vsr_device_build *b = vsr_device_build_caps();
        d->fp4_toolkit = b->fp4_toolkit;
        d->fp4_act_kernel = b->fp4_act_kernel;
        list->count++;
    }
    /* libcuda stays loaded: unloading a driver library with live state is not safe. */
}
