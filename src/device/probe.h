/* Internal: the per-vendor probes behind vsr_devices_probe (device.c calls them), and the parsers
 * they use, exposed so tests can feed them real file formats (a /proc/meminfo text, a KFD sysfs
 * tree written under a temporary folder). What the probes share is probe_util.h: device.c depends on
 * the probes, the probes on probe_util.c, never back. */
#ifndef VSR_DEVICE_PROBE_H
#define VSR_DEVICE_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/device.h"

/* Fills the CPU device (index 0). Never fails: unknown values stay 0 / "CPU". */
void vsr_probe_cpu(vsr_device *out);
/* Parses /proc/meminfo text: MemTotal and MemAvailable (kB) into bytes. Returns 0 when
 * MemTotal was found, -1 otherwise. MemAvailable missing: *avail = MemFree + Cached. */
int vsr_probe_meminfo_parse(const char *text, uint64_t *total, uint64_t *avail);

/* Appends NVIDIA GPUs through libcuda.so.1 (dlopen); absent driver = none, with a note. */
void vsr_probe_cuda(vsr_device_list *list);

/* Appends AMD GPUs. `kfd_root` is the topology folder
 * (normally "/sys/class/kfd/kfd/topology/nodes"); `drm_root` the folder holding renderD*
 * ("/sys/class/drm"). `use_hip`: also ask libamdhip64.so for names and free memory. */
void vsr_probe_rocm(vsr_device_list *list, const char *kfd_root, const char *drm_root, int use_hip);
/* "gfx942" from gfx_target_version 90402 (major*10000 + minor*100 + stepping; minor and
 * stepping print in hex: 90010 -> gfx90a). Returns buf, or NULL for 0/garbage. */
const char *vsr_gfx_from_target_version(unsigned long v, char *buf, size_t n);

#endif
