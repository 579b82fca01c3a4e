/* The vllm-sr subcommands. Each lives in its own cmd_<name>.c and returns the process exit
 * status (0 ok, 1 refused/failed, 2 usage). */
#ifndef VSR_SR_COMMANDS_H
#define VSR_SR_COMMANDS_H

#include <stddef.h>

#include "common/cli.h"

int cmd_validate(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* serve --config: router mode (cmd_router.c); cmd_serve hands over when --config comes without --engine. */
int cmd_serve_router(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_stop(int argc, char **argv);

/* The state folder ($VLLM_SR_STATE_DIR, else ~/.local/state/vllm-sr) into buf. */
const char *sr_state_dir(char *buf, size_t n);
/* The active deployment state file into buf. */
const char *sr_state_file(char *buf, size_t n);

#endif
