/* A small OpenAI-compatible upstream for the router's tests and bench (real HTTP, real SSE).
 *
 *   upstream --port P [--name NAME] [--chunks N] [--delay-ms D] [--host H]
 *
 * POST /v1/chat/completions answers a chat.completion whose content is "NAME: <last user
 * message>" and whose model is the request's; with "stream": true it answers text/event-stream:
 * N chunk events (one word each), D ms apart, then `data: [DONE]`. Every answer carries
 * `x-upstream: NAME`, so a test sees which backend the router chose. GET /health answers 200.
 * Thread per connection: a stream may sleep between events without holding anyone else.
 * Build: cc -O2 -o upstream upstream.c -lmicrohttpd -ljansson */
#include <jansson.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

static const char *g_name = "upstream";
static int g_chunks = 3, g_delay_ms = 0;

typedef struct req {
    char *body;
    size_t len;
} req;

typedef struct stream {
    int next; /* event index; g_chunks = [DONE]; past it: end */
    char model[256];
    char *text;
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *s = cls;
    if (s->next > g_chunks) return MHD_CONTENT_READER_END_OF_STREAM;
    if (s->next > 0 && g_delay_ms > 0) {
        struct timespec ts = {g_delay_ms / 1000, (long)(g_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int n;
    if (s->next == g_chunks) {
        n = snprintf(buf, max, "data: [DONE]\n\n");
    } else {
        char piece[64];
        snprintf(piece, sizeof piece, "%s%s-%d", s->next ? " " : "", g_name, s->next);
        json_t *o = json_pack("{s:s,s:s,s:s,s:[{s:i,s:{s:s},s:n}]}", "id", "chatcmpl-up", "object", "chat.completion.chunk",
                              "model", s->model, "choices", "index", 0, "delta", "content", piece, "finish_reason");
        char *j = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        n = snprintf(buf, max, "data: %s\n\n", j ? j : "{}");
        free(j);
    }
    s->next++;
    return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : (ssize_t)((size_t)n < max ? (size_t)n : max);
}

static void stream_free(void *cls) {
    stream *s = cls;
    free(s->text);
    free(s);
}

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *ctype, char *body) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "x-upstream", g_name);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *data, size_t *size, void **con_cls) {
    req *q = *con_cls;
    if (!q) {
        *con_cls = calloc(1, sizeof(req));
        return *con_cls ? MHD_YES : MHD_NO;
    }
    if (*size) {
        char *nb = realloc(q->body, q->len + *size + 1);
        if (!nb) return MHD_NO;
        memcpy(nb + q->len, data, *size);
        q->body = nb;
        q->len += *size;
        q->body[q->len] = 0;
        *size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/health")) return reply(c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (strcmp(url, "/v1/chat/completions") || strcmp(method, "POST"))
        return reply(c, 404, "application/json", strdup("{\"error\":{\"code\":\"not_found\",\"message\":\"no route\"}}"));
    json_t *o = json_loadb(q->body ? q->body : "", q->len, 0, NULL);
    const char *model = json_string_value(json_object_get(o, "model"));
    json_t *msgs = json_object_get(o, "messages");
    const char *last = "";
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (role && content && !strcmp(role, "user")) last = content;
    }
    if (!o) return reply(c, 400, "application/json", strdup("{\"error\":{\"code\":\"invalid_request\",\"message\":\"not JSON\"}}"));
    enum MHD_Result ret;
    if (json_is_true(json_object_get(o, "stream"))) {
        stream *s = calloc(1, sizeof *s);
        snprintf(s->model, sizeof s->model, "%s", model ? model : "");
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "x-upstream", g_name);
        ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
    } else {
        char content[4096];
        snprintf(content, sizeof content, "%s: %s", g_name, last);
        json_t *a = json_pack("{s:s,s:s,s:s,s:[{s:i,s:{s:s,s:s},s:s}],s:{s:i,s:i,s:i}}", "id", "chatcmpl-up", "object",
                              "chat.completion", "model", model ? model : "", "choices", "index", 0, "message", "role",
                              "assistant", "content", content, "finish_reason", "stop", "usage", "prompt_tokens", 1,
                              "completion_tokens", 1, "total_tokens", 2);
        ret = reply(c, 200, "application/json", json_dumps(a, JSON_COMPACT));
        json_decref(a);
    }
    json_decref(o);
    return ret;
}

static void done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    req *q = *con_cls;
    if (q) free(q->body), free(q);
    *con_cls = NULL;
}

int main(int argc, char **argv) {
    int port = 0;
    const char *host = "127.0.0.1";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) g_name = argv[i + 1];
        else if (!strcmp(argv[i], "--chunks")) g_chunks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--delay-ms")) g_delay_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--host")) host = argv[i + 1];
        else {
            fprintf(stderr, "upstream: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (port <= 0) {
        fprintf(stderr, "usage: upstream --port P [--name NAME] [--chunks N] [--delay-ms D] [--host H]\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port,
                                            NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
                                            MHD_OPTION_NOTIFY_COMPLETED, done, NULL, MHD_OPTION_CONNECTION_LIMIT, 4096u,
                                            MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "upstream: cannot listen on %s:%d\n", host, port);
        return 1;
    }
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGINT);
    sigprocmask(SIG_BLOCK, &s, NULL);
    int sig;
    sigwait(&s, &sig);
    MHD_stop_daemon(d);
    return 0;
}
