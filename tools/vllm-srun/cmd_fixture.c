/* vllm-srun fixture: write a deterministic Decision 3.0 or Vela 2.0 package (docs/fixtures.md, docs/spans.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "commands.h"
#include "fixture/builtin.h"
#include "fixture/vela2_fixture.h"
#include "vsr/fixture.h"
#include "vsr/package.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun fixture OUT --family decision3 --size tiny|small|lite|27b-shape\n"
            "                 --scheme bf16|fp8|w4a16-gptq|w4a16-awq|nvfp4 --seed S\n"
            "                 [--attention-mode causal|noncausal_full_attention] [--actorder]\n"
            "                 [--group-size G] [--max-shard-bytes N] [--name MODEL_NAME]\n"
            "       vllm-srun fixture OUT --like vllm-sr/d3|d3-flash|d3-mini|d3-nano|d3-lite\n"
            "                 [--size tiny|small|lite|27b-shape] [--seed S] [--name MODEL_NAME]\n"
            "       vllm-srun fixture OUT --family vela2 --size tiny|small|lite [--seed S] [--no-broad-head]\n"
            "                 [--name MODEL_NAME]\n"
            "       vllm-srun fixture --install [--repo ORG/NAME] [--store DIR] --family ... (as above)\n"
            "       vllm-srun fixture --install-builtin NAME|all [--store DIR]\n"
            "\n"
            "Writes a package in the exact on-disk format of a real one, with weights from a seeded\n"
            "generator: the same options give the same bytes on any machine. --install writes it\n"
            "into the package store (Hugging Face hub cache layout) under its recipe revision and\n"
            "points refs/main at it. --like writes the file set and layout of a published package\n"
            "(its weight shards and index, a vision tower, preprocessor_config.json, its model_name)\n"
            "with the text model of --size (default tiny; family decision3, scheme bf16, seed 0).\n"
            "Built-ins:");
    for (size_t i = 0; i < vsr_builtin_fixture_count; i++) fprintf(f, " %s", vsr_builtin_fixtures[i].repo);
    for (size_t i = 0; i < vsr_builtin_v2_fixture_count; i++) fprintf(f, " %s", vsr_builtin_v2_fixtures[i].repo);
    fprintf(f, "\n");
}

static int fail(const vsr_err *e) {
    if (!strncmp(e->msg, "fixture: ", 9)) fprintf(stderr, "vllm-srun %s\n", e->msg);
    else fprintf(stderr, "vllm-srun fixture: %s\n", e->msg);
    return 1;
}

/* --family vela2: a Vela 2.0 decoder package (src/fixture/vela2_fixture.c), into OUT or (--install)
 * into the store under its recipe revision, as vllm-sr-c/vela2-<size>[-no-broad] by default. */
static int fixture_vela2(vsr_fixture_opts *o, const char *out, bool install, bool no_broad, const char *seed,
                         const char *store, const char *repo) {
    if (o->scheme || o->like || o->attention_mode || o->actorder || o->group_size || o->max_shard_bytes) {
        fprintf(stderr, "vllm-srun fixture: --family vela2 takes OUT or --install, --size, --seed, --no-broad-head and "
                        "--name only (no --scheme, --like, --attention-mode, --actorder, --group-size or "
                        "--max-shard-bytes)\n");
        return 2;
    }
    if (install == !!out) {
        fprintf(stderr, "vllm-srun fixture: give an OUT folder, or --install (not both)\n");
        return 2;
    }
    if (store && !install) {
        fprintf(stderr, "vllm-srun fixture: --store applies only with --install or --install-builtin\n");
        return 2;
    }
    if (!o->size) o->size = "tiny";
    if (!seed) o->seed = 0;
    o->no_broad_head = no_broad;
    vsr_err e = {0};
    vsr_fixture_info info;
    vsr_status st;
    if ((st = vsr_fixture_check(o, &e))) return fail(&e);
    char rev[41] = "", snap[8192] = "", defrepo[160];
    if (install && !repo) {
        snprintf(defrepo, sizeof defrepo, "vllm-sr-c/vela2-%s%s", o->size, no_broad ? "-no-broad" : "");
        repo = defrepo;
    }
    vsr_progress *p = vsr_progress_new("fixture", 0, "B");
    if (install) st = vsr_fixture_install(store, repo, o, p, &info, rev, snap, sizeof snap, &e);
    else st = vsr_fixture_write_ex(out, o, p, &info, &e);
    vsr_progress_done(p);
    if (st) return fail(&e);
    printf("%s\n  model_name       %s\n  model_sha256     %s\n  manifest_sha256  %s\n", install ? snap : out,
           info.model_name, info.model_sha256, info.manifest_sha256);
    printf("  parameters       %" PRId64 " loaded (%" PRId64 " backbone + %" PRId64 " heads)\n", info.params_loaded,
           info.params_text, info.params_readout);
    printf("  weight files     %d\n  bytes            %" PRIu64 "\n", info.n_shards, info.total_bytes);
    if (install) printf("  installed        %s@%s (refs/main)\n", repo, rev);
    return 0;
}

static int install_builtins(const char *which, const char *store) {
    int done = 0;
    size_t n = vsr_builtin_fixture_count + vsr_builtin_v2_fixture_count;
    for (size_t i = 0; i < n; i++) {
        const vsr_builtin *b = i < vsr_builtin_fixture_count ? &vsr_builtin_fixtures[i]
                                                             : &vsr_builtin_v2_fixtures[i - vsr_builtin_fixture_count];
        if (strcmp(which, "all") != 0 && vsr_builtin_fixture_find(which) != b) continue;
        vsr_err e = {0};
        char snap[8192];
        vsr_progress *p = vsr_progress_new(b->repo, 0, "B");
        vsr_status st = vsr_builtin_fixture_install(b, store, p, snap, sizeof snap, &e);
        vsr_progress_done(p);
        if (st) return fail(&e);
        printf("%s@%s  %s\n", b->repo, b->revision, snap);
        done++;
    }
    if (!done) {
        fprintf(stderr, "vllm-srun fixture: unknown built-in '%s'; built-ins:", which);
        for (size_t i = 0; i < vsr_builtin_fixture_count; i++) fprintf(stderr, " %s", vsr_builtin_fixtures[i].repo);
        for (size_t i = 0; i < vsr_builtin_v2_fixture_count; i++) fprintf(stderr, " %s", vsr_builtin_v2_fixtures[i].repo);
        fprintf(stderr, " (or all)\n");
        return 1;
    }
    return 0;
}

int cmd_fixture(int argc, char **argv) {
    vsr_fixture_opts o = {0};
    const char *out = NULL, *store = NULL, *builtin = NULL, *repo = NULL, *v = NULL;
    bool install = false, no_broad = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--actorder")) { o.actorder = true; continue; }
        if (!strcmp(a, "--install")) { install = true; continue; }
        if (!strcmp(a, "--no-broad-head")) { no_broad = true; continue; }
        if ((r = arg_value(argc, argv, &i, "--family", &o.family))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--size", &o.size))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--scheme", &o.scheme))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--attention-mode", &o.attention_mode))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--store", &store))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--repo", &repo))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--name", &o.model_name))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--like", &o.like))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--install-builtin", &builtin))) { if (r < 0) return 2; continue; }
        if ((r = arg_value(argc, argv, &i, "--seed", &v))) {
            if (r < 0) return 2;
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || *v == '-') {
                fprintf(stderr, "vllm-srun fixture: --seed must be an integer from 0 to 18446744073709551615; got '%s'\n", v);
                return 2;
            }
            o.seed = s;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--group-size", &v))) {
            long long g;
            if (r < 0 || !arg_int("vllm-srun fixture", "--group-size", v, 1, 1 << 20, &g)) return 2;
            o.group_size = (int)g;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--max-shard-bytes", &v))) {
            long long g;
            if (r < 0 || !arg_int("vllm-srun fixture", "--max-shard-bytes", v, 1, INT64_MAX, &g)) return 2;
            o.max_shard_bytes = (uint64_t)g;
            continue;
        }
        if (a[0] == '-') {
            fprintf(stderr, "vllm-srun fixture: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (out) {
            fprintf(stderr, "vllm-srun fixture: one output folder only (got '%s' and '%s')\n", out, a);
            return 2;
        }
        out = a;
    }
    if (builtin) {
        if (out || install) {
            fprintf(stderr, "vllm-srun fixture: --install-builtin takes no OUT folder and no --install\n");
            return 2;
        }
        return install_builtins(builtin, store);
    }
    if (o.family && !strcmp(o.family, "vela2")) return fixture_vela2(&o, out, install, no_broad, v, store, repo);
    if (no_broad) {
        fprintf(stderr, "vllm-srun fixture: --no-broad-head applies only to --family vela2\n");
        return 2;
    }
    if (store && !install) {
        fprintf(stderr, "vllm-srun fixture: --store applies only with --install or --install-builtin\n");
        return 2;
    }
    if (install == !!out) {
        fprintf(stderr, "vllm-srun fixture: give an OUT folder, or --install (not both)\n");
        usage(stderr);
        return 2;
    }
    if (o.like) { /* the layout is the point: the rest defaults to the smallest BF16 package */
        if (!o.family) o.family = "decision3";
        if (!o.size) o.size = "tiny";
        if (!o.scheme) o.scheme = "bf16";
        if (!v) v = "0";
    }
    if (!o.family || !o.size || !o.scheme || !v) {
        fprintf(stderr, "vllm-srun fixture: --family, --size, --scheme and --seed are required\n");
        return 2;
    }
    vsr_err e = {0};
    vsr_fixture_info info;
    if (vsr_fixture_check(&o, &e)) return fail(&e);
    vsr_progress *p = vsr_progress_new("fixture", 0, "B");
    vsr_status st;
    char rev[41] = "", snap[8192] = "";
    char defrepo[160]; /* outlives the branch: `repo` may point here when printed below */
    if (install) {
        if (!repo) {
            snprintf(defrepo, sizeof defrepo, "vllm-sr-c/%s", o.model_name ? o.model_name : "");
            if (!o.model_name && o.like) {
                /* a published layout is named as the package it looks like */
                snprintf(defrepo, sizeof defrepo, "vllm-sr-c/%s",
                         !strncmp(o.like, "vllm-sr/", 8) ? o.like + 8 : o.like);
            } else if (!o.model_name) {
                /* the default repo is named like the manifest's model_name */
                snprintf(defrepo, sizeof defrepo, "vllm-sr-c/d3-%s%s", o.size,
                         !strcmp(o.scheme, "bf16") ? "" : !strcmp(o.scheme, "fp8") ? "-FP8"
                         : !strcmp(o.scheme, "w4a16-gptq") ? "-W4A16-GPTQ"
                         : !strcmp(o.scheme, "w4a16-awq") ? "-W4A16-AWQ" : "-NVFP4");
            }
            repo = defrepo;
        }
        st = vsr_fixture_install(store, repo, &o, p, &info, rev, snap, sizeof snap, &e);
    } else {
        st = vsr_fixture_write_ex(out, &o, p, &info, &e);
    }
    vsr_progress_done(p);
    if (st) return fail(&e);
    printf("%s\n  model_name       %s\n  model_sha256     %s\n  manifest_sha256  %s\n",
           install ? snap : out, info.model_name, info.model_sha256, info.manifest_sha256);
    if (info.params_vision)
        printf("  parameters       %" PRId64 " loaded (%" PRId64 " text + %" PRId64 " vision + %" PRId64 " readout)\n",
               info.params_loaded, info.params_text, info.params_vision, info.params_readout);
    else
        printf("  parameters       %" PRId64 " loaded (%" PRId64 " text + %" PRId64 " readout)\n", info.params_loaded,
               info.params_text, info.params_readout);
    printf("  weight files     %d\n  bytes            %" PRIu64 "\n", info.n_shards, info.total_bytes);
    if (install) printf("  installed        %s@%s (refs/main)\n", repo, rev);
    return 0;
}
