/* vsr/server.h: the HTTP worker (`vllm-srun serve`).
 *
 * One process serves one model. Startup refuses at once (exit 1) when the device
 * cannot run the package (checked before any weight is read); then the HTTP
 * listener comes up while the model loads (/health: loading, warming, ready or
 * failed). HTTP threads validate and tokenize; one scheduler thread per model
 * runs the forwards from a bounded queue (429 when full). SIGTERM drains the
 * in-flight work and exits 0. */
#ifndef VSR_SERVER_H
#define VSR_SERVER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vsr_serve_opts {
    const char *model;          /* org/name[@rev] or an absolute path */
    const char *revision;       /* NULL: from @rev or "main" */
    const char *store_dir;      /* NULL: the Hugging Face cache */
    const char *device;         /* "auto" (default), "cpu", "cuda[:N]", "rocm[:N]" */
    const char *host;           /* "127.0.0.1" */
    int port;                   /* 8100 */
    const char *uds;            /* Unix socket path instead of TCP, or NULL */
    const char *dtype;          /* "auto" */
    int threads;                /* CPU threads, 0 = all cores */
    int max_queue;              /* 256 */
    long long max_queued_tokens;/* 4194304: tokens of the queued jobs, per model */
    size_t max_request_bytes;   /* 8388608 */
    const char *autotune_cache; /* NULL or a directory */
    const char *served_name;    /* NULL: the repo name, or the folder name for a path */
    const char *log_level;      /* "error", "warn", "info" (default), "debug" */
    const char *quantize;       /* NULL, or "fp8-dynamic" (quantize a BF16 package while loading) */
    const char *profile;        /* "exact" (default) or "batching": enabled beside exact */
    double batch_wait_ms;       /* 2: how long a coalescing job waits for others */
    long long max_batch_tokens; /* 32768: padded tokens per coalesced forward (its bucket where the model pads) */
    long long warmup_tokens;    /* 8192: shape buckets up to this many tokens recorded at startup (0: none) */
} vsr_serve_opts;

void vsr_serve_opts_default(vsr_serve_opts *o);
/* Runs the worker until SIGTERM/SIGINT. Returns the process exit status. */
int vsr_serve(const vsr_serve_opts *o);

#ifdef __cplusplus
}
#endif

#endif
