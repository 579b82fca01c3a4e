/* tools/common/cli.h: what the two programs (vllm-srun, vllm-sr) share on their command line:
 * the table of subcommands and its dispatch, --name VALUE options, reading a request file. */
#ifndef VSR_TOOLS_CLI_H
#define VSR_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* One subcommand; each lives in its own cmd_<name>.c and returns the process exit status
 * (0 ok, 1 refused/failed, 2 usage). */
typedef struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    const char *summary;
} cli_command;

/* main() of a program: `prog <command> [options]`, --help/-h/help, or an unknown command
 * (usage on stderr, exit 2). `prog` also prefixes the option messages below. */
int cli_main(const char *prog, const cli_command *commands, size_t n, int argc, char **argv);

/* If argv[*i] is --name (taking a value), stores the value in *out and advances *i.
 * Returns 1 when matched, 0 when not, -1 when the value is missing (message printed). */
int arg_value(int argc, char **argv, int *i, const char *name, const char **out);
/* Parses a non-negative integer option value; prints a message and returns false on error. */
bool arg_int(const char *cmd, const char *name, const char *v, long long min, long long max, long long *out);

/* The whole of file `path` ("-": standard input), malloc'd and NUL-terminated, its length in *n;
 * NULL when it cannot be read. */
char *cli_read_file(const char *path, size_t *n);

#endif
