/* Pinned published packages: every file must be the file the catalogue pins (reference-runtime.md
 * 4.1 step 8, extended from model_sha256/manifest_sha256 to the whole file set, as the reference's
 * table lists it). Runs after the files were hashed by vsr_package_verify. */
#include "package/pins.h"

#include <string.h>

#include "package/package_internal.h"
#include "vsr/catalog.h"

vsr_status vsr_package_check_pins(const vsr_package *p, size_t n, const char *const *names,
                                  const char (*sums)[65], vsr_err *err) {
    const vsr_builtin *b = p->builtin;
    if (!b || b->n_files == 0) return VSR_OK;
    const char *where = p->repo[0] ? p->repo : p->path;
    const char *rev = p->revision[0] ? p->revision : b->revision;
    /* Every file the package lists must be pinned with the same hash. */
    for (size_t i = 0; i < n; i++) {
        const char *pin = vsr_catalog_pinned_sha256(b, names[i]);
        if (!pin)
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s@%s: %s is not a file of the pinned package (the catalogue pins %d files; "
                               "this package is not the published %s)",
                               where, rev, names[i], b->n_files, b->repo);
        if (strcmp(pin, sums[i]))
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s@%s: %s differs from the pinned package: sha256 %s, the catalogue pins %s", where,
                               rev, names[i], sums[i], pin);
    }
    /* The manifest itself (hashed when it was read). */
    const char *mpin = vsr_catalog_pinned_sha256(b, VSR_MANIFEST_NAME);
    if (mpin && (!p->has_manifest || strcmp(mpin, p->manifest.manifest_sha256)))
        return vsr_err_set(err, VSR_E_INTEGRITY,
                           "%s@%s: %s differs from the pinned package: sha256 %s, the catalogue pins %s", where, rev,
                           VSR_MANIFEST_NAME, p->has_manifest ? p->manifest.manifest_sha256 : "(missing)", mpin);
    /* Every pinned file must be in the package. */
    for (int k = 0; k < b->n_files; k++) {
        const char *name = b->files[k].name;
        if (!strcmp(name, VSR_MANIFEST_NAME)) continue;
        bool found = false;
        for (size_t i = 0; i < n && !found; i++) found = !strcmp(names[i], name);
        if (!found)
            return vsr_err_set(err, VSR_E_INTEGRITY,
                               "%s@%s: the pinned package has %s, which this package does not list", where, rev, name);
    }
    return VSR_OK;
}
