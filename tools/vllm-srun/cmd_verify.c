/* vllm-srun verify PKG [--revision R] [--store DIR] [--threads N] [--json]
 * Full verification (reference-runtime.md 4.1): every manifest file's bytes and sha256
 * (streamed, in parallel, with progress on a terminal), identity.model_sha256, tensors
 * against config and scheme, parameter counts, built-in pins. Exit 0 verified, 1 refused. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "pkg_cli.h"
#include "vsr/catalog.h"
#include "vsr/package.h"

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-srun verify PKG [--revision R] [--store DIR] [--threads N] [--json]\n\n"
               "Hashes every file MODEL_MANIFEST.json lists, checks bytes, identity.model_sha256,\n"
               "tensors against config.json and the quantization scheme, the recorded parameters and,\n"
               "for a built-in package, the catalogue's pins. Prints the identity when all agree.\n");
}

int cmd_verify(int argc, char **argv) {
    pkg_cli c;
    int rc = pkg_cli_parse(&c, "verify", usage, NULL, NULL, argc, argv);
    if (rc >= 0) return rc;
    bool json = c.json;
    vsr_package *p = NULL;
    vsr_err e = {0};
    vsr_status st = vsr_package_open(c.pkg, c.rev, c.store, &p, &e);
    if (!st) st = vsr_package_verify(p, (int)c.threads, NULL, &e);
    if (st) {
        if (json) {
            json_t *j = json_pack("{s:s,s:s,s:s}", "status", "refused", "code", vsr_status_name(st), "reason", e.msg);
            char *s = json_dumps(j, JSON_SORT_KEYS);
            printf("%s\n", s);
            free(s);
            json_decref(j);
        }
        fprintf(stderr, "vllm-srun verify: %s\n", e.msg);
        vsr_package_close(p);
        return 1;
    }
    const char *verification = p->builtin ? (p->builtin->model_sha256 ? "pinned" : "manifest") : "local";
    if (json) {
        json_t *j = json_pack("{s:s,s:s?,s:s?,s:s,s:s,s:s,s:s?,s:s,s:i,s:I}", "status", "verified", "repo",
                              p->repo[0] ? p->repo : NULL, "revision", p->revision[0] ? p->revision : NULL, "path",
                              p->path, "family", vsr_family_name(p->family), "model_sha256", p->model_sha256,
                              "manifest_sha256", p->has_manifest ? p->manifest.manifest_sha256 : NULL, "verification",
                              verification, "files", p->has_manifest ? p->manifest.n_files : 0, "parameters",
                              (json_int_t)vsr_package_params_loaded(p));
        char *s = json_dumps(j, JSON_SORT_KEYS | JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        if (p->repo[0]) printf("verified %s@%s\n", p->repo, p->revision);
        else printf("verified %s\n", p->path);
        printf("  family           %s\n", vsr_family_name(p->family));
        printf("  model_sha256     %s\n", p->model_sha256);
        if (p->has_manifest) printf("  manifest_sha256  %s\n", p->manifest.manifest_sha256);
        printf("  files            %d hashed\n", p->has_manifest ? p->manifest.n_files : 0);
        printf("  verification     %s%s\n", verification,
               !strcmp(verification, "pinned")     ? " (matches the catalogue's pins)"
               : !strcmp(verification, "manifest") ? " (published package: its own manifest decides)"
                                                   : " (no catalogue entry: computed identity)");
    }
    vsr_package_close(p);
    return 0;
}
