/* vllm-srun models [--json]: one line per catalogue package (reference-runtime.md 6.1):
 *   repo@revision  family  N,NNN parameters  scheme  [published|built-in] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "vsr/catalog.h"

static const char *commas(long long v, char *buf, size_t n) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v);
    size_t len = strlen(tmp), o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (i && (len - i) % 3 == 0 && o + 1 < n) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

int cmd_models(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: vllm-srun models [--json]\n\nLists the catalogue: the published vllm-sr/d3-* packages "
                   "and the built-in fixture packages,\none line each: repo@revision  family  parameters  scheme.\n");
            return 0;
        } else {
            fprintf(stderr, "models: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    json_t *arr = json_array();
    const vsr_builtin *dflt = vsr_catalog_default();
    for (size_t i = 0; i < vsr_catalog_count(); i++) {
        const vsr_builtin *b = vsr_catalog_at(i);
        const char *scheme = vsr_scheme_info(b->scheme)->name;
        if (json) {
            json_array_append_new(
                arr, json_pack("{s:s,s:s,s:s,s:s,s:s?,s:I,s:b,s:b,s:s?,s:s?,s:s}", "repo", b->repo, "revision", b->revision,
                               "family", b->family, "scheme", scheme, "scheme_note", b->scheme_note, "parameters",
                               (json_int_t)b->parameters, "published", b->published, "default", b == dflt,
                               "model_sha256", b->model_sha256, "manifest_sha256", b->manifest_sha256, "golden",
                               b->golden_json ? "recorded" : "unverified"));
            continue;
        }
        char params[64], num[32];
        if (b->parameters > 0) snprintf(params, sizeof params, "%s parameters", commas(b->parameters, num, sizeof num));
        else snprintf(params, sizeof params, "parameters per its manifest");
        printf("%s@%s  %s  %s  %s%s%s  [%s%s]\n", b->repo, b->revision, b->family, params, scheme,
               b->scheme_note ? ": " : "", b->scheme_note ? b->scheme_note : "",
               b->published ? "published, golden unverified" : "built-in", b == dflt ? ", default" : "");
    }
    if (json) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
    }
    json_decref(arr);
    return 0;
}
