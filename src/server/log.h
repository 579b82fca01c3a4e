/* Worker logging: one line per event on stderr, filtered by --log-level. */
#ifndef VSR_SERVER_LOG_H
#define VSR_SERVER_LOG_H

typedef enum srv_log_level { SRV_LOG_ERROR, SRV_LOG_WARN, SRV_LOG_INFO, SRV_LOG_DEBUG } srv_log_level;

/* The program named in each line ("vllm-srun" unless set; the router sets "vllm-sr"). */
void srv_log_set_program(const char *name);
/* Returns false for an unknown level name. */
int srv_log_set_level(const char *name);
void srv_log(srv_log_level lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
void srv_logv(srv_log_level lv, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
