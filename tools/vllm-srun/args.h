/* Small helpers for subcommand options: --name VALUE and --name=VALUE. */
#ifndef VSR_TOOLS_ARGS_H
#define VSR_TOOLS_ARGS_H

#include <stdbool.h>

/* If argv[*i] is --name (taking a value), stores the value in *out and advances *i.
 * Returns 1 when matched, 0 when not, -1 when the value is missing (message printed). */
int arg_value(int argc, char **argv, int *i, const char *name, const char **out);
/* Parses a non-negative integer option value; prints a message and returns false on error. */
bool arg_int(const char *cmd, const char *name, const char *v, long long min, long long max, long long *out);

#endif
