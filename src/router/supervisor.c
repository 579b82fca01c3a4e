/* The router's worker supervisor (vsr/supervisor.h; reference-runtime.md 6.3).
 *
 * One list of replicas under one mutex. Handler threads only read it (pick) or touch counters
 * (release, report_failure); reload appends and marks; the monitor thread alone forks, reaps,
 * health-checks and frees, so it may use a replica pointer without the lock while it waits on
 * a socket. Forking on the monitor thread matters: PR_SET_PDEATHSIG fires when the thread that
 * forked ends, so that thread must outlive every worker (it does: it runs the stop sequence). */
#include "vsr/supervisor.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vsr/hash.h"

#define SOCK_PATH_MAX 100 /* as the reference: longer socket paths move to /tmp/vsr-<8hex> */
#define KEY_IN_NAME 40
#define TICK_MS 50

typedef enum rstate { RS_STARTING, RS_READY, RS_UNHEALTHY, RS_BACKOFF, RS_STOPPING, RS_A_READY, RS_A_DOWN } rstate;
static const char *const state_names[] = {"starting", "ready",          "unhealthy",    "backoff",
                                          "stopping", "attached-ready", "attached-down"};

typedef struct rep {
    struct rep *next;
    char *key;
    int dep_index, ordinal;
    char rid[16]; /* "r-" + 12 hex of sha256(key \0 placement \0 ordinal), as the reference */
    bool managed;
    char **argv; /* managed: the worker command, NULL-terminated, room for --threads N */
    int argc;
    bool cpu;    /* device cpu: --threads ceil(cores / cpu workers), decided at each spawn */
    bool spawned;
    char sock[256], url[512], served[256], health_url[600], log_path[PATH_MAX];
    pid_t pid;
    rstate st;
    int restarts, backoff_ms;
    int64_t started_ms, ready_since_ms, next_start_ms, bad_since_ms, drain_from_ms, term_ms;
    bool retired, ever_ready, kill_sent;
    int inflight;
    unsigned long long id;
} rep;

typedef struct dep_rr {
    char *key;
    unsigned next;
} dep_rr;

struct vsr_sup {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast after every monitor cycle and on stop */
    pthread_t thr;
    bool stopping, done;
    rep *reps;
    char **used;
    int n_used;
    dep_rr *rr;
    int n_rr;
    unsigned long long next_id;
    int64_t next_health_ms;
    /* options, resolved */
    char state_dir[PATH_MAX], sock_dir[PATH_MAX], log_dir[PATH_MAX], worker[PATH_MAX], store[PATH_MAX];
    int grace_ms, ready_timeout_ms, health_ms, backoff_min_ms, backoff_max_ms, stable_ms;
    bool quiet;
    void (*log)(void *ctx, const char *line);
    void *log_ctx;
};

/* ---------------------------------------------------------------- small helpers */

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void slog(vsr_sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slog(vsr_sup *s, const char *fmt, ...) {
    if (s->quiet) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->log) s->log(s->log_ctx, line);
    else fprintf(stderr, "vllm-sr: %s\n", line);
}

/* Key characters other than [A-Za-z0-9._-] become '_' in file names; at most KEY_IN_NAME. */
static void safe_name(const char *key, char *out, size_t n) {
    size_t i = 0;
    for (; key[i] && i < KEY_IN_NAME && i + 1 < n; i++) {
        char c = key[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        out[i] = ok ? c : '_';
    }
    out[i] = 0;
}

static vsr_status mkdir_p(const char *path, mode_t mode, vsr_err *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return vsr_err_set(err, VSR_E_INVALID, "state folder %s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return vsr_err_set(err, VSR_E_IO, "cannot create the state folder %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, mode) && errno != EEXIST)
        return vsr_err_set(err, VSR_E_IO, "cannot create the state folder %s: %s", buf, strerror(errno));
    return VSR_OK;
}

/* A directory only this user can enter: made 0700 if absent; an existing one must be a real
 * directory (not a symlink), ours, and 0700. Nothing is chmod'ed behind the user's back. */
static vsr_status private_dir(const char *what, const char *path, vsr_err *err) {
    if (mkdir(path, 0700) && errno != EEXIST)
        return vsr_err_set(err, VSR_E_IO, "%s %s: cannot create it: %s", what, path, strerror(errno));
    struct stat st;
    if (lstat(path, &st)) return vsr_err_set(err, VSR_E_IO, "%s %s: %s", what, path, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return vsr_err_set(err, VSR_E_INVALID, "%s %s is a symbolic link; refusing it (it must be a private directory)",
                           what, path);
    if (!S_ISDIR(st.st_mode)) return vsr_err_set(err, VSR_E_INVALID, "%s %s exists and is not a directory", what, path);
    if (st.st_uid != geteuid())
        return vsr_err_set(err, VSR_E_INVALID, "%s %s belongs to uid %u, not this user (uid %u); refusing it", what,
                           path, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & 07777) != 0700)
        return vsr_err_set(err, VSR_E_INVALID, "%s %s has mode 0%o; it must be private (0700)", what, path,
                           (unsigned)(st.st_mode & 07777));
    return VSR_OK;
}

/* ---------------------------------------------------------------- replica specs */

static void free_argv(char **a) {
    for (int i = 0; a && a[i]; i++) free(a[i]);
    free(a);
}

static void free_rep(rep *r) {
    if (!r) return;
    free(r->key);
    free_argv(r->argv);
    free(r);
}

/* Splits an attached endpoint into (socket, base URL). unix:///abs.sock -> (/abs.sock,
 * http://localhost); http(s)://... -> ("", the endpoint without a trailing slash). */
static void endpoint_target(const char *ep, char *sock, size_t ns, char *url, size_t nu) {
    if (!strncmp(ep, "unix://", 7)) {
        snprintf(sock, ns, "%s", ep + 7);
        snprintf(url, nu, "http://localhost");
    } else {
        sock[0] = 0;
        snprintf(url, nu, "%s", ep);
        size_t n = strlen(url);
        while (n > 0 && url[n - 1] == '/') url[--n] = 0;
    }
}

static void make_rid(const char *key, const char *placement, int ordinal, char out[16]) {
    char buf[4096], hex[65];
    size_t n = 0;
    int w = snprintf(buf, sizeof buf, "%s", key);
    n = (size_t)w < sizeof buf ? (size_t)w + 1 : sizeof buf; /* keep the NUL */
    w = snprintf(buf + n, sizeof buf - n, "%s", placement);
    n += (size_t)w < sizeof buf - n ? (size_t)w + 1 : 0;
    w = snprintf(buf + n, sizeof buf - n, "%d", ordinal);
    n += (size_t)w < sizeof buf - n ? (size_t)w : 0;
    vsr_sha256_hex(buf, n, hex);
    snprintf(out, 16, "r-%.12s", hex);
}

static int push_arg(char **a, int *k, const char *v) {
    a[*k] = strdup(v);
    return a[(*k)++] ? 0 : -1;
}

/* One replica of deployment d (ordinal i; device and endpoint from the replica entry or the
 * deployment itself). */
static rep *make_rep(vsr_sup *s, const vsr_rt_deployment *d, int dep_index, int i, vsr_err *err) {
    const vsr_rt_replica *re = d->n_replicas ? &d->replicas[i] : NULL;
    const char *endpoint = re ? re->endpoint : d->endpoint;
    const char *served = re ? re->served_name : d->served_name;
    const char *device = re ? re->device : d->device;
    if (!device || !*device) device = "auto";
    rep *r = calloc(1, sizeof *r);
    if (!r || !(r->key = strdup(d->key))) {
        free(r);
        vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        return NULL;
    }
    r->dep_index = dep_index;
    r->ordinal = i;
    r->id = ++s->next_id;
    r->backoff_ms = s->backoff_min_ms;
    char placement[3 * PATH_MAX];
    if (endpoint) {
        snprintf(r->served, sizeof r->served, "%s", served ? served : d->key);
        endpoint_target(endpoint, r->sock, sizeof r->sock, r->url, sizeof r->url);
        snprintf(placement, sizeof placement, "attached\x1f%s\x1f%s", endpoint, r->served);
        make_rid(d->key, placement, i, r->rid);
        snprintf(r->health_url, sizeof r->health_url, "%s/health", r->url);
        r->st = RS_A_DOWN;
        return r;
    }
    if (d->provider == VSR_RT_HTTP) {
        vsr_err_set(err, VSR_E_INVALID, "deployment '%s' replica %d: provider http needs an endpoint (it is never started)",
                    d->key, i);
        free_rep(r);
        return NULL;
    }
    const char *profile = d->profile ? d->profile : "exact";
    if (strcmp(profile, "exact") && strcmp(profile, "batching")) { /* the config loader refuses it first */
        vsr_err_set(err, VSR_E_UNSUPPORTED, "deployment '%s': unknown profile '%s'; available: batching, exact",
                    d->key, profile);
        free_rep(r);
        return NULL;
    }
    if (!d->artifact) {
        vsr_err_set(err, VSR_E_INVALID,
                    "deployment '%s': a managed model_runtime deployment requires artifact (a Hub repository or an "
                    "absolute package path)",
                    d->key);
        free_rep(r);
        return NULL;
    }
    r->managed = true;
    snprintf(r->served, sizeof r->served, "%s", d->key);
    char safe[KEY_IN_NAME + 1];
    safe_name(d->key, safe, sizeof safe);
    int pn = snprintf(placement, sizeof placement, "managed\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", d->artifact,
                      d->revision ? d->revision : "", device, profile, s->store, s->worker);
    make_rid(d->key, placement, i, r->rid);
    if (pn >= (int)sizeof placement ||
        snprintf(r->sock, sizeof r->sock, "%s/%s-%s.sock", s->sock_dir, safe, r->rid) >= (int)sizeof r->sock ||
        snprintf(r->log_path, sizeof r->log_path, "%s/%s-%d.log", s->log_dir, safe, i) >= (int)sizeof r->log_path) {
        vsr_err_set(err, VSR_E_INVALID, "deployment '%s': the artifact, store or state paths are too long", d->key);
        free_rep(r);
        return NULL;
    }
    snprintf(r->url, sizeof r->url, "http://localhost");
    snprintf(r->health_url, sizeof r->health_url, "http://localhost/health");
    r->argv = calloc(24, sizeof *r->argv);
    int k = 0, bad = !r->argv;
    if (!bad) {
        bad |= push_arg(r->argv, &k, s->worker) | push_arg(r->argv, &k, "serve") | push_arg(r->argv, &k, d->artifact);
        if (d->revision) bad |= push_arg(r->argv, &k, "--revision") | push_arg(r->argv, &k, d->revision);
        bad |= push_arg(r->argv, &k, "--device") | push_arg(r->argv, &k, device);
        if (s->store[0]) bad |= push_arg(r->argv, &k, "--store") | push_arg(r->argv, &k, s->store);
        bad |= push_arg(r->argv, &k, "--served-model-name") | push_arg(r->argv, &k, d->key);
        bad |= push_arg(r->argv, &k, "--uds") | push_arg(r->argv, &k, r->sock);
        /* the router accepts bodies up to 48 MiB; the reference's workers take 64 MiB */
        bad |= push_arg(r->argv, &k, "--max-request-bytes") | push_arg(r->argv, &k, "67108864");
        /* the deployment's profile, as the worker's own --profile (exact unless the YAML says) */
        bad |= push_arg(r->argv, &k, "--profile") | push_arg(r->argv, &k, profile);
    }
    r->argc = k;
    if (bad) {
        free_rep(r);
        vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        return NULL;
    }
    r->cpu = !strcmp(device, "cpu");
    r->st = RS_BACKOFF; /* due at once: next_start_ms = 0 */
    return r;
}

static void free_list(rep *r) {
    while (r) {
        rep *x = r->next;
        free_rep(r);
        r = x;
    }
}

/* Every replica of every used deployment, in config order, as a list into *out. */
static vsr_status plan(vsr_sup *s, const vsr_router_config *c, const char *const *used, int n_used, rep **out,
                       vsr_err *err) {
    *out = NULL;
    if (!c) return vsr_err_set(err, VSR_E_INVALID, "no router config");
    if (c->n_errors)
        return vsr_err_set(err, VSR_E_INVALID, "the router config %s has %d error%s; run vllm-sr validate",
                           c->file ? c->file : "", c->n_errors, c->n_errors == 1 ? "" : "s");
    for (int u = 0; u < n_used; u++)
        if (!used[u] || !vsr_router_deployment(c, used[u]))
            return vsr_err_set(err, VSR_E_NOT_FOUND, "Unknown model deployment '%s'", used[u] ? used[u] : "(null)");
    rep *head = NULL, **tail = &head;
    for (int di = 0; di < c->n_deployments; di++) {
        const vsr_rt_deployment *d = &c->deployments[di];
        bool is_used = false;
        for (int u = 0; u < n_used && !is_used; u++) is_used = !strcmp(used[u], d->key);
        if (!is_used) continue;
        int n = d->n_replicas ? d->n_replicas : 1;
        for (int i = 0; i < n; i++) {
            rep *r = make_rep(s, d, di, i, err);
            if (!r) {
                free_list(head);
                return err ? err->code : VSR_E_INVALID;
            }
            *tail = r;
            tail = &r->next;
        }
    }
    *out = head;
    return VSR_OK;
}

static vsr_status set_used(vsr_sup *s, const char *const *used, int n_used, vsr_err *err) {
    char **u = calloc((size_t)n_used + 1, sizeof *u);
    if (!u) return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    for (int i = 0; i < n_used; i++)
        if (!(u[i] = strdup(used[i]))) {
            free_argv(u);
            return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        }
    /* round-robin counters: one per used key, kept across reloads */
    dep_rr *rr = calloc((size_t)n_used + 1, sizeof *rr);
    if (!rr) {
        free_argv(u);
        return vsr_err_set(err, VSR_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_used; i++) {
        rr[i].key = u[i];
        for (int j = 0; j < s->n_rr; j++)
            if (!strcmp(s->rr[j].key, u[i])) rr[i].next = s->rr[j].next;
    }
    free_argv(s->used);
    free(s->rr);
    s->used = u;
    s->n_used = n_used;
    s->rr = rr;
    s->n_rr = n_used;
    return VSR_OK;
}

/* ---------------------------------------------------------------- processes */

static int cpu_processes(vsr_sup *s) {
    int n = 0;
    for (rep *r = s->reps; r; r = r->next)
        if (r->managed && !r->retired && r->cpu) n++;
    return n ? n : 1;
}

/* The next start after the current back-off, which then doubles (up to backoff_max_ms). */
static double schedule_retry(vsr_sup *s, rep *r, int64_t now) {
    double wait_s = r->backoff_ms / 1000.0;
    r->st = RS_BACKOFF;
    r->next_start_ms = now + r->backoff_ms;
    r->backoff_ms = r->backoff_ms * 2 > s->backoff_max_ms ? s->backoff_max_ms : r->backoff_ms * 2;
    return wait_s;
}

/* fork + exec on the monitor thread, lock held. Only async-signal-safe calls in the child. */
static void spawn(vsr_sup *s, rep *r, int64_t now) {
    free(r->argv[r->argc]), free(r->argv[r->argc + 1]);
    r->argv[r->argc] = r->argv[r->argc + 1] = NULL;
    if (r->cpu) { /* as the reference: a CPU worker gets ceil(cores / CPU workers) threads */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (cores < 1) cores = 1;
        int n = cpu_processes(s);
        char tbuf[24];
        snprintf(tbuf, sizeof tbuf, "%ld", (cores + n - 1) / n);
        r->argv[r->argc] = strdup("--threads");
        r->argv[r->argc + 1] = strdup(tbuf);
        if (!r->argv[r->argc] || !r->argv[r->argc + 1]) {
            free(r->argv[r->argc]), free(r->argv[r->argc + 1]);
            r->argv[r->argc] = r->argv[r->argc + 1] = NULL;
        }
    }
    int logfd = open(r->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
        int e = errno;
        slog(s, "deployment %s replica %d: cannot open the worker log %s: %s; retrying in %.1f s", r->key, r->ordinal,
             r->log_path, strerror(e), schedule_retry(s, r, now));
        return;
    }
    char head[4096];
    int hn = snprintf(head, sizeof head, "---- vllm-sr: starting replica %d of %s:", r->ordinal, r->key);
    for (int i = 0; r->argv[i] && hn < (int)sizeof head; i++)
        hn += snprintf(head + hn, sizeof head - (size_t)hn, " %s", r->argv[i]);
    if (hn < (int)sizeof head - 1) head[hn++] = '\n';
    if (write(logfd, head, (size_t)(hn < (int)sizeof head ? hn : (int)sizeof head - 1)) < 0) { /* best effort */
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1); /* the router died before prctl took effect */
        setpgid(0, 0);                      /* a terminal's ^C reaches the router only; it stops us */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGINT, SIG_DFL), signal(SIGHUP, SIG_DFL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        close_range(3, ~0U, 0); /* the router's listening sockets must not leak into workers */
        execv(r->argv[0], r->argv);
        static const char msg[] = "vllm-sr: cannot execute the worker ";
        if (write(2, msg, sizeof msg - 1) < 0 || write(2, r->argv[0], strlen(r->argv[0])) < 0 ||
            write(2, "\n", 1) < 0) { /* nothing more to do */
        }
        _exit(127);
    }
    int e = errno;
    close(logfd);
    if (pid < 0) {
        slog(s, "deployment %s replica %d: cannot start the worker: fork: %s; retrying in %.1f s", r->key, r->ordinal,
             strerror(e), schedule_retry(s, r, now));
        return;
    }
    if (r->spawned) r->restarts++;
    r->spawned = true;
    r->pid = pid;
    r->st = RS_STARTING;
    r->started_ms = now;
    r->ready_since_ms = 0;
    r->bad_since_ms = 0;
    r->kill_sent = false;
    slog(s, "deployment %s replica %d (%s): started worker pid %d on %s (log %s)", r->key, r->ordinal, r->rid, (int)pid,
         r->sock, r->log_path);
}

static void describe_exit(int ws, char *buf, size_t n) {
    if (WIFEXITED(ws)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(ws));
    else if (WIFSIGNALED(ws)) snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
    else snprintf(buf, n, "ended (wait status %d)", ws);
}

/* A worker was reaped: unless it was being stopped, schedule its restart with back-off. */
static void on_exit_rep(vsr_sup *s, rep *r, int ws, int64_t now) {
    char how[128];
    describe_exit(ws, how, sizeof how);
    pid_t pid = r->pid;
    r->pid = 0;
    if (r->retired || r->st == RS_STOPPING || s->stopping) {
        slog(s, "deployment %s replica %d: worker pid %d stopped (%s)", r->key, r->ordinal, (int)pid, how);
        r->st = RS_STOPPING;
        unlink(r->sock);
        return;
    }
    /* a worker that had been ready for the stable period starts over at the shortest back-off */
    if (r->ready_since_ms && now - r->ready_since_ms >= s->stable_ms) r->backoff_ms = s->backoff_min_ms;
    double wait_s = schedule_retry(s, r, now);
    slog(s, "deployment %s replica %d: worker pid %d %s; restarting in %.1f s (log %s)", r->key, r->ordinal, (int)pid,
         how, wait_s, r->log_path);
}

static void reap(vsr_sup *s, int64_t now) {
    for (rep *r = s->reps; r; r = r->next) {
        if (r->pid <= 0) continue;
        int ws;
        pid_t p = waitpid(r->pid, &ws, WNOHANG);
        if (p == r->pid) on_exit_rep(s, r, ws, now);
        else if (p < 0 && errno == ECHILD) on_exit_rep(s, r, 0, now); /* reaped elsewhere (SIGCHLD ignored) */
    }
}

/* ---------------------------------------------------------------- health */

static size_t discard(char *p, size_t sz, size_t n, void *u) { return sz * n; }

/* GET url (over sock when set): the HTTP status, or -1 with why. */
static long http_status(CURL *h, const char *sock, const char *url, long timeout_ms, char *why, size_t nwhy) {
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (sock && *sock) curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* health checks never go through a proxy */
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        snprintf(why, nwhy, "%s", curl_easy_strerror(rc));
        return -1;
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    snprintf(why, nwhy, "HTTP %ld", code);
    return code;
}

static bool has_ready_new(vsr_sup *s, const char *key) {
    for (rep *r = s->reps; r; r = r->next)
        if (!r->retired && !strcmp(r->key, key) && (r->st == RS_READY || r->st == RS_A_READY)) return true;
    return false;
}

static bool key_used(vsr_sup *s, const char *key) {
    for (int i = 0; i < s->n_used; i++)
        if (!strcmp(s->used[i], key)) return true;
    return false;
}

/* Applies one health answer (lock held). */
static void health_result(vsr_sup *s, rep *r, long code, const char *why, int64_t now) {
    bool ok = code == 200;
    if (!r->managed) {
        rstate was = r->st;
        r->st = ok ? RS_A_READY : RS_A_DOWN;
        if (was != r->st && !(was == RS_A_DOWN && !r->ever_ready && !ok))
            slog(s, "deployment %s replica %d: attached worker %s%s is %s (%s)", r->key, r->ordinal,
                 r->sock[0] ? "unix://" : "", r->sock[0] ? r->sock : r->url, ok ? "ready" : "down", why);
        if (ok) r->ever_ready = true;
        return;
    }
    if (r->pid <= 0 || r->st == RS_STOPPING) return;
    if (ok) {
        if (r->st != RS_READY) {
            slog(s, "deployment %s replica %d: worker pid %d is ready%s", r->key, r->ordinal, (int)r->pid,
                 r->st == RS_STARTING ? "" : " again");
            if (r->st == RS_STARTING) r->ready_since_ms = now;
            r->st = RS_READY;
        }
        r->bad_since_ms = 0;
        r->ever_ready = true;
        if (r->ready_since_ms && now - r->ready_since_ms >= s->stable_ms) r->backoff_ms = s->backoff_min_ms;
        return;
    }
    if (r->st == RS_READY) {
        slog(s, "deployment %s replica %d: worker pid %d failed its health check (%s)", r->key, r->ordinal, (int)r->pid,
             why);
        r->st = RS_UNHEALTHY;
    }
    int64_t since = r->st == RS_STARTING ? r->started_ms : r->bad_since_ms ? r->bad_since_ms : (r->bad_since_ms = now);
    if (!r->kill_sent && now - since >= s->ready_timeout_ms) {
        slog(s, "deployment %s replica %d: worker pid %d not ready after %.1f s (%s); killing it", r->key, r->ordinal,
             (int)r->pid, (now - since) / 1000.0, why);
        kill(r->pid, SIGKILL);
        r->kill_sent = true;
    }
}

/* One round of health checks; the lock is dropped around each request. */
static void health_round(vsr_sup *s, CURL *h) {
    int n = 0;
    for (rep *r = s->reps; r; r = r->next) n++;
    rep **todo = calloc((size_t)n + 1, sizeof *todo);
    if (!todo) return;
    int k = 0;
    for (rep *r = s->reps; r; r = r->next)
        if ((!r->managed || (r->pid > 0 && r->st != RS_STOPPING)) && !(r->retired && r->drain_from_ms)) todo[k++] = r;
    for (int i = 0; i < k && !s->stopping; i++) {
        rep *r = todo[i];
        char sock[256], url[600], why[256];
        snprintf(sock, sizeof sock, "%s", r->sock);
        snprintf(url, sizeof url, "%s", r->health_url);
        pthread_mutex_unlock(&s->mu);
        long timeout = s->health_ms * 4 < 2000 ? 2000 : s->health_ms * 4;
        long code = http_status(h, sock, url, timeout, why, sizeof why);
        pthread_mutex_lock(&s->mu);
        health_result(s, r, code, why, now_ms());
    }
    free(todo);
}

/* ---------------------------------------------------------------- retirement */

static void retire_step(vsr_sup *s, int64_t now) {
    for (rep **pp = &s->reps; *pp;) {
        rep *r = *pp;
        if (!r->retired) {
            pp = &r->next;
            continue;
        }
        if (!r->drain_from_ms && (!key_used(s, r->key) || has_ready_new(s, r->key))) r->drain_from_ms = now;
        if (r->drain_from_ms && r->pid > 0 && r->st != RS_STOPPING &&
            (r->inflight == 0 || now - r->drain_from_ms >= s->grace_ms)) {
            slog(s, "deployment %s replica %d (%s): retired by reload; SIGTERM to worker pid %d (%d call%s in flight)",
                 r->key, r->ordinal, r->rid, (int)r->pid, r->inflight, r->inflight == 1 ? "" : "s");
            kill(r->pid, SIGTERM);
            r->st = RS_STOPPING;
            r->term_ms = now;
        }
        if (r->pid > 0 && r->st == RS_STOPPING && !r->kill_sent && now - r->term_ms >= s->grace_ms) {
            slog(s, "deployment %s replica %d: worker pid %d did not stop within %.1f s of SIGTERM; SIGKILL", r->key,
                 r->ordinal, (int)r->pid, s->grace_ms / 1000.0);
            kill(r->pid, SIGKILL);
            r->kill_sent = true;
        }
        bool gone = r->pid <= 0 && r->drain_from_ms && (r->managed || r->inflight == 0 ||
                                                         now - r->drain_from_ms >= s->grace_ms);
        if (gone) {
            *pp = r->next;
            free_rep(r);
        } else pp = &r->next;
    }
}

/* ---------------------------------------------------------------- monitor */

/* Another instance of r's placement (a retired replica still stopping after a rollback reload)
 * has a worker on r's socket: r starts once that one is reaped, since its exit removes the socket
 * (on_exit_rep; vllm-srun removes it too) and vllm-srun refuses a path that a process listens on. */
static bool socket_in_use(vsr_sup *s, const rep *r) {
    for (rep *o = s->reps; o; o = o->next)
        if (o != r && o->pid > 0 && !strcmp(o->sock, r->sock)) return true;
    return false;
}

static void sleep_locked(vsr_sup *s, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &t);
}

static void stop_all(vsr_sup *s) {
    int64_t t0 = now_ms();
    int n = 0;
    for (rep *r = s->reps; r; r = r->next)
        if (r->pid > 0) {
            kill(r->pid, SIGTERM);
            r->st = RS_STOPPING;
            n++;
        }
    if (n) slog(s, "stopping %d worker%s (SIGTERM; SIGKILL after %.1f s)", n, n == 1 ? "" : "s", s->grace_ms / 1000.0);
    for (;;) {
        int64_t now = now_ms();
        reap(s, now);
        bool any = false;
        for (rep *r = s->reps; r; r = r->next) any |= r->pid > 0;
        if (!any) break;
        if (now - t0 >= s->grace_ms) {
            for (rep *r = s->reps; r; r = r->next) {
                if (r->pid <= 0) continue;
                slog(s, "deployment %s replica %d: worker pid %d did not stop within %.1f s of SIGTERM; SIGKILL",
                     r->key, r->ordinal, (int)r->pid, s->grace_ms / 1000.0);
                kill(r->pid, SIGKILL);
                int ws;
                while (waitpid(r->pid, &ws, 0) < 0 && errno == EINTR) {
                }
                on_exit_rep(s, r, ws, now_ms());
            }
            break;
        }
        pthread_mutex_unlock(&s->mu);
        usleep(20 * 1000);
        pthread_mutex_lock(&s->mu);
    }
}

static void *monitor(void *arg) {
    vsr_sup *s = arg;
    CURL *h = curl_easy_init();
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        int64_t now = now_ms();
        reap(s, now);
        for (rep *r = s->reps; r; r = r->next)
            if (r->managed && !r->retired && r->pid <= 0 && r->st == RS_BACKOFF && now >= r->next_start_ms &&
                !socket_in_use(s, r))
                spawn(s, r, now);
        retire_step(s, now);
        if (h && now >= s->next_health_ms) {
            health_round(s, h);
            s->next_health_ms = now_ms() + s->health_ms;
        }
        pthread_cond_broadcast(&s->cv);
        if (!s->stopping) sleep_locked(s, TICK_MS);
    }
    stop_all(s);
    s->done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (h) curl_easy_cleanup(h);
    return NULL;
}

/* ---------------------------------------------------------------- API */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static vsr_status resolve_dirs(vsr_sup *s, const vsr_sup_opts *o, vsr_err *err) {
    const char *sd = o && o->state_dir ? o->state_dir : getenv("VLLM_SR_STATE_DIR");
    if (sd && *sd) snprintf(s->state_dir, sizeof s->state_dir, "%s", sd);
    else {
        const char *home = getenv("HOME");
        snprintf(s->state_dir, sizeof s->state_dir, "%s/.local/state/vllm-sr", home && *home ? home : "/tmp");
    }
    if (strlen(s->state_dir) > 3000)
        return vsr_err_set(err, VSR_E_INVALID, "state folder %.60s...: the path is longer than 3000 bytes", s->state_dir);
    vsr_status st = mkdir_p(s->state_dir, 0700, err);
    if (st) return st;
    if (snprintf(s->log_dir, sizeof s->log_dir, "%s/logs", s->state_dir) >= (int)sizeof s->log_dir)
        return VSR_E_INVALID; /* cannot happen: the state folder is at most 3000 bytes */
    if ((st = private_dir("log directory", s->log_dir, err))) return st;
    /* the longest socket name: key (KEY_IN_NAME) + "-r-" + 12 hex + ".sock" */
    size_t longest = KEY_IN_NAME + 1 + 14 + 5;
    if (strlen(s->state_dir) + strlen("/sockets/") + longest > SOCK_PATH_MAX) {
        char hex[65];
        vsr_sha256_hex(s->state_dir, strlen(s->state_dir), hex);
        snprintf(s->sock_dir, sizeof s->sock_dir, "/tmp/vsr-%.8s", hex);
    } else if (snprintf(s->sock_dir, sizeof s->sock_dir, "%s/sockets", s->state_dir) >= (int)sizeof s->sock_dir)
        return VSR_E_INVALID; /* cannot happen: checked above */
    return private_dir("socket directory", s->sock_dir, err);
}

static vsr_status resolve_worker(vsr_sup *s, const vsr_sup_opts *o, vsr_err *err) {
    if (o && o->worker_bin) snprintf(s->worker, sizeof s->worker, "%s", o->worker_bin);
    else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return vsr_err_set(err, VSR_E_IO, "cannot find this program's path: %s", strerror(errno));
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) *slash = 0;
        if (snprintf(s->worker, sizeof s->worker, "%s/vllm-srun", self) >= (int)sizeof s->worker)
            return vsr_err_set(err, VSR_E_INVALID, "this program's path is too long: %s", self);
    }
    if (access(s->worker, X_OK))
        return vsr_err_set(err, VSR_E_NOT_FOUND, "the worker %s is missing or not executable", s->worker);
    return VSR_OK;
}

vsr_sup *vsr_sup_start(const vsr_router_config *c, const char *const *used, int n_used, const vsr_sup_opts *o,
                       vsr_err *err) {
    vsr_sup *s = calloc(1, sizeof *s);
    if (!s) {
        vsr_err_set(err, VSR_E_NOMEM, "out of memory");
        return NULL;
    }
#define DEF(field, v) ((o && o->field > 0) ? o->field : (v))
    s->grace_ms = DEF(grace_ms, 10000);
    s->ready_timeout_ms = DEF(ready_timeout_ms, 600000);
    s->health_ms = DEF(health_interval_ms, 500);
    s->backoff_min_ms = DEF(backoff_min_ms, 1000);
    s->backoff_max_ms = DEF(backoff_max_ms, 60000);
    s->stable_ms = DEF(stable_ms, 60000);
#undef DEF
    if (s->backoff_max_ms < s->backoff_min_ms) s->backoff_max_ms = s->backoff_min_ms;
    s->quiet = o && o->quiet;
    s->log = o ? o->log : NULL;
    s->log_ctx = o ? o->log_ctx : NULL;
    if (o && o->store_dir) snprintf(s->store, sizeof s->store, "%s", o->store_dir);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (n_used < 0 || (n_used && !used)) {
        vsr_err_set(err, VSR_E_INVALID, "the used deployments must be a list of keys");
        goto fail;
    }
    if (resolve_worker(s, o, err) || resolve_dirs(s, o, err) || plan(s, c, used, n_used, &s->reps, err) ||
        set_used(s, used, n_used, err))
        goto fail;
    pthread_once(&curl_once, curl_init_once);
    if (pthread_create(&s->thr, NULL, monitor, s)) {
        vsr_err_set(err, VSR_E_INTERNAL, "cannot start the supervisor thread");
        goto fail;
    }
    return s;
fail:
    free_list(s->reps);
    free_argv(s->used);
    free(s->rr);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
}

static void fill_target(const rep *r, vsr_sup_target *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->uds_path, sizeof t->uds_path, "%s", r->sock);
    snprintf(t->url, sizeof t->url, "%s", r->url);
    snprintf(t->served_name, sizeof t->served_name, "%s", r->served);
    t->deployment_index = r->dep_index;
    t->replica = r->ordinal;
    t->id = r->id;
}

static bool pickable(const rep *r) { return r->st == RS_READY || r->st == RS_A_READY; }

bool vsr_sup_pick(vsr_sup *s, const char *deployment, vsr_sup_target *out) {
    if (!s || !deployment) return false;
    pthread_mutex_lock(&s->mu);
    bool found = false;
    dep_rr *rr = NULL;
    for (int i = 0; i < s->n_rr; i++)
        if (!strcmp(s->rr[i].key, deployment)) rr = &s->rr[i];
    if (rr && !s->stopping) {
        /* new replicas first; retired ones only while no new one is ready (reload keeps serving) */
        for (int pass = 0; pass < 2 && !found; pass++) {
            int n = 0;
            for (rep *r = s->reps; r; r = r->next)
                if (r->retired == (pass == 1) && !r->drain_from_ms && !strcmp(r->key, deployment) && pickable(r)) n++;
            if (!n) continue;
            int want = (int)(rr->next++ % (unsigned)n), k = 0;
            for (rep *r = s->reps; r; r = r->next)
                if (r->retired == (pass == 1) && !r->drain_from_ms && !strcmp(r->key, deployment) && pickable(r) &&
                    k++ == want) {
                    r->inflight++;
                    fill_target(r, out);
                    found = true;
                    break;
                }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return found;
}

static rep *find_id(vsr_sup *s, unsigned long long id) {
    for (rep *r = s->reps; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

void vsr_sup_release(vsr_sup *s, const vsr_sup_target *t) {
    if (!s || !t) return;
    pthread_mutex_lock(&s->mu);
    rep *r = find_id(s, t->id);
    if (r && r->inflight > 0) r->inflight--;
    pthread_mutex_unlock(&s->mu);
}

void vsr_sup_report_failure(vsr_sup *s, const vsr_sup_target *t) {
    if (!s || !t) return;
    pthread_mutex_lock(&s->mu);
    rep *r = find_id(s, t->id);
    if (r && r->st == RS_READY) {
        r->st = RS_UNHEALTHY;
        r->bad_since_ms = now_ms();
        slog(s, "deployment %s replica %d: a call failed at transport level; not picked until its next health check",
             r->key, r->ordinal);
    } else if (r && r->st == RS_A_READY) {
        r->st = RS_A_DOWN;
        slog(s, "deployment %s replica %d: a call to the attached worker failed; not picked until its next health check",
             r->key, r->ordinal);
    }
    s->next_health_ms = 0; /* check soon */
    pthread_mutex_unlock(&s->mu);
}

vsr_status vsr_sup_reload(vsr_sup *s, const vsr_router_config *c, const char *const *used, int n_used, vsr_err *err) {
    if (!s) return vsr_err_set(err, VSR_E_INVALID, "no supervisor");
    if (n_used < 0 || (n_used && !used))
        return vsr_err_set(err, VSR_E_INVALID, "the used deployments must be a list of keys");
    pthread_mutex_lock(&s->mu);
    rep *fresh = NULL;
    vsr_status st = plan(s, c, used, n_used, &fresh, err);
    if (!st) st = set_used(s, used, n_used, err);
    if (st) {
        pthread_mutex_unlock(&s->mu);
        free_list(fresh);
        return st;
    }
    /* keep: same key and replica id (placement and ordinal) among the live replicas, and among
     * the retired ones not yet sent SIGTERM (a rollback while the old worker still serves or
     * drains: it goes back in service; a second worker on its socket would lose that socket when
     * the first one exits). At most one replica per key and id is live or such a retired one. */
    int kept = 0, added = 0, retired = 0;
    for (rep *r = s->reps; r; r = r->next) {
        if (r->retired && r->st == RS_STOPPING) continue;
        rep *match = NULL;
        for (rep *f = fresh; f && !match; f = f->next)
            if (!f->retired && !strcmp(f->key, r->key) && !strcmp(f->rid, r->rid)) match = f;
        if (match) {
            if (r->retired) {
                slog(s, "deployment %s replica %d (%s): the reload brings its placement back; the retired replica "
                        "returns to service",
                     r->key, r->ordinal, r->rid);
                r->retired = false;
                r->drain_from_ms = 0;
            }
            r->dep_index = match->dep_index;
            match->retired = true; /* consumed */
            kept++;
        } else if (!r->retired) {
            r->retired = true;
            retired++;
        }
    }
    rep **tail = &s->reps;
    while (*tail) tail = &(*tail)->next;
    while (fresh) {
        rep *f = fresh;
        fresh = f->next;
        f->next = NULL;
        if (f->retired) {
            free_rep(f);
            continue;
        }
        *tail = f;
        tail = &f->next;
        added++;
    }
    slog(s, "reload: %d replica(s) kept, %d started, %d retired", kept, added, retired);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return VSR_OK;
}

bool vsr_sup_wait_ready(vsr_sup *s, int timeout_ms) {
    if (!s) return false;
    int64_t end = now_ms() + timeout_ms;
    pthread_mutex_lock(&s->mu);
    bool ok = false;
    for (;;) {
        ok = true;
        for (int i = 0; i < s->n_used && ok; i++) ok = has_ready_new(s, s->used[i]);
        if (ok || s->stopping || now_ms() >= end) break;
        int64_t left = end - now_ms();
        sleep_locked(s, left < TICK_MS ? (int)(left > 0 ? left : 1) : TICK_MS);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void vsr_sup_foreach(vsr_sup *s,
                     void (*cb)(void *ctx, const char *deployment, int replica, bool ready, int restarts,
                                const char *state),
                     void *ctx) {
    if (!s || !cb) return;
    pthread_mutex_lock(&s->mu);
    for (rep *r = s->reps; r; r = r->next)
        if (!r->retired) cb(ctx, r->key, r->ordinal, pickable(r), r->restarts, state_names[r->st]);
    pthread_mutex_unlock(&s->mu);
}

void vsr_sup_stop(vsr_sup *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thr, NULL);
    free_list(s->reps);
    free_argv(s->used);
    free(s->rr);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
