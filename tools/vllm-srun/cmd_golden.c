/* vllm-srun golden PKG [--revision R] [--device D] [--store DIR] [--record]
 * Runs the golden self-check as the server does at load and prints its report; with
 * --record, prints the answers as a recording ({"<device class>": {qid: answer}}) for
 * the built-in catalogue (tools/record_goldens.sh). */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "commands.h"
#include "vsr/engine.h"

int cmd_golden(int argc, char **argv) {
    vsr_engine_opts o = {.device = "auto", .dtype = "auto", .show_progress = true};
    int record = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--record")) {
            record = 1;
            continue;
        }
        if ((r = arg_value(argc, argv, &i, "--revision", &o.revision)) ||
            (r = arg_value(argc, argv, &i, "--device", &o.device)) ||
            (r = arg_value(argc, argv, &i, "--store", &o.store_dir))) {
            if (r < 0) return 2;
            continue;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "usage: vllm-srun golden PKG [--revision R] [--device D] [--store DIR] [--record]\n");
            return 2;
        }
        o.model = argv[i];
    }
    if (!o.model) {
        fprintf(stderr, "usage: vllm-srun golden PKG [--revision R] [--device D] [--store DIR] [--record]\n");
        return 2;
    }
    vsr_engine e;
    vsr_err err = {0};
    int rc = 1;
    if (vsr_engine_prepare(&e, &o, &err) != VSR_OK || vsr_engine_load(&e, &o, &err) != VSR_OK) {
        fprintf(stderr, "vllm-srun golden: %s\n", err.msg);
        goto out;
    }
    vsr_status st = vsr_engine_golden(&e, &err);
    if (record) {
        if (!e.golden.answers_json) {
            fprintf(stderr, "vllm-srun golden: %s\n", err.msg);
            goto out;
        }
        printf("{\"%s\":%s}\n", vsr_device_kind_name(e.device.kind), e.golden.answers_json);
        rc = 0;
        goto out;
    }
    printf("golden self-check on %s: %s (%d of %d values matched, reference %s)%s%s\n", e.device_id,
           e.golden.status, e.golden.matched, e.golden.checked, e.golden.reference,
           e.golden.reason[0] ? ": " : "", e.golden.reason);
    rc = st == VSR_OK ? 0 : 1;
out:
    vsr_engine_close(&e);
    return rc;
}
