/* tools/gpu/mkfixture.c: writes a Decision 3.0 fixture package on the GPU machine (which has no
 * vllm-srun dependencies installed): mkfixture DIR SIZE [SCHEME] (SCHEME default bf16; seed 1). */
#include <stdio.h>

#include "vsr/fixture.h"

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: mkfixture DIR SIZE [SCHEME]\n");
        return 2;
    }
    vsr_fixture_opts o = {.family = "decision3", .size = argv[2], .scheme = argc == 4 ? argv[3] : "bf16", .seed = 1};
    vsr_err e;
    if (vsr_fixture_write(argv[1], &o, NULL, &e)) {
        fprintf(stderr, "fixture: %s\n", e.msg);
        return 1;
    }
    return 0;
}
