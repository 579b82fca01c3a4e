/* Internal: what the per-vendor probes (probe_cpu.c, probe_cuda.c, probe_rocm.c) share. The probes
 * depend on this module (and on build_caps.c), never on device.c; device.c calls the probes
 * (probe.h). vsr_device_bf16_by_arch, defined here, is public (include/vsr/device.h). */
#ifndef VSR_DEVICE_PROBE_UTIL_H
#define VSR_DEVICE_PROBE_UTIL_H

#include "vsr/device.h"

/* Appends one line to list->notes (dropped quietly when full: notes are advisory). */
void vsr_probe_note(vsr_device_list *list, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
