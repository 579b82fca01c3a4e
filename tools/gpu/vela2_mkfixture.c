/* tools/gpu/vela2_mkfixture.c: writes a Vela 2.0 decoder fixture package on the GPU machine (which
 * has no vllm-srun dependencies installed), for tools/gpu/vela2_check.sh: vela2_mkfixture DIR SIZE SEED
 * (the bytes `vllm-srun fixture DIR --family vela2 --size SIZE --seed SEED` writes). */
#include <stdio.h>
#include <stdlib.h>

#include "fixture/vela2_fixture.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: vela2_mkfixture DIR SIZE SEED\n");
        return 2;
    }
    vsr_v2_fixture_opts o = {.size = argv[2], .seed = strtoull(argv[3], NULL, 10)};
    vsr_err e = {0};
    if (vsr_v2_fixture_write(argv[1], &o, NULL, NULL, &e)) {
        fprintf(stderr, "fixture: %s\n", e.msg);
        return 1;
    }
    return 0;
}
