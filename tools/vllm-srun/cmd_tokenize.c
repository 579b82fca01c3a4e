/* vllm-srun tokenize PKG_OR_TOKENIZER_DIR [--text S]: token ids of a text, or of each
 * stdin line, as one JSON array a line (the ids Hugging Face `tokenizers` gives). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli.h"
#include "commands.h"
#include "tokenizer/tokenizer_internal.h"
#include "vsr/package.h"
#include "vsr/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun tokenize PKG_OR_TOKENIZER_DIR [--text S] [--revision R] [--store DIR]\n"
            "                          [--split fast|pcre2]\n\n"
            "Prints the token ids of S, or of each line of stdin (without its \\n), as one JSON\n"
            "array a line. PKG_OR_TOKENIZER_DIR is a folder holding tokenizer.json (and\n"
            "tokenizer_config.json), or a package name org/name[@revision] in the package store.\n\n"
            "  --text S       encode S instead of reading stdin\n"
            "  --revision R   package revision (commit, branch or tag; default main)\n"
            "  --store DIR    package store (default $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub)\n"
            "  --split IMPL   pre-tokenizer: fast (default) or pcre2 (the oracle; same ids)\n");
}

static int print_ids(const vsr_tokenizer *t, vsr_split_impl impl, const char *s, size_t n, const char *what) {
    int32_t *ids;
    size_t m;
    vsr_err err = {0};
    if (vsr_tokenizer_encode_split(t, impl, s, n, &ids, &m, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun tokenize: %s: %s\n", what, err.msg);
        return 1;
    }
    putchar('[');
    for (size_t i = 0; i < m; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]\n", stdout);
    free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *target = NULL, *text = NULL, *revision = NULL, *store = NULL, *split = "fast";
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if ((r = arg_value(argc, argv, &i, "--text", &text)) ||
            (r = arg_value(argc, argv, &i, "--revision", &revision)) ||
            (r = arg_value(argc, argv, &i, "--store", &store)) || (r = arg_value(argc, argv, &i, "--split", &split))) {
            if (r < 0) return 2;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "vllm-srun tokenize: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (target) {
            fprintf(stderr, "vllm-srun tokenize: one package or folder, got '%s' and '%s'\n", target, argv[i]);
            return 2;
        }
        target = argv[i];
    }
    if (!target) {
        usage(stderr);
        return 2;
    }
    vsr_split_impl impl;
    if (!strcmp(split, "fast")) impl = VSR_SPLIT_FAST;
    else if (!strcmp(split, "pcre2")) impl = VSR_SPLIT_PCRE2;
    else {
        fprintf(stderr, "vllm-srun tokenize: --split must be fast or pcre2, got '%s'\n", split);
        return 2;
    }
    /* A folder when one exists at that path; otherwise a package name org/name[@rev]. */
    char dir[PATH_MAX];
    struct stat sb;
    vsr_err err = {0};
    if (stat(target, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(dir, sizeof dir, "%s", target);
    } else {
        char repo[300], commit[41];
        snprintf(repo, sizeof repo, "%s", target);
        char *at = strchr(repo, '@');
        if (at) {
            *at = 0;
            if (!revision) revision = at + 1;
        }
        if (!strchr(repo, '/') || target[0] == '/' || target[0] == '.') {
            fprintf(stderr, "vllm-srun tokenize: '%s' is neither a folder nor a package name (org/name)\n", target);
            return 1;
        }
        if (vsr_store_resolve(store, repo, revision, dir, sizeof dir, commit, &err) != VSR_OK) {
            fprintf(stderr, "vllm-srun tokenize: %s\n", err.msg);
            return 1;
        }
    }
    vsr_tokenizer *t;
    if (vsr_tokenizer_open(dir, &t, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun tokenize: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (text) {
        rc = print_ids(t, impl, text, strlen(text), "--text");
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        for (long no = 1; (n = getline(&line, &cap, stdin)) >= 0; no++) {
            if (n > 0 && line[n - 1] == '\n') n--;
            char what[48];
            snprintf(what, sizeof what, "stdin line %ld", no);
            if (print_ids(t, impl, line, (size_t)n, what)) {
                rc = 1;
                break;
            }
        }
        free(line);
    }
    vsr_tokenizer_free(t);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
