#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        fprintf(stderr, "%s needs a value\n", name);
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
