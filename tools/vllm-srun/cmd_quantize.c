/* vllm-srun quantize BF16_PKG OUT --scheme fp8-dynamic|w4a16-gptq|w4a16-awq|nvfp4
 *   [--calibration FILE.jsonl] [--samples N] [--group-size G] [--actorder] [--ignore PATTERN ...]
 *   [--device D] [--name MODEL_NAME] [--store DIR] [--threads N]
 * (docs/quantize.md). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cli.h"
#include "commands.h"
#include "vsr/quantize_pkg.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun quantize BF16_PKG OUT --scheme fp8-dynamic|w4a16-gptq|w4a16-awq|nvfp4\n"
            "         [--calibration FILE.jsonl] [--samples N] [--group-size G] [--actorder]\n"
            "         [--ignore PATTERN ...] [--device cpu|cuda[:N]|rocm[:N]] [--name MODEL_NAME]\n"
            "         [--store DIR] [--threads N]\n\n"
            "Writes OUT, a compressed-tensors package of the verified BF16 Decision 3.0 package\n"
            "BF16_PKG (a path or org/name[@rev] from the store), as llm-compressor writes it.\n"
            "  fp8-dynamic  FP8 E4M3 weights per output channel, FP8 per-token activations (RTN)\n"
            "  w4a16-gptq   int4 symmetric groups, GPTQ on calibration Hessians (--calibration)\n"
            "  w4a16-awq    int4 asymmetric groups, AWQ scale search (--calibration)\n"
            "  nvfp4        NVFP4A16: FP4 weights in groups of 16, FP8 scales, global scale (RTN)\n"
            "Kept in BF16 by default: embeddings, lm_head, the vision tower and the DeltaNet\n"
            "in_proj_qkv|z|a|b; --ignore adds a module name or a \"re:\" regex (repeatable).\n");
}

int cmd_quantize(int argc, char **argv) {
    vsr_quantize_opts o = {.progress = true};
    const char *pos[2] = {NULL, NULL}, *store = NULL, *v;
    int npos = 0;
    long long x;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--actorder")) {
            o.actorder = true;
            continue;
        }
#define STR(name, field)                                                                           \
    if ((r = arg_value(argc, argv, &i, name, &v)) != 0) {                                          \
        if (r < 0) return 2;                                                                       \
        field = v;                                                                                 \
        continue;                                                                                  \
    }
        STR("--scheme", o.scheme)
        STR("--calibration", o.calibration)
        STR("--device", o.device)
        STR("--name", o.model_name)
        STR("--store", store)
#undef STR
        if ((r = arg_value(argc, argv, &i, "--ignore", &v)) != 0) {
            if (r < 0) return 2;
            if (o.n_ignore == VSR_QUANTIZE_MAX_IGNORE) {
                fprintf(stderr, "vllm-srun quantize: at most %d --ignore patterns\n", VSR_QUANTIZE_MAX_IGNORE);
                return 2;
            }
            o.ignore[o.n_ignore++] = v;
            continue;
        }
#define NUM(name, field, lo, hi)                                                                   \
    if ((r = arg_value(argc, argv, &i, name, &v)) != 0) {                                          \
        if (r < 0 || !arg_int("vllm-srun quantize", name, v, lo, hi, &x)) return 2;                \
        field = (int)x;                                                                            \
        continue;                                                                                  \
    }
        NUM("--samples", o.samples, 1, 1000000)
        NUM("--group-size", o.group_size, 1, 1 << 20)
        NUM("--threads", o.threads, 0, 1024)
#undef NUM
        if (argv[i][0] == '-') {
            fprintf(stderr, "vllm-srun quantize: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (npos == 2) {
            fprintf(stderr, "vllm-srun quantize: BF16_PKG and OUT only (got a third argument %s)\n", argv[i]);
            return 2;
        }
        pos[npos++] = argv[i];
    }
    if (npos != 2) {
        fprintf(stderr, "vllm-srun quantize: needs BF16_PKG and OUT\n");
        usage(stderr);
        return 2;
    }
    vsr_err err = {0};
    if (vsr_quantize_check_opts(&o, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun quantize: %s\n", err.msg);
        return 2;
    }
    /* a relative folder is a path, not a Hub name */
    char src_abs[PATH_MAX];
    if (pos[0][0] != '/' && realpath(pos[0], src_abs)) pos[0] = src_abs;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    vsr_quantize_info info;
    if (vsr_quantize_package(pos[0], store, pos[1], &o, &info, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun quantize: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%s\n", pos[1]);
    printf("  scheme           %s\n", o.scheme);
    printf("  model_name       %s\n", info.model_name);
    printf("  model_sha256     %s\n", info.model_sha256);
    printf("  manifest_sha256  %s\n", info.manifest_sha256);
    printf("  source           %s\n", info.source_model_sha256);
    printf("  linear modules   %d quantized, %d kept BF16 (config ignore list)\n", info.n_quantized, info.n_ignored);
    printf("  weight bytes     %llu -> %llu in %d shard%s\n", (unsigned long long)info.weight_bytes_in,
           (unsigned long long)info.weight_bytes_out, info.n_shards, info.n_shards == 1 ? "" : "s");
    if (info.calibration_sha256[0])
        printf("  calibration      %s (%d samples)\n", info.calibration_sha256, info.samples_used);
    printf("  seconds          %.2f\n", secs);
    return 0;
}
