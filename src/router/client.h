/* The router's upstream HTTP client: one thread drives every call through a libcurl multi
 * handle (connections to workers and backends are kept alive and reused), so a thousand calls
 * in flight cost no thread each. Calls are submitted, paused/resumed and cancelled from any
 * thread; their callbacks run on the client thread and must not block. */
#ifndef VSR_ROUTER_CLIENT_H
#define VSR_ROUTER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rt_client rt_client;
typedef struct rt_call rt_call;

typedef enum rt_call_result {
    RT_CALL_OK,        /* an HTTP answer came back (any status) */
    RT_CALL_CONNECT,   /* could not connect (refused, no such socket): nothing was sent */
    RT_CALL_TIMEOUT,   /* past the call's timeout */
    RT_CALL_TRANSPORT, /* the connection failed mid-call */
    RT_CALL_CANCELLED, /* rt_client_cancel */
} rt_call_result;

typedef struct rt_call_spec {
    const char *url;        /* full URL; for a Unix socket "http://localhost/v1/decisions" */
    const char *uds_path;   /* NULL or "" for TCP */
    const char *body;       /* POST body (copied), or NULL for GET */
    size_t body_len;
    const char *const *headers; /* extra request headers, NULL-terminated ("Name: value") */
    int timeout_ms;         /* whole call; 0: none */
    int connect_timeout_ms; /* 0: 5000 */
} rt_call_spec;

typedef struct rt_call_cb {
    /* Once, when the status line and headers are in (before any body). `lines` holds every
     * header of the answer as "Name: value\r\n" lines. */
    void (*on_headers)(void *arg, long status, const char *content_type, const char *server_timing, const char *lines);
    /* Body bytes as they arrive. Return false to pause the call (flow control): nothing more
     * arrives until rt_client_resume. */
    bool (*on_body)(void *arg, const char *data, size_t n);
    /* Once, at the end, whatever happened. `error` is a message for results other than OK. */
    void (*on_done)(void *arg, rt_call_result r, long status, const char *error, double seconds);
} rt_call_cb;

rt_client *rt_client_new(void);
/* Cancels what is in flight (on_done with RT_CALL_CANCELLED), stops the thread, frees. */
void rt_client_free(rt_client *c);

/* Queues a call. NULL when out of memory (no callback then). The call handle stays valid until
 * on_done has returned. */
rt_call *rt_client_submit(rt_client *c, const rt_call_spec *spec, const rt_call_cb *cb, void *arg);
/* Drops the caller's reference (after which `call` must not be used). */
void rt_call_release(rt_call *call);
void rt_client_resume(rt_client *c, rt_call *call);
void rt_client_cancel(rt_client *c, rt_call *call);

const char *rt_call_result_name(rt_call_result r);

#endif
