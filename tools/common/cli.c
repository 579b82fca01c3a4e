#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prog_name = "";

static void usage(FILE *f, const char *prog, const cli_command *commands, size_t n) {
    fprintf(f, "usage: %s <command> [options]\n\ncommands:\n", prog);
    for (size_t i = 0; i < n; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun '%s <command> --help' for a command's options.\n", prog);
}

int cli_main(const char *prog, const cli_command *commands, size_t n, int argc, char **argv) {
    prog_name = prog;
    if (argc < 2) {
        usage(stderr, prog, commands, n);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout, prog, commands, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[1]);
    usage(stderr, prog, commands, n);
    return 2;
}

int arg_value(int argc, char **argv, int *i, const char *name, const char **out) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s%s%s needs a value\n", prog_name, *prog_name ? ": " : "", name);
        return -1;
    }
    *out = argv[++*i];
    return 1;
}

bool arg_int(const char *cmd, const char *name, const char *v, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max) {
        fprintf(stderr, "%s: %s must be an integer from %lld to %lld; got '%s'\n", cmd, name, min, max, v);
        return false;
    }
    *out = x;
    return true;
}

char *cli_read_file(const char *path, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + len, 1, cap - 1 - len, f)) > 0;) {
        len += r;
        if (len == cap - 1) {
            char *q = realloc(b, cap *= 2);
            if (!q) free(b);
            b = q;
        }
    }
    bool failed = ferror(f);
    if (f != stdin) fclose(f);
    if (!b || failed) {
        free(b);
        return NULL;
    }
    b[len] = 0;
    *n = len;
    return b;
}
