/* A minimal blocking HTTP/1.1 client (keep-alive, Content-Length bodies) for
 * `vllm-srun bench` and the server tests: TCP host:port or a Unix socket. */
#ifndef VSR_TOOLS_HTTP_CLIENT_H
#define VSR_TOOLS_HTTP_CLIENT_H

#include <stddef.h>

typedef struct http_conn {
    int fd;
    const char *host; /* NULL with uds */
    int port;
    const char *uds;
    char *buf;        /* receive buffer */
    size_t len, cap;
} http_conn;

typedef struct http_response {
    int status;
    char server_timing[512];
    char *body;       /* malloc'd, NUL-terminated */
    size_t body_len;
} http_response;

void http_conn_init(http_conn *c, const char *host, int port, const char *uds);
/* Sends one request and reads the response; reconnects once if the kept-alive
 * connection was closed. Returns 0 or -1 (errno-style failure, message in err). */
int http_request(http_conn *c, const char *method, const char *path, const char *body, size_t body_len,
                 http_response *r, char *err, size_t err_n);
void http_conn_close(http_conn *c);
void http_response_free(http_response *r);

#endif
