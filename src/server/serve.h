/* `vllm-srun serve` with the HTTP limits of server/http.h (vsr_serve uses their defaults). */
#ifndef VSR_SERVER_SERVE_H
#define VSR_SERVER_SERVE_H

#include "server/http.h"

/* lim NULL: srv_http_limits_default. Returns the process exit status. */
int srv_serve(const vsr_serve_opts *o, const srv_http_limits *lim);

#endif
