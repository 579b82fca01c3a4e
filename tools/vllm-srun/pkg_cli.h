/* The command line the one-package commands share (inspect, verify):
 *   vllm-srun CMD PKG [--revision R] [--store DIR] [--threads N] [--json] [CMD's own options] */
#ifndef VSR_TOOLS_PKG_CLI_H
#define VSR_TOOLS_PKG_CLI_H

#include <stdbool.h>
#include <stdio.h>

typedef struct pkg_cli {
    const char *pkg;   /* org/name, org/name@rev or a package path */
    const char *rev;   /* --revision, or NULL */
    const char *store; /* --store, or NULL */
    bool json;         /* --json */
    long long threads; /* --threads, 0..256 (0: the library's default) */
} pkg_cli;

/* A command's own options: 1 when argv[*i] is one (*i advanced past its value), 0 when it
 * is not, -1 when its value is bad (a message printed; the command exits 2). */
typedef int (*pkg_cli_option)(void *ctx, int argc, char **argv, int *i);

/* Parses argv[1..] into c. -h/--help prints usage to stdout; an unknown option, a second
 * package or none is a usage error ("CMD: ..." and the usage on stderr). `own` may be NULL.
 * Returns -1 when the command goes on, else its exit status: 0 after --help, 2 on an error. */
int pkg_cli_parse(pkg_cli *c, const char *cmd, void (*usage)(FILE *), pkg_cli_option own, void *ctx,
                  int argc, char **argv);

#endif
