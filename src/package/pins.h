/* The pinned file set of a published package (data/catalog/published-d3-pins.json). */
#ifndef VSR_PACKAGE_PINS_H
#define VSR_PACKAGE_PINS_H

#include <stddef.h>

#include "vsr/package.h"

/* Checks a package opened as a catalogue entry with pinned files (p->builtin->n_files > 0):
 * the files the manifest lists (names[i], computed sums[i]) plus MODEL_MANIFEST.json itself
 * must be exactly the pinned set with the pinned sha256. The first difference is refused
 * naming the file: a file that differs, a pinned file the package lacks, or a file the pin
 * does not list. No-op for entries without pinned files. */
vsr_status vsr_package_check_pins(const vsr_package *p, size_t n, const char *const *names,
                                  const char (*sums)[65], vsr_err *err);

#endif
