/* tests/tools/openai_upstream: a small OpenAI-compatible upstream for the router's tests and
 * bench (issue #21). Real HTTP (libmicrohttpd, a thread per connection), real SSE.
 *
 *   openai_upstream --name NAME (--port P [--host H] [--port-file F] | --uds PATH)
 *                   [--delay-ms N] [--chunk-delay-ms N] [--chunks N] [--pid-file F]
 *
 *   POST /v1/chat/completions  {"model", "messages": [...], "stream": bool}
 *       non-streaming: a chat.completion whose content is "[NAME] <model>: <last user message>"
 *       streaming: `data: {chat.completion.chunk}` events (role, then --chunks pieces of the
 *       content, then finish_reason) and `data: [DONE]`, --chunk-delay-ms apart.
 *       Every answer carries `X-Upstream-Backend: NAME`; the body's "model" echoes the request's
 *       and "system_fingerprint" is NAME, so a test sees which backend answered which model.
 *       --delay-ms waits before answering (a slow upstream). Bad bodies get 400 with an OpenAI
 *       error object naming what was wrong.
 *   GET /health   {"status":"ready"}      GET /v1/models   the one model NAME
 *   GET /stats    {"name", "requests", "streams", "errors"}
 *
 * --port 0 takes a free port and writes it to --port-file (no race between tests). SIGTERM and
 * SIGINT keep their default action, so a test can make it ignore SIGTERM (trap '' TERM; exec). */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_BODY (8 << 20)

static const char *g_name = "upstream";
static int g_delay_ms, g_chunk_delay_ms = 5, g_chunks = 4;
static atomic_long g_requests, g_streams, g_errors, g_ids;

static void sleep_ms(int ms) {
    if (ms <= 0) return;
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) && errno == EINTR) {
    }
}

typedef struct req {
    char *body;
    size_t len;
    bool too_big;
} req;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *body) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "X-Upstream-Backend", g_name);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s ? send_text(c, status, "application/json", s) : MHD_NO;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *msg) {
    atomic_fetch_add(&g_errors, 1);
    return send_json(c, status,
                     json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg, "type", "invalid_request_error",
                               "param", "code", status == 404 ? "not_found" : "invalid_request"));
}

/* ---- streaming ---- */

typedef struct stream {
    char *id, *model, *content;
    int step, n_steps; /* 0: role; 1..chunks: content pieces; chunks+1: finish; chunks+2: [DONE] */
    size_t content_len;
    char *pending;     /* the event being written */
    size_t pending_len, pending_off;
} stream;

static char *chunk_event(const stream *st, json_t *delta, const char *finish) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:o, s:s?}]}", "id", st->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)time(NULL), "model", st->model,
                          "system_fingerprint", g_name, "choices", "index", 0, "delta", delta, "finish_reason", finish);
    char *j = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!j) return NULL;
    char *ev = NULL;
    if (asprintf(&ev, "data: %s\n\n", j) < 0) ev = NULL;
    free(j);
    return ev;
}

/* Pieces are cut at character starts, never inside a UTF-8 sequence. */
static size_t utf8_start(const char *s, size_t i) {
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

/* The next event of the stream, or NULL at the end. */
static char *next_event(stream *st) {
    int chunks = st->n_steps - 3;
    int k = st->step++;
    if (k == 0) return chunk_event(st, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL);
    if (k <= chunks) {
        size_t a = utf8_start(st->content, st->content_len * (size_t)(k - 1) / (size_t)chunks);
        size_t b = utf8_start(st->content, st->content_len * (size_t)k / (size_t)chunks);
        json_t *piece = json_stringn(st->content + a, b - a);
        if (!piece) piece = json_string("");
        return chunk_event(st, json_pack("{s:o}", "content", piece), NULL);
    }
    if (k == chunks + 1) return chunk_event(st, json_object(), "stop");
    if (k == chunks + 2) return strdup("data: [DONE]\n\n");
    return NULL;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *st = cls;
    if (st->pending_off >= st->pending_len) {
        free(st->pending);
        st->pending = NULL;
        if (st->step > 0) sleep_ms(g_chunk_delay_ms);
        st->pending = next_event(st);
        if (!st->pending) return MHD_CONTENT_READER_END_OF_STREAM;
        st->pending_len = strlen(st->pending);
        st->pending_off = 0;
    }
    size_t n = st->pending_len - st->pending_off;
    if (n > max) n = max;
    memcpy(buf, st->pending + st->pending_off, n);
    st->pending_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    free(st->id), free(st->model), free(st->content), free(st->pending);
    free(st);
}

/* ---- chat completions ---- */

static char *answer_text(const char *model, const char *user) {
    char *s = NULL;
    if (asprintf(&s, "[%s] %s: %.200s", g_name, model, user) < 0) return NULL;
    return s;
}

static enum MHD_Result chat(struct MHD_Connection *c, const req *rq) {
    if (rq->too_big) return send_error(c, 413, "the request body is larger than 8 MiB");
    json_error_t je;
    json_t *in = json_loadb(rq->body ? rq->body : "", rq->len, 0, &je);
    if (!in || !json_is_object(in)) {
        json_decref(in);
        char msg[300];
        snprintf(msg, sizeof msg, "the body is not a JSON object: %s", in ? "not an object" : je.text);
        return send_error(c, 400, msg);
    }
    const char *model = json_string_value(json_object_get(in, "model"));
    json_t *msgs = json_object_get(in, "messages");
    if (!model || !*model) {
        json_decref(in);
        return send_error(c, 400, "model must be a non-empty string");
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        json_decref(in);
        return send_error(c, 400, "messages must be a non-empty array");
    }
    const char *user = "";
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (role && content && !strcmp(role, "user")) {
            user = content;
            break;
        }
    }
    bool streaming = json_is_true(json_object_get(in, "stream"));
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-%s-%ld", g_name, atomic_fetch_add(&g_ids, 1) + 1);
    char *text = answer_text(model, user);
    if (!text) {
        json_decref(in);
        return MHD_NO;
    }
    atomic_fetch_add(&g_requests, 1);
    sleep_ms(g_delay_ms);
    if (!streaming) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[{s:i, s:{s:s, s:s}, s:s}], s:{s:i, s:i, s:i}}", "id", id,
                              "object", "chat.completion", "created", (json_int_t)time(NULL), "model", model,
                              "system_fingerprint", g_name, "choices", "index", 0, "message", "role", "assistant",
                              "content", text, "finish_reason", "stop", "usage", "prompt_tokens", (int)strlen(user) / 4,
                              "completion_tokens", (int)strlen(text) / 4, "total_tokens",
                              (int)(strlen(user) + strlen(text)) / 4);
        free(text);
        json_decref(in);
        return send_json(c, 200, o);
    }
    atomic_fetch_add(&g_streams, 1);
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        free(text);
        json_decref(in);
        return MHD_NO;
    }
    st->id = strdup(id);
    st->model = strdup(model);
    st->content = text;
    st->content_len = strlen(text);
    st->n_steps = g_chunks + 3;
    json_decref(in);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Upstream-Backend", g_name);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (rq->len + *upload_size > MAX_BODY) rq->too_big = true;
        else {
            char *b = realloc(rq->body, rq->len + *upload_size + 1);
            if (!b) return MHD_NO;
            memcpy(b + rq->len, upload, *upload_size);
            rq->body = b;
            rq->len += *upload_size;
            b[rq->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/v1/chat/completions")) {
        if (strcmp(method, "POST")) return send_error(c, 405, "/v1/chat/completions takes POST");
        return chat(c, rq);
    }
    if (strcmp(method, "GET")) return send_error(c, 404, "no such route");
    if (!strcmp(url, "/health")) return send_json(c, 200, json_pack("{s:s, s:s}", "status", "ready", "name", g_name));
    if (!strcmp(url, "/v1/models"))
        return send_json(c, 200,
                         json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "object", "list", "data", "id", g_name, "object",
                                   "model", "owned_by", "openai_upstream"));
    if (!strcmp(url, "/stats"))
        return send_json(c, 200,
                         json_pack("{s:s, s:I, s:I, s:I}", "name", g_name, "requests",
                                   (json_int_t)atomic_load(&g_requests), "streams", (json_int_t)atomic_load(&g_streams),
                                   "errors", (json_int_t)atomic_load(&g_errors)));
    return send_error(c, 404, "no such route");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    req *rq = *con_cls;
    if (rq) free(rq->body), free(rq);
    *con_cls = NULL;
}

static int listen_unix(const char *path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "openai_upstream: --uds %s: the path is longer than %zu bytes\n", path, sizeof a.sun_path - 1);
        return -1;
    }
    strcpy(a.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            fprintf(stderr, "openai_upstream: --uds %s: exists and is not a socket\n", path);
            return -1;
        }
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 256)) {
        fprintf(stderr, "openai_upstream: --uds %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static int write_file(const char *path, long v) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "%ld\n", v);
    if (fclose(f) || rename(tmp, path)) return -1;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: openai_upstream --name NAME (--port P [--host H] [--port-file F] | --uds PATH)\n"
               "         [--delay-ms N] [--chunk-delay-ms N] [--chunks N] [--pid-file F]\n");
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1", *uds = NULL, *port_file = NULL, *pid_file = NULL;
    int port = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "openai_upstream: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--name")) g_name = v;
        else if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--uds")) uds = v;
        else if (!strcmp(a, "--port-file")) port_file = v;
        else if (!strcmp(a, "--pid-file")) pid_file = v;
        else if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--delay-ms")) g_delay_ms = atoi(v);
        else if (!strcmp(a, "--chunk-delay-ms")) g_chunk_delay_ms = atoi(v);
        else if (!strcmp(a, "--chunks")) g_chunks = atoi(v) > 0 ? atoi(v) : 1;
        else {
            fprintf(stderr, "openai_upstream: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((port < 0) == (uds == NULL) || port > 65535) {
        fprintf(stderr, "openai_upstream: give exactly one of --port (0-65535) and --uds\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d;
    if (uds) {
        int fd = listen_unix(uds);
        if (fd < 0) return 1;
        d = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 4096u,
                             MHD_OPTION_END);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
            fprintf(stderr, "openai_upstream: --host %s is not an IPv4 address\n", host);
            return 2;
        }
        d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, &a,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 4096u,
                             MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
    }
    if (!d) {
        fprintf(stderr, "openai_upstream: cannot listen on %s%s%d\n", uds ? uds : host, uds ? "" : ":", uds ? 0 : port);
        return 1;
    }
    if (!uds) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        port = di ? di->port : port;
        if (port_file && write_file(port_file, port)) {
            fprintf(stderr, "openai_upstream: cannot write %s: %s\n", port_file, strerror(errno));
            return 1;
        }
    }
    if (pid_file && write_file(pid_file, (long)getpid())) {
        fprintf(stderr, "openai_upstream: cannot write %s: %s\n", pid_file, strerror(errno));
        return 1;
    }
    if (uds) fprintf(stderr, "openai_upstream %s: listening on %s\n", g_name, uds);
    else fprintf(stderr, "openai_upstream %s: listening on %s:%d\n", g_name, host, port);
    for (;;) pause(); /* SIGTERM/SIGINT end the process (default action) */
}
