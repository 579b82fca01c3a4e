/* vsr/hash.h: sha256 through OpenSSL EVP, streamed, parallel over files. */
#ifndef VSR_HASH_H
#define VSR_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "vsr/error.h"
#include "vsr/progress.h"

#ifdef __cplusplus
extern "C" {
#endif

void vsr_sha256_hex(const void *data, size_t n, char out[65]);
/* Streams the file; counts bytes into *bytes_out (may be NULL). */
vsr_status vsr_sha256_file(const char *path, char out[65], uint64_t *bytes_out, vsr_progress *p,
                           vsr_err *err);
/* Hashes n files with up to `threads` workers (0 = online cores). out[i] and bytes[i]
 * (may be NULL) per file. On failure err names the first failing file. */
vsr_status vsr_sha256_files(size_t n, const char *const *paths, char (*out)[65], uint64_t *bytes,
                            int threads, vsr_progress *p, vsr_err *err);

#ifdef __cplusplus
}
#endif

#endif
