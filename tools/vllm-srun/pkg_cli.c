#include "pkg_cli.h"

#include <string.h>

#include "common/cli.h"

int pkg_cli_parse(pkg_cli *c, const char *cmd, void (*usage)(FILE *), pkg_cli_option own, void *ctx,
                  int argc, char **argv) {
    *c = (pkg_cli){0};
    const char *v;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) c->json = true;
        else if ((r = arg_value(argc, argv, &i, "--revision", &c->rev))) { if (r < 0) return 2; }
        else if ((r = arg_value(argc, argv, &i, "--store", &c->store))) { if (r < 0) return 2; }
        else if ((r = arg_value(argc, argv, &i, "--threads", &v))) {
            if (r < 0 || !arg_int(cmd, "--threads", v, 0, 256, &c->threads)) return 2;
        } else if (own && (r = own(ctx, argc, argv, &i))) { if (r < 0) return 2; }
        else if (argv[i][0] == '-') {
            fprintf(stderr, "%s: unknown option '%s'\n", cmd, argv[i]);
            usage(stderr);
            return 2;
        } else if (!c->pkg) c->pkg = argv[i];
        else {
            fprintf(stderr, "%s: one package at a time ('%s' is extra)\n", cmd, argv[i]);
            return 2;
        }
    }
    if (!c->pkg) {
        usage(stderr);
        return 2;
    }
    return -1;
}
