/* The probes' shared helpers (probe_util.h): the notes of a probe, and BF16 by architecture
 * (public: include/vsr/device.h). Nothing here calls back into device.c or a probe. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device/probe_util.h"
#include "vsr/device.h"

void vsr_probe_note(vsr_device_list *list, const char *fmt, ...) {
    size_t len = strlen(list->notes);
    if (len + 2 >= sizeof list->notes) return;
    if (len) list->notes[len++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(list->notes + len, sizeof list->notes - len, fmt, ap);
    va_end(ap);
    if (w < 0) list->notes[len ? len - 1 : 0] = '\0';
}

/* ---- BF16 by architecture ----
 * AMD: the targets hipBLASLt (ROCm's BF16/FP8 GEMM library) builds for, all with BF16
 * matrix instructions: gfx90a (MI200), gfx94x (MI300), gfx95x (MI350), gfx11xx (RDNA3),
 * gfx12xx (RDNA4). gfx908 (MI100) and older are left out: no hipBLASLt kernels. */
static const struct {
    const char *prefix;
    size_t len; /* total length of a matching name: "gfx94" + one digit = 6 */
} amd_bf16_targets[] = {{"gfx90a", 6}, {"gfx94", 6}, {"gfx95", 6}, {"gfx11", 7}, {"gfx12", 7}};

bool vsr_device_bf16_by_arch(vsr_device_kind kind, int cc_major, int cc_minor, const char *gfx) {
    (void)cc_minor;
    switch (kind) {
    case VSR_DEV_CPU: return true; /* software conversion; AVX512_BF16 when present */
    case VSR_DEV_CUDA: return cc_major >= 8;
    case VSR_DEV_ROCM:
        if (!gfx) return false;
        for (size_t i = 0; i < sizeof amd_bf16_targets / sizeof amd_bf16_targets[0]; i++)
            if (!strncmp(gfx, amd_bf16_targets[i].prefix, strlen(amd_bf16_targets[i].prefix)) &&
                strlen(gfx) == amd_bf16_targets[i].len)
                return true;
        return false;
    default: return false;
    }
}
