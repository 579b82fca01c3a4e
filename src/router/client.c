/* The router's upstream client (client.h): one thread, one libcurl multi handle. Submitters
 * queue operations (add, resume, cancel) and wake the thread with curl_multi_wakeup; the thread
 * applies them, drives the transfers and runs the callbacks. Calls are refcounted so that a
 * cancel racing the end of a call touches valid memory. */
#include "router/client.h"

#include "core/strbuf.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum op_kind { OP_ADD, OP_RESUME, OP_CANCEL } op_kind;

struct rt_call {
    int refs; /* atomic */
    rt_client *client;
    CURL *e;
    struct curl_slist *hdrs;
    char *body;
    rt_call_cb cb;
    void *arg;
    bool headers_done, done, paused, added;
    long status;
    char content_type[160];
    char server_timing[512];
    vsr_strbuf lines; /* the answer's headers */
    char errbuf[CURL_ERROR_SIZE];
    double t0;
    rt_call *lprev, *lnext; /* the client's live list (client thread only) */
};

typedef struct op {
    op_kind kind;
    rt_call *call;
    struct op *next;
} op;

struct rt_client {
    CURLM *m;
    pthread_t th;
    pthread_mutex_t mu;
    op *ops, *ops_tail;
    rt_call *live; /* added and not finished (client thread only) */
    int stop;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *rt_call_result_name(rt_call_result r) {
    static const char *const names[] = {"ok", "connect", "timeout", "transport", "cancelled"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

static void call_unref(rt_call *c) {
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL)) return;
    if (c->e) curl_easy_cleanup(c->e);
    curl_slist_free_all(c->hdrs);
    vsr_strbuf_free(&c->lines);
    free(c->body);
    free(c);
}

void rt_call_release(rt_call *c) {
    if (c) call_unref(c);
}

static void push_op(rt_client *cl, op_kind kind, rt_call *call) {
    op *o = malloc(sizeof *o);
    if (!o) return; /* out of memory: the op is lost; add is checked by the caller */
    __atomic_add_fetch(&call->refs, 1, __ATOMIC_ACQ_REL);
    o->kind = kind;
    o->call = call;
    o->next = NULL;
    pthread_mutex_lock(&cl->mu);
    if (cl->ops_tail) cl->ops_tail->next = o;
    else cl->ops = o;
    cl->ops_tail = o;
    pthread_mutex_unlock(&cl->mu);
    curl_multi_wakeup(cl->m);
}

/* ---- callbacks of libcurl (client thread) ---- */

static void headers_complete(rt_call *c) {
    if (c->headers_done) return;
    c->headers_done = true;
    curl_easy_getinfo(c->e, CURLINFO_RESPONSE_CODE, &c->status);
    if (c->cb.on_headers)
        c->cb.on_headers(c->arg, c->status, c->content_type, c->server_timing, c->lines.p ? c->lines.p : "");
}

static void copy_header_value(char *dst, size_t cap, const char *line, size_t n, size_t name_len) {
    const char *v = line + name_len;
    size_t l = n - name_len;
    while (l && (*v == ' ' || *v == '\t')) v++, l--;
    while (l && (v[l - 1] == '\r' || v[l - 1] == '\n' || v[l - 1] == ' ')) l--;
    if (l >= cap) l = cap - 1;
    memcpy(dst, v, l);
    dst[l] = 0;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *arg) {
    rt_call *c = arg;
    size_t n = size * nitems;
    if (n >= 4 && !strncmp(buf, "HTTP", 4)) { /* a new status line (after 1xx) */
        c->content_type[0] = c->server_timing[0] = 0;
        vsr_strbuf_free(&c->lines);
        return n;
    }
    if (n <= 2 && (buf[0] == '\r' || buf[0] == '\n')) { /* end of a header block */
        long code = 0;
        curl_easy_getinfo(c->e, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) headers_complete(c);
        return n;
    }
    vsr_strbuf_put(&c->lines, buf, n);
    if (n > 13 && !strncasecmp(buf, "Content-Type:", 13)) copy_header_value(c->content_type, sizeof c->content_type, buf, n, 13);
    else if (n > 14 && !strncasecmp(buf, "Server-Timing:", 14))
        copy_header_value(c->server_timing, sizeof c->server_timing, buf, n, 14);
    return n;
}

static size_t on_write(char *buf, size_t size, size_t nmemb, void *arg) {
    rt_call *c = arg;
    size_t n = size * nmemb;
    headers_complete(c);
    bool more = c->cb.on_body ? c->cb.on_body(c->arg, buf, n) : true;
    if (!more && !c->paused) {
        c->paused = true;
        curl_easy_pause(c->e, CURLPAUSE_RECV); /* the bytes above were taken; pause what follows */
    }
    return n;
}

static void finish(rt_client *cl, rt_call *c, rt_call_result r, const char *msg) {
    if (c->done) return;
    c->done = true;
    if (c->added) {
        curl_multi_remove_handle(cl->m, c->e);
        if (c->lprev) c->lprev->lnext = c->lnext;
        else cl->live = c->lnext;
        if (c->lnext) c->lnext->lprev = c->lprev;
    }
    c->added = false;
    if (r == RT_CALL_OK) headers_complete(c);
    if (c->cb.on_done) c->cb.on_done(c->arg, r, c->status, r == RT_CALL_OK ? NULL : msg, mono() - c->t0);
    call_unref(c); /* the client's reference */
}

static rt_call_result map_code(CURLcode code) {
    switch (code) {
    case CURLE_OK: return RT_CALL_OK;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return RT_CALL_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return RT_CALL_TIMEOUT;
    default: return RT_CALL_TRANSPORT;
    }
}

static void apply_ops(rt_client *cl) {
    pthread_mutex_lock(&cl->mu);
    op *o = cl->ops;
    cl->ops = cl->ops_tail = NULL;
    pthread_mutex_unlock(&cl->mu);
    while (o) {
        op *next = o->next;
        rt_call *c = o->call;
        if (!c->done) {
            if (o->kind == OP_ADD) {
                if (curl_multi_add_handle(cl->m, c->e) == CURLM_OK) {
                    c->added = true;
                    c->lprev = NULL;
                    c->lnext = cl->live;
                    if (cl->live) cl->live->lprev = c;
                    cl->live = c;
                } else finish(cl, c, RT_CALL_TRANSPORT, "cannot start the call (curl_multi_add_handle)");
            } else if (o->kind == OP_RESUME && c->paused) {
                c->paused = false;
                curl_easy_pause(c->e, CURLPAUSE_CONT);
            } else if (o->kind == OP_CANCEL) {
                finish(cl, c, RT_CALL_CANCELLED, "cancelled");
            }
        }
        call_unref(c);
        free(o);
        o = next;
    }
}

static void *client_main(void *arg) {
    rt_client *cl = arg;
    for (;;) {
        apply_ops(cl);
        if (__atomic_load_n(&cl->stop, __ATOMIC_ACQUIRE)) break;
        int running = 0;
        curl_multi_perform(cl->m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(cl->m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            rt_call *c = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            if (!c) continue;
            CURLcode code = msg->data.result;
            char why[CURL_ERROR_SIZE + 64];
            snprintf(why, sizeof why, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(code));
            finish(cl, c, map_code(code), why);
        }
        curl_multi_poll(cl->m, NULL, 0, 1000, NULL);
    }
    return NULL;
}

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

rt_client *rt_client_new(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, global_init);
    rt_client *cl = calloc(1, sizeof *cl);
    if (!cl) return NULL;
    cl->m = curl_multi_init();
    if (!cl->m) {
        free(cl);
        return NULL;
    }
    curl_multi_setopt(cl->m, CURLMOPT_MAXCONNECTS, 1024L);
    pthread_mutex_init(&cl->mu, NULL);
    if (pthread_create(&cl->th, NULL, client_main, cl) != 0) {
        curl_multi_cleanup(cl->m);
        pthread_mutex_destroy(&cl->mu);
        free(cl);
        return NULL;
    }
    return cl;
}

void rt_client_free(rt_client *cl) {
    if (!cl) return;
    __atomic_store_n(&cl->stop, 1, __ATOMIC_RELEASE);
    curl_multi_wakeup(cl->m);
    pthread_join(cl->th, NULL);
    apply_ops(cl);
    while (cl->live) finish(cl, cl->live, RT_CALL_CANCELLED, "the router is stopping"); /* what is still in flight */
    curl_multi_cleanup(cl->m);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

rt_call *rt_client_submit(rt_client *cl, const rt_call_spec *s, const rt_call_cb *cb, void *arg) {
    rt_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 2; /* the caller's and the client's */
    c->client = cl;
    c->cb = *cb;
    c->arg = arg;
    c->t0 = mono();
    c->e = curl_easy_init();
    if (!c->e) {
        free(c);
        return NULL;
    }
    CURL *e = c->e;
    curl_easy_setopt(e, CURLOPT_URL, s->url);
    if (s->uds_path && *s->uds_path) curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, s->uds_path);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(s->connect_timeout_ms > 0 ? s->connect_timeout_ms : 5000));
    if (s->timeout_ms > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    c->hdrs = curl_slist_append(NULL, "Expect:"); /* no 100-continue round trip */
    for (const char *const *h = s->headers; h && *h; h++) c->hdrs = curl_slist_append(c->hdrs, *h);
    if (s->body) {
        c->body = malloc(s->body_len + 1);
        if (!c->body) {
            curl_easy_cleanup(e);
            curl_slist_free_all(c->hdrs);
            free(c);
            return NULL;
        }
        memcpy(c->body, s->body, s->body_len);
        c->body[s->body_len] = 0;
        c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)s->body_len);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
    push_op(cl, OP_ADD, c);
    return c;
}

void rt_client_resume(rt_client *cl, rt_call *c) { push_op(cl, OP_RESUME, c); }
void rt_client_cancel(rt_client *cl, rt_call *c) { push_op(cl, OP_CANCEL, c); }
