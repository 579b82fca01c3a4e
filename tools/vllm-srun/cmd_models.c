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
            printf("usage: vllm-srun models [--json]\n\nLists the catalogue, one line per package revision: the "
                   "published vllm-sr/d3-* packages\n(the pinned revision, which `serve REPO` loads without "
                   "--revision; the v3.1.0 revisions,\nwith the reference's golden answers for cpu and rocm; the "
                   "seeds' quantized packages)\nand the built-in fixture packages:\n"
                   "  repo@revision  family  parameters  scheme  [>= min GiB]  [release, golden classes, pins]\n"
                   "--json adds model_sha256, manifest_sha256 and the pinned sha256 of every file.\n");
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
        const char *release = b->release ? b->release : b->fixture ? "fixture" : "";
        /* The golden classes recorded for this revision ("cpu, rocm"), or none. */
        char classes[64] = "";
        json_t *g = b->golden_json ? json_loads(b->golden_json, 0, NULL) : NULL;
        const char *cls;
        json_t *unused;
        json_object_foreach(g, cls, unused) {
            size_t len = strlen(classes);
            snprintf(classes + len, sizeof classes - len, "%s%s", len ? "," : "", cls);
        }
        json_decref(g);
        if (json) {
            json_t *files = NULL;
            if (b->n_files) {
                files = json_object();
                for (int k = 0; k < b->n_files; k++)
                    json_object_set_new(files, b->files[k].name, json_string(b->files[k].sha256));
            }
            json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s?,s:I,s:b,s:b,s:s?,s:s?,s:s,s:s,s:b}", "repo", b->repo,
                                  "revision", b->revision, "family", b->family, "scheme", scheme, "scheme_note",
                                  b->scheme_note, "parameters", (json_int_t)b->parameters, "published", b->published,
                                  "default", b == dflt, "model_sha256", b->model_sha256, "manifest_sha256",
                                  b->manifest_sha256, "golden", classes[0] ? classes : "unverified", "release",
                                  release, "default_revision", b->default_revision || b->fixture != NULL);
            if (b->min_device_memory_gib)
                json_object_set_new(o, "min_device_memory_gib", json_integer(b->min_device_memory_gib));
            if (files) json_object_set_new(o, "files_sha256", files);
            json_array_append_new(arr, o);
            continue;
        }
        char params[64], num[32], mem[32] = "";
        if (b->parameters > 0) snprintf(params, sizeof params, "%s parameters", commas(b->parameters, num, sizeof num));
        else snprintf(params, sizeof params, "parameters per its manifest");
        if (b->min_device_memory_gib) snprintf(mem, sizeof mem, "  >= %d GiB", b->min_device_memory_gib);
        char tag[160];
        if (b->fixture) snprintf(tag, sizeof tag, "built-in, golden %s%s", classes[0] ? classes : "unverified",
                                 b == dflt ? ", default" : "");
        else snprintf(tag, sizeof tag, "published %s%s, golden %s%s%s", release,
                      b->default_revision ? " (served without --revision)" : "",
                      classes[0] ? classes : "unverified", b->n_files ? ", files pinned" : "",
                      b->model_sha256 ? ", identity pinned" : "");
        printf("%s@%s  %s  %s  %s%s%s%s  [%s]\n", b->repo, b->revision, b->family, params, scheme,
               b->scheme_note ? ": " : "", b->scheme_note ? b->scheme_note : "", mem, tag);
    }
    if (json) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
    }
    json_decref(arr);
    return 0;
}
