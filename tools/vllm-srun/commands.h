/* The vllm-srun subcommands. Each lives in its own cmd_<name>.c and returns the
 * process exit status (0 ok, 1 refused/failed, 2 usage). */
#ifndef VSR_TOOLS_COMMANDS_H
#define VSR_TOOLS_COMMANDS_H

#include "common/cli.h"

int cmd_devices(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_fixture(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_dequant(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

int cmd_serve(int argc, char **argv);
int cmd_decide(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_golden(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_compare(int argc, char **argv);

#endif
