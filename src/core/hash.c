/* sha256 through OpenSSL EVP: streamed reads, one worker thread per file slot. */
#include "vsr/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void to_hex(const unsigned char *md, unsigned n, char *out) {
    static const char hx[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[2 * n] = 0;
}

void vsr_sha256_hex(const void *data, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    to_hex(md, len, out);
}

vsr_status vsr_sha256_file(const char *path, char out[65], uint64_t *bytes_out, vsr_progress *p,
                           vsr_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vsr_err_set(err, VSR_E_IO, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        close(fd);
        EVP_MD_CTX_free(ctx);
        return vsr_err_set(err, VSR_E_INTERNAL, "%s: OpenSSL sha256 init failed", path);
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    uint64_t total = 0;
    vsr_status st = VSR_OK;
    if (!buf) st = vsr_err_set(err, VSR_E_NOMEM, "%s: out of memory hashing", path);
    while (st == VSR_OK) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0) {
            if (errno == EINTR) continue;
            st = vsr_err_set(err, VSR_E_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        total += (uint64_t)r;
        vsr_progress_add(p, (uint64_t)r);
    }
    if (st == VSR_OK) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        EVP_DigestFinal_ex(ctx, md, &len);
        to_hex(md, len, out);
        if (bytes_out) *bytes_out = total;
    }
    free(buf);
    EVP_MD_CTX_free(ctx);
    close(fd);
    return st;
}

typedef struct {
    size_t n;
    const char *const *paths;
    char (*out)[65];
    uint64_t *bytes;
    vsr_progress *p;
    pthread_mutex_t mu;
    size_t next;
    size_t fail_index; /* lowest failing index, n if none */
    vsr_err fail;
} hash_job;

static void *hash_worker(void *arg) {
    hash_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n) return NULL;
        vsr_err e = {0};
        uint64_t b = 0;
        if (vsr_sha256_file(j->paths[i], j->out[i], &b, j->p, &e) != VSR_OK) {
            pthread_mutex_lock(&j->mu);
            if (i < j->fail_index) {
                j->fail_index = i;
                j->fail = e;
            }
            pthread_mutex_unlock(&j->mu);
        } else if (j->bytes) {
            j->bytes[i] = b;
        }
    }
}

vsr_status vsr_sha256_files(size_t n, const char *const *paths, char (*out)[65], uint64_t *bytes,
                            int threads, vsr_progress *p, vsr_err *err) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if ((size_t)threads > n) threads = (int)n;
    hash_job j = {.n = n, .paths = paths, .out = out, .bytes = bytes, .p = p, .fail_index = n};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t tid[64];
    if (threads > 64) threads = 64;
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, hash_worker, &j) == 0) started++;
    hash_worker(&j);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.fail_index < n) {
        if (err) *err = j.fail;
        return j.fail.code;
    }
    return VSR_OK;
}
