/* vsr/device.h: what devices this host has, what each can run, and the gate
 * every package passes before any weight is read.
 *
 * Probing never links a vendor library: NVIDIA through libcuda.so.1 loaded at
 * run time (driver API), AMD through sysfs (/sys/class/kfd) and libamdhip64.so
 * loaded at run time when present, the CPU through cpuid and /proc.
 * Tests describe devices by building vsr_device values directly (or with
 * vsr_device_from_json); the gate takes the list as an argument, so there is
 * no hidden switch production code could trip over. */
#ifndef VSR_DEVICE_H
#define VSR_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSR_MAX_DEVICES 16

typedef enum vsr_device_kind { VSR_DEV_CPU, VSR_DEV_CUDA, VSR_DEV_ROCM, VSR_DEV_KIND_COUNT } vsr_device_kind;

enum vsr_cpu_feature {
    VSR_CPU_SSE42 = 1u << 0,
    VSR_CPU_AVX = 1u << 1,
    VSR_CPU_AVX2 = 1u << 2,
    VSR_CPU_FMA = 1u << 3,
    VSR_CPU_F16C = 1u << 4,
    VSR_CPU_AVX512F = 1u << 5,
    VSR_CPU_AVX512BW = 1u << 6,
    VSR_CPU_AVX512VL = 1u << 7,
    VSR_CPU_AVX512BF16 = 1u << 8,
    VSR_CPU_AVX512VNNI = 1u << 9,
    VSR_CPU_AMX_BF16 = 1u << 10,
    VSR_CPU_NEON = 1u << 11,
};

typedef struct vsr_device {
    vsr_device_kind kind;
    int index;              /* cuda:N / rocm:N ordinal; 0 for the CPU */
    char name[128];         /* "NVIDIA H200", "AMD Instinct MI300X", CPU model name */
    int cc_major, cc_minor; /* NVIDIA compute capability */
    char gfx[32];           /* AMD target, e.g. "gfx942" */
    uint64_t mem_total;     /* bytes */
    uint64_t mem_free;      /* bytes */
    bool bf16;              /* BF16 arithmetic available */
    uint32_t cpu_features;  /* VSR_CPU_* */
    int cores;              /* CPU: online logical cores */
    /* NVFP4 prerequisites besides FP4 tensor cores (each named in the refusal): */
    bool fp4_toolkit;       /* the CUDA toolkit/runtime we were built with has FP4 types */
    bool fp4_act_kernel;    /* our FP4 activation-quantization kernel is compiled in */
} vsr_device;

typedef struct vsr_device_list {
    int count;
    vsr_device dev[VSR_MAX_DEVICES];
    /* What the probe could not see, for `vllm-srun devices` (e.g. "cuda: libcuda.so.1 not
     * found"); lines joined with "\n", "" when everything answered. Never a failure. */
    char notes[512];
} vsr_device_list;

const char *vsr_device_kind_name(vsr_device_kind k); /* "cpu", "cuda", "rocm" */
/* "cpu", "cuda:0", "rocm:1" into buf. */
const char *vsr_device_id(const vsr_device *d, char *buf, size_t n);

/* Probes the CPU and any NVIDIA/AMD GPUs. Never fails because a vendor library is absent. */
vsr_status vsr_devices_probe(vsr_device_list *out, vsr_err *err);
/* Builds one device from a JSON description (tests, docs):
 * {"kind":"cuda","index":0,"name":"...","cc":"8.6","mem_total_gib":80,"mem_free_gib":70,...} */
vsr_status vsr_device_from_json(const char *json, vsr_device *out, vsr_err *err);

/* Does this architecture do BF16 arithmetic? NVIDIA: compute capability >= 8.0; AMD: gfx90a,
 * gfx94x, gfx95x, gfx11xx, gfx12xx; CPU: yes (software conversion). The probe and
 * vsr_device_from_json fill vsr_device.bf16 from this; vsr_device_caps_of reads the field. */
bool vsr_device_bf16_by_arch(vsr_device_kind kind, int cc_major, int cc_minor, const char *gfx);

/* What this build of the runtime brings to NVFP4 (src/device/build_caps.c). */
typedef struct vsr_device_build {
    bool cuda;           /* built with VSR_HAVE_CUDA */
    int cuda_version;    /* CUDA_VERSION of the toolkit headers (12080 = 12.8), 0 without CUDA */
    bool fp4_toolkit;    /* CUDA >= 12.8 and cuda_fp4.h present */
    bool fp4_act_kernel; /* VSR_HAVE_FP4_ACT_KERNEL defined */
} vsr_device_build;
const vsr_device_build *vsr_device_build_caps(void);

/* What a device can run, one row of the hardware table. */
typedef enum vsr_support { VSR_SUPPORT_NO, VSR_SUPPORT_YES, VSR_SUPPORT_UNVERIFIED } vsr_support;
typedef struct vsr_device_caps {
    vsr_support bf16, fp8, int4, nvfp4;
    bool fp8_fnuz;          /* E4M3 FNUZ (gfx942) */
    bool int4_fused;        /* NVIDIA: fused kernel from packed weights */
} vsr_device_caps;
void vsr_device_caps_of(const vsr_device *d, vsr_device_caps *out);
/* The hardware-table row `d` falls in, e.g. "NVIDIA Ada, Hopper (8.9, 9.0)". */
const char *vsr_device_class(const vsr_device *d);
/* What keeps NVFP4 off `d`, the text VSR_REFUSAL_NVFP4 is followed by ("the device is a
 * CPU", ...); "" when nothing is missing. Several missing parts are joined with ", and ". */
const char *vsr_device_nvfp4_missing(const vsr_device *d, char *buf, size_t n);

/* ---- gating ---- */
#define VSR_REFUSAL_FP8                                                                           \
    "FP8 weights need an NVIDIA GPU of compute capability 8.9 or later or an AMD Instinct MI300 " \
    "or MI350 series GPU"
#define VSR_REFUSAL_NVFP4                                                                         \
    "NVFP4 packages need FP4 tensor cores; serve NVFP4 packages on a Blackwell GPU"

typedef struct vsr_gate_request {
    bool quantized_family_ok; /* family may carry quantized weights (decision3) */
    bool needs_bf16;          /* the family keeps BF16 weights/activations (decision3: yes) */
    vsr_scheme scheme;
    uint64_t weight_bytes;    /* bytes the weights take on the device */
    uint64_t reserve_bytes;   /* activation reserve (see vsr_gate_reserve_bytes) */
} vsr_gate_request;

/* The documented activation reserve for a package whose weights take weight_bytes. */
uint64_t vsr_gate_reserve_bytes(uint64_t weight_bytes);

/* Can `d` run the request? VSR_OK, or VSR_E_DEVICE with the seed's exact text
 * (plus the specific missing part) in err. Checks capability, then memory
 * ("needs about X GiB, Y GiB free"). A quantized package of a family that may not carry
 * quantized weights is VSR_E_UNSUPPORTED (no device changes that). Every message starts
 * with the device id ("cuda:0: ..."). */
vsr_status vsr_gate_device(const vsr_device *d, const vsr_gate_request *r, vsr_err *err);

/* Picks the device for `spec` ("auto", "cpu", "cuda", "cuda:1", "rocm:0").
 * auto: ROCm, then CUDA, then CPU; skips devices without the format's matrix units
 * or memory; an explicit device is honoured or refused, never replaced.
 * On failure the message joins every device's reason with "; ". */
vsr_status vsr_place(const vsr_device_list *devs, const char *spec, const vsr_gate_request *r,
                     int *chosen, vsr_err *err);
/* Validates a --device value: "auto" or [a-z][a-z0-9_]*(:N)? naming cpu, cuda or rocm. */
vsr_status vsr_device_spec_parse(const char *spec, bool *is_auto, vsr_device_kind *kind, int *index,
                                 vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
