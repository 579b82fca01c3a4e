#include "http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void http_conn_init(http_conn *c, const char *host, int port, const char *uds) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->host = host;
    c->port = port;
    c->uds = uds;
}

static int conn_open(http_conn *c, char *err, size_t n) {
    if (c->uds) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", c->uds);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
            snprintf(err, n, "connect unix:%s: %s", c->uds, strerror(errno));
            if (c->fd >= 0) close(c->fd);
            c->fd = -1;
            return -1;
        }
        return 0;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    if (inet_pton(AF_INET, c->host, &a.sin_addr) != 1) {
        snprintf(err, n, "bad IPv4 address %s", c->host);
        return -1;
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(err, n, "connect %s:%d: %s", c->host, c->port, strerror(errno));
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    return 0;
}

void http_conn_close(http_conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

void http_response_free(http_response *r) {
    free(r->body);
    r->body = NULL;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until buf holds at least `need` bytes; -1 on close/error. */
static int fill(http_conn *c, size_t need) {
    while (c->len < need) {
        if (c->cap < need + 1 || c->cap - c->len < 4096) {
            size_t cap = c->cap ? c->cap * 2 : 65536;
            while (cap < need + 4096) cap *= 2;
            char *b = realloc(c->buf, cap);
            if (!b) return -1;
            c->buf = b;
            c->cap = cap;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c->len += (size_t)r;
    }
    return 0;
}

static int try_request(http_conn *c, const char *method, const char *path, const char *body,
                       size_t body_len, http_response *r, char *err, size_t n) {
    if (c->fd < 0 && conn_open(c, err, n) != 0) return -2;
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: keep-alive\r\n\r\n",
                      method, path, body_len);
    if (send_all(c->fd, head, (size_t)hl) != 0 || (body_len && send_all(c->fd, body, body_len) != 0)) {
        snprintf(err, n, "send: %s", strerror(errno));
        return -1;
    }
    /* headers */
    char *end = NULL;
    for (;;) {
        if (c->len) {
            c->buf[c->len] = 0;
            end = strstr(c->buf, "\r\n\r\n");
            if (end) break;
        }
        if (fill(c, c->len + 1) != 0) {
            snprintf(err, n, "connection closed before the response");
            return -1;
        }
    }
    size_t hdr_len = (size_t)(end - c->buf) + 4;
    memset(r, 0, sizeof *r);
    if (sscanf(c->buf, "HTTP/1.%*d %d", &r->status) != 1) {
        snprintf(err, n, "bad status line");
        return -1;
    }
    size_t clen = 0;
    int close_after = 0;
    for (char *line = strstr(c->buf, "\r\n") + 2; line < end; line = strstr(line, "\r\n") + 2) {
        if (!strncasecmp(line, "Content-Length:", 15)) clen = strtoull(line + 15, NULL, 10);
        else if (!strncasecmp(line, "Server-Timing:", 14)) {
            const char *v = line + 14;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            snprintf(r->server_timing, sizeof r->server_timing, "%.*s", (int)(e - v), v);
        } else if (!strncasecmp(line, "Connection: close", 17)) close_after = 1;
    }
    if (fill(c, hdr_len + clen) != 0) {
        snprintf(err, n, "connection closed in the body");
        return -1;
    }
    r->body = malloc(clen + 1);
    if (!r->body) return -1;
    memcpy(r->body, c->buf + hdr_len, clen);
    r->body[clen] = 0;
    r->body_len = clen;
    memmove(c->buf, c->buf + hdr_len + clen, c->len - hdr_len - clen);
    c->len -= hdr_len + clen;
    if (close_after) {
        close(c->fd);
        c->fd = -1;
        c->len = 0;
    }
    return 0;
}

int http_request(http_conn *c, const char *method, const char *path, const char *body, size_t body_len,
                 http_response *r, char *err, size_t n) {
    int rc = try_request(c, method, path, body, body_len, r, err, n);
    if (rc == -1) { /* a kept-alive connection may have been closed: retry once on a new one */
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        c->len = 0;
        rc = try_request(c, method, path, body, body_len, r, err, n);
    }
    return rc == 0 ? 0 : -1;
}
