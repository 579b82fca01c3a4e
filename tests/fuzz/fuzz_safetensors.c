/* libFuzzer target: vsr_st_parse on arbitrary bytes. On success every tensor's bytes are read
 * (so ASan sees any span that escapes the buffer) and every name must be found again. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vsr/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    if (vsr_st_parse("fuzz", data, size, &f, &err) != VSR_OK) {
        if (f != NULL || err.msg[0] == '\0') __builtin_trap(); /* a refusal must explain itself */
        return 0;
    }
    volatile uint8_t sink = 0;
    uint64_t covered = 0;
    for (size_t i = 0; i < vsr_st_count(f); i++) {
        const vsr_tensor *t = vsr_st_at(f, i);
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++) sink ^= p[k];
        if (vsr_st_find(f, t->name) != t) __builtin_trap();
        if (t->offset < 8 || t->offset + t->nbytes > size) __builtin_trap();
        covered += t->nbytes;
    }
    (void)vsr_st_metadata(f, "format");
    /* The tensors tile the data buffer exactly. */
    if (vsr_st_count(f) && covered != size - vsr_st_at(f, 0)->offset) __builtin_trap();
    vsr_st_close(f);
    return 0;
}
