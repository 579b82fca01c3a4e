/* The router's worker supervisor (vsr/supervisor.h) with real processes:
 *  - a real `vllm-srun serve` on the built-in d3-tiny fixture: started on a Unix socket in a
 *    0700 directory, ready over GET /health, killed with SIGKILL and restarted (restarts = 1),
 *    stopped with SIGTERM;
 *  - a stand-in worker (a shell script that execs tests/tools/openai_upstream on the --uds it
 *    is given, or exits, hangs, or ignores SIGTERM, as the test says) for what a real worker
 *    will not do on demand: back-off 0.1 -> 0.2 -> 0.4 -> 0.4 s and its reset after a stable
 *    period, the ready timeout, SIGKILL after the grace period, round robin, report_failure,
 *    reload (kept, retired-after-replacement-ready, rollback), and death with the router
 *    (PR_SET_PDEATHSIG);
 *  - attached deployments: health-checked, never started;
 *  - every refusal of vsr_sup_start / vsr_sup_reload. */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "vsr/router.h"
#include "vsr/supervisor.h"

static char g_build[PATH_MAX], g_worker[PATH_MAX + 16], g_upstream[PATH_MAX + 32], g_fake[PATH_MAX + 32],
    g_fake_dir[PATH_MAX];

/* ---- captured log lines ---- */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *log_buf;
static size_t log_len;

static void cap_log(void *ctx, const char *line) {
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(line);
    char *b = realloc(log_buf, log_len + n + 2);
    if (b) {
        memcpy(b + log_len, line, n);
        b[log_len + n] = '\n';
        log_len += n + 1;
        b[log_len] = 0;
        log_buf = b;
    }
    pthread_mutex_unlock(&log_mu);
    if (getenv("VSR_TEST_VERBOSE")) fprintf(stderr, "  log: %s\n", line);
}
static void log_clear(void) {
    pthread_mutex_lock(&log_mu);
    log_len = 0;
    if (log_buf) log_buf[0] = 0;
    pthread_mutex_unlock(&log_mu);
}
static bool log_has(const char *needle) {
    pthread_mutex_lock(&log_mu);
    bool r = log_buf && strstr(log_buf, needle);
    pthread_mutex_unlock(&log_mu);
    return r;
}
/* The supervisor's log so far on stderr, when a timing check fails (what the monitor did meanwhile). */
static void log_dump(const char *why) {
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "supervisor log (%s):\n%s", why, log_buf ? log_buf : "");
    pthread_mutex_unlock(&log_mu);
}
static int log_count(const char *needle) {
    pthread_mutex_lock(&log_mu);
    int n = 0;
    for (const char *p = log_buf; p && (p = strstr(p, needle)); p++) n++;
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* ---- helpers ---- */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static void msleep(int ms) { usleep((useconds_t)ms * 1000); }

static vsr_router_config *parse(const char *yaml) {
    vsr_router_options opt = {.store_dir = test_tmpdir()};
    return vsr_router_config_parse(yaml, strlen(yaml), "sup.yaml", &opt);
}

static vsr_sup_opts fake_opts(const char *state) {
    vsr_sup_opts o = {.state_dir = state,
                      .worker_bin = g_fake,
                      .grace_ms = 2000,
                      .ready_timeout_ms = 20000,
                      .health_interval_ms = 50,
                      .backoff_min_ms = 100,
                      .backoff_max_ms = 400,
                      .stable_ms = 300,
                      .log = cap_log};
    return o;
}

/* Forgets the starts recorded for `name` (each test counts its own). */
static void fresh(const char *name) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/spawns-%s", g_fake_dir, name);
    unlink(p);
}

static void set_mode(const char *name, const char *mode) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/mode-%s", g_fake_dir, name);
    test_write_file(p, mode, strlen(mode));
}

/* Lines of spawns-<name>: "<ns> <pid> <args...>" per start of the stand-in. */
static int spawns(const char *name, double *t, int *pids, int max) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/spawns-%s", g_fake_dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        long long ns = 0;
        int pid = 0;
        if (sscanf(line, "%lld %d", &ns, &pid) == 2 && n < max) {
            if (t) t[n] = ns * 1e-9;
            if (pids) pids[n] = pid;
        }
        n++;
    }
    fclose(f);
    return n;
}
static int last_pid(const char *name) {
    int pids[64] = {0};
    int n = spawns(name, NULL, pids, 64);
    return n > 0 && n <= 64 ? pids[n - 1] : 0;
}

/* A process is gone when kill(0) fails or it is a zombie (nobody reaped it yet). */
static bool alive(int pid) {
    if (pid <= 0 || kill(pid, 0)) return false;
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z';
}
static bool wait_gone(int pid, int ms) {
    for (int i = 0; i < ms / 10; i++) {
        if (!alive(pid)) return true;
        msleep(10);
    }
    return !alive(pid);
}

typedef struct rinfo {
    const char *key;
    int replica;
    bool found, ready;
    int restarts;
    char state[32];
    int n;
} rinfo;
static void rinfo_cb(void *ctx, const char *dep, int replica, bool ready, int restarts, const char *state) {
    rinfo *ri = ctx;
    ri->n++;
    if (strcmp(dep, ri->key) || replica != ri->replica) return;
    ri->found = true;
    ri->ready = ready;
    ri->restarts = restarts;
    snprintf(ri->state, sizeof ri->state, "%s", state);
}
static rinfo info(vsr_sup *s, const char *key, int replica) {
    rinfo ri = {.key = key, .replica = replica};
    vsr_sup_foreach(s, rinfo_cb, &ri);
    return ri;
}
/* Waits until the replica's state is `state`. */
static bool wait_state(vsr_sup *s, const char *key, int replica, const char *state, int ms) {
    for (int i = 0; i < ms / 10; i++) {
        rinfo ri = info(s, key, replica);
        if (ri.found && !strcmp(ri.state, state)) return true;
        msleep(10);
    }
    return false;
}

static size_t sink(char *p, size_t sz, size_t n, void *u) {
    char *buf = u;
    size_t have = strlen(buf), add = sz * n;
    if (have + add < 4096) {
        memcpy(buf + have, p, add);
        buf[have + add] = 0;
    }
    return sz * n;
}
/* GET url over sock; the status, body into out (4096). */
static long get_uds(const char *sock, const char *url, char *out) {
    out[0] = 0;
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (sock && *sock) curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long code = -1;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

typedef struct sinkbuf {
    char *buf;
    size_t cap, len;
} sinkbuf;
static size_t sink_cap(char *p, size_t sz, size_t n, void *u) {
    sinkbuf *b = u;
    size_t add = sz * n;
    if (b->len + add < b->cap) {
        memcpy(b->buf + b->len, p, add);
        b->len += add;
        b->buf[b->len] = 0;
    }
    return sz * n;
}
/* GET (body NULL) or POST body to url over sock; the status, the body into out (cap bytes). */
static long http_uds(const char *sock, const char *url, const char *body, char *out, size_t cap) {
    out[0] = 0;
    sinkbuf b = {out, cap, 0};
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (sock && *sock) curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    if (body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_cap);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    long code = -1;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

/* A directory name under the test's tmp dir. */
static const char *tdir(const char *name) {
    static char bufs[8][PATH_MAX];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", test_tmpdir(), name);
    return b;
}

/* Live child processes of this one (the real worker's pid), from /proc. */
static int child_pids(int *out, int max) {
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *de;
    while (n < max && (de = readdir(d))) {
        int pid = atoi(de->d_name);
        if (pid <= 0) continue;
        char p[64], buf[512];
        snprintf(p, sizeof p, "/proc/%d/stat", pid);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        const char *rp = strrchr(buf, ')');
        char st;
        int ppid;
        if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == (int)getpid() && st != 'Z') out[n++] = pid;
    }
    closedir(d);
    return n;
}

static const char *FAKE_SH =
    "#!/bin/sh\n"
    "# a stand-in for `vllm-srun serve`: records its start, then does what mode-<name> says\n"
    "name=x; sock=; prev=\n"
    "for a in \"$@\"; do case \"$prev\" in --uds) sock=$a;; --served-model-name) name=$a;; esac; prev=$a; done\n"
    "echo \"$(date +%s%N) $$ $*\" >> \"$FAKE_DIR/spawns-$name\"\n"
    "mode=$(cat \"$FAKE_DIR/mode-$name\" 2>/dev/null || echo serve)\n"
    "case \"$mode\" in\n"
    "  exit3) exit 3;;\n"
    "  hang) exec sleep 1000;;\n"
    "  slow) sleep 0.6; exec \"$UPSTREAM\" --name \"$name\" --uds \"$sock\";;\n"
    "  ignoreterm) trap '' TERM; exec \"$UPSTREAM\" --name \"$name\" --uds \"$sock\";;\n"
    "  *) exec \"$UPSTREAM\" --name \"$name\" --uds \"$sock\";;\n"
    "esac\n";

static void setup(void) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *sl = strrchr(self, '/'); /* .../BUILD/tests/test_x */
    if (sl) *sl = 0;
    sl = strrchr(self, '/');
    if (sl) *sl = 0;
    snprintf(g_build, sizeof g_build, "%s", self);
    const char *vb = getenv("VSR_BIN");
    if (vb && *vb) snprintf(g_worker, sizeof g_worker, "%s", vb);
    else snprintf(g_worker, sizeof g_worker, "%s/vllm-srun", g_build);
    snprintf(g_upstream, sizeof g_upstream, "%s/tests/openai_upstream", g_build);
    snprintf(g_fake_dir, sizeof g_fake_dir, "%s/fake", test_tmpdir());
    mkdir(g_fake_dir, 0755);
    snprintf(g_fake, sizeof g_fake, "%s/fake_worker.sh", g_fake_dir);
    test_write_file(g_fake, FAKE_SH, strlen(FAKE_SH));
    chmod(g_fake, 0755);
    setenv("FAKE_DIR", g_fake_dir, 1);
    setenv("UPSTREAM", g_upstream, 1);
    if (access(g_upstream, X_OK) || access(g_worker, X_OK)) {
        fprintf(stderr, "FAIL: %s or %s is not built\n", g_upstream, g_worker);
        exit(1);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---------------------------------------------------------------- refusals */

static const char *ONE_FAKE = "global:\n"
                              "  model_catalog:\n"
                              "    deployments:\n"
                              "      w:\n"
                              "        provider: model_runtime\n"
                              "        artifact: /pkg/w\n"
                              "        device: cpu\n";

static vsr_status start_err(const vsr_router_config *c, const char *const *used, int n, const vsr_sup_opts *o,
                            vsr_err *e) {
    memset(e, 0, sizeof *e);
    vsr_sup *s = vsr_sup_start(c, used, n, o, e);
    if (s) {
        vsr_sup_stop(s);
        return VSR_OK;
    }
    return e->code;
}

TEST(refusals) {
    fresh("w");
    vsr_err e;
    vsr_router_config *c = parse(ONE_FAKE);
    CHECK(c && c->n_errors == 0);
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(tdir("st-ref"));

    vsr_sup_opts ob = o;
    ob.worker_bin = "/nonexistent/vllm-srun";
    CHECK_ERR(start_err(c, used, 1, &ob, &e), e, VSR_E_NOT_FOUND,
              "the worker /nonexistent/vllm-srun is missing or not executable");

    const char *nope[] = {"nope"};
    CHECK_ERR(start_err(c, nope, 1, &o, &e), e, VSR_E_NOT_FOUND, "Unknown model deployment 'nope'");
    CHECK_ERR(start_err(c, NULL, 1, &o, &e), e, VSR_E_INVALID, "the used deployments must be a list of keys");
    CHECK_ERR(start_err(NULL, used, 1, &o, &e), e, VSR_E_INVALID, "no router config");

    vsr_router_config *bad = parse("global:\n  model_catalog:\n    deployments:\n      w:\n        provider: x\n");
    CHECK(bad && bad->n_errors > 0);
    CHECK_ERR(start_err(bad, used, 1, &o, &e), e, VSR_E_INVALID, "error");
    CHECK(strstr(e.msg, "run vllm-sr validate") != NULL);
    vsr_router_config_free(bad);

    /* a profile vllm-srun does not serve: the config loader refuses it (so start does, pointing at
     * validate); a hand-built config that slips past the loader is refused by the supervisor */
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "%s        profile: max_speed\n", ONE_FAKE);
    vsr_router_config *prof = parse(yaml);
    CHECK(prof && prof->n_errors == 1 &&
          strstr(prof->errors[0].msg, "deployment 'w': unknown profile 'max_speed'; available: batching, exact"));
    CHECK_ERR(start_err(prof, used, 1, &o, &e), e, VSR_E_INVALID, "has 1 error; run vllm-sr validate");
    vsr_router_config_free(prof);
    vsr_rt_deployment dp = {.key = "w", .provider = VSR_RT_MODEL_RUNTIME, .device = "cpu", .artifact = "/pkg/w",
                            .profile = "max_speed"};
    vsr_router_config handp = {.n_deployments = 1, .deployments = &dp};
    CHECK_ERR(start_err(&handp, used, 1, &o, &e), e, VSR_E_UNSUPPORTED,
              "deployment 'w': unknown profile 'max_speed'; available: batching, exact");

    vsr_router_config *http = parse("global:\n  model_catalog:\n    deployments:\n      w:\n        provider: http\n"
                                    "        replicas:\n          - {device: cpu}\n");
    CHECK(http && http->n_errors == 0);
    CHECK_ERR(start_err(http, used, 1, &o, &e), e, VSR_E_INVALID,
              "deployment 'w' replica 0: provider http needs an endpoint (it is never started)");
    vsr_router_config_free(http);

    /* a managed deployment without artifact (the config loader refuses it first; built by hand) */
    vsr_rt_deployment d = {.key = "w", .provider = VSR_RT_MODEL_RUNTIME, .device = "cpu", .profile = "exact"};
    vsr_router_config hand = {.n_deployments = 1, .deployments = &d};
    CHECK_ERR(start_err(&hand, used, 1, &o, &e), e, VSR_E_INVALID,
              "deployment 'w': a managed model_runtime deployment requires artifact (a Hub repository or an absolute "
              "package path)");
    /* paths that cannot fit */
    static char longart[13000];
    longart[0] = '/';
    memset(longart + 1, 'a', sizeof longart - 2);
    d.artifact = longart;
    CHECK_ERR(start_err(&hand, used, 1, &o, &e), e, VSR_E_INVALID,
              "deployment 'w': the artifact, store or state paths are too long");

    /* the state folder */
    test_write_file(tdir("afile"), "x", 1);
    vsr_sup_opts os = o;
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/state", tdir("afile"));
    os.state_dir = sub;
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_IO, "cannot create the state folder");
    static char longstate[3100];
    memset(longstate, 'b', sizeof longstate - 1);
    longstate[0] = '/';
    os.state_dir = longstate;
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID, "the path is longer than 3000 bytes");

    /* the socket directory: a symlink, a file, mode 0755, another user's */
    const char *st = tdir("st-sock");
    mkdir(st, 0700);
    os.state_dir = st;
    char sock_dir[PATH_MAX + 16], target[PATH_MAX];
    snprintf(sock_dir, sizeof sock_dir, "%s/sockets", st);
    snprintf(target, sizeof target, "%s/elsewhere", st);
    mkdir(target, 0700);
    CHECK(symlink(target, sock_dir) == 0);
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID,
              "is a symbolic link; refusing it (it must be a private directory)");
    CHECK(strstr(e.msg, "socket directory ") && strstr(e.msg, "/sockets"));
    unlink(sock_dir);
    test_write_file(sock_dir, "x", 1);
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID, "/sockets exists and is not a directory");
    unlink(sock_dir);
    mkdir(sock_dir, 0755);
    chmod(sock_dir, 0755);
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID, "has mode 0755; it must be private (0700)");
    chmod(sock_dir, 0700);
    if (geteuid() == 0) { /* only root can give a directory away */
        CHECK(chown(sock_dir, 65534, 65534) == 0);
        CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID,
                  "belongs to uid 65534, not this user (uid 0); refusing it");
        CHECK(chown(sock_dir, 0, 0) == 0);
    } else printf("note: not root; the other-user socket directory refusal is checked only as root\n");
    /* the log directory: a symlink */
    char log_dir[PATH_MAX + 16];
    snprintf(log_dir, sizeof log_dir, "%s/logs", st);
    rmdir(log_dir);
    CHECK(symlink(target, log_dir) == 0);
    CHECK_ERR(start_err(c, used, 1, &os, &e), e, VSR_E_INVALID, "log directory ");
    CHECK(strstr(e.msg, "is a symbolic link") != NULL);
    unlink(log_dir);
    CHECK_MSG(start_err(c, used, 1, &os, &e) == VSR_OK, "%s", e.msg); /* all put right: it starts */

    /* reload refusals leave everything as it was */
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (s) {
        CHECK(vsr_sup_wait_ready(s, 10000));
        int pid = last_pid("w");
        CHECK_ERR(vsr_sup_reload(s, c, nope, 1, &e), e, VSR_E_NOT_FOUND, "Unknown model deployment 'nope'");
        CHECK_ERR(vsr_sup_reload(s, NULL, used, 1, &e), e, VSR_E_INVALID, "no router config");
        CHECK_ERR(vsr_sup_reload(s, c, NULL, 2, &e), e, VSR_E_INVALID, "the used deployments must be a list of keys");
        msleep(200);
        rinfo ri = info(s, "w", 0);
        CHECK(ri.found && ri.ready && ri.n == 1 && last_pid("w") == pid && alive(pid));
        vsr_sup_stop(s);
    }
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- a real worker */

/* The built-in d3-tiny installed in a fresh store and the config of one managed CPU deployment
 * `dm` (plus `extra` YAML lines under it), the decision model, with supervisor options for the real
 * worker in *o; NULL (a failed check) when either fails. */
static vsr_router_config *real_worker_setup(const char *extra, const char *state, vsr_sup_opts *o) {
    const char *store = tdir("store");
    char cmd[PATH_MAX * 3], yaml[1024];
    snprintf(cmd, sizeof cmd, "'%s' fixture --install-builtin vllm-sr-c/d3-tiny --store '%s' >/dev/null 2>&1", g_worker,
             store);
    CHECK(system(cmd) == 0);
    snprintf(yaml, sizeof yaml,
             "global:\n  model_catalog:\n    deployments:\n      dm:\n"
             "        provider: model_runtime\n        artifact: vllm-sr-c/d3-tiny\n"
             "        device: cpu\n%s    system:\n      decision_model: {deployment: dm}\n",
             extra);
    vsr_router_config *c = parse(yaml);
    CHECK(c && c->n_errors == 0);
    if (!c || c->n_errors) return NULL;
    *o = fake_opts(tdir(state));
    o->worker_bin = g_worker;
    o->store_dir = store;
    o->grace_ms = 10000;
    o->health_interval_ms = 100;
    return c;
}

TEST(real_worker) {
    vsr_sup_opts o;
    vsr_router_config *c = real_worker_setup("", "st-real", &o);
    if (!c) return;
    const char *used[] = {"dm"};
    o.backoff_min_ms = 200;
    vsr_err e = {0};
    log_clear();
    double t0 = now_s();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK_MSG(s != NULL, "%s", e.msg);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 120000));
    printf("note: the real worker was ready %.2f s after start\n", now_s() - t0);
    vsr_sup_target t;
    CHECK(vsr_sup_pick(s, "dm", &t));
    CHECK(!strcmp(t.served_name, "dm") && !strcmp(t.url, "http://localhost") && t.replica == 0);
    char sock_dir[PATH_MAX + 16];
    snprintf(sock_dir, sizeof sock_dir, "%s/sockets/", o.state_dir);
    CHECK_MSG(!strncmp(t.uds_path, sock_dir, strlen(sock_dir)), "socket %s", t.uds_path);
    struct stat sb;
    sock_dir[strlen(sock_dir) - 1] = 0;
    CHECK(lstat(sock_dir, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 07777) == 0700);
    char body[4096], url[600];
    snprintf(url, sizeof url, "%s/v1/models", t.url);
    CHECK(get_uds(t.uds_path, url, body) == 200 && strstr(body, "\"id\":\"dm\""));
    vsr_sup_release(s, &t);
    /* the worker log */
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/logs/dm-0.log", o.state_dir);
    char *lg = test_read_file(logp, NULL);
    CHECK_MSG(lg && strstr(lg, "---- vllm-sr: starting replica 0 of dm:") && strstr(lg, " serve vllm-sr-c/d3-tiny ") &&
                  strstr(lg, "--uds "),
              "log: %.300s", lg ? lg : "(none)");
    free(lg);
    /* crash -> restart */
    int kids[8], nk = child_pids(kids, 8);
    CHECK(nk == 1);
    rinfo before = info(s, "dm", 0);
    CHECK(before.ready && before.restarts == 0 && !strcmp(before.state, "ready"));
    if (nk == 1) {
        kill(kids[0], SIGKILL);
        CHECK(wait_state(s, "dm", 0, "backoff", 2000) || wait_state(s, "dm", 0, "starting", 2000));
        CHECK(!vsr_sup_pick(s, "dm", &t));
        CHECK(vsr_sup_wait_ready(s, 120000));
        rinfo after = info(s, "dm", 0);
        CHECK(after.ready && after.restarts == 1);
        CHECK(log_has("worker pid ") && log_has("was killed by signal 9") && log_has("restarting in 0.2 s"));
        CHECK(log_has("is ready"));
        int k2[8];
        CHECK(child_pids(k2, 8) == 1 && k2[0] != kids[0]);
        nk = child_pids(kids, 8);
    }
    /* stop: SIGTERM, the worker drains and exits well within the grace period */
    t0 = now_s();
    vsr_sup_stop(s);
    double took = now_s() - t0;
    CHECK_MSG(took < 5.0, "stop took %.2f s", took);
    CHECK(log_has("stopping 1 worker (SIGTERM; SIGKILL after 10.0 s)"));
    CHECK(!log_has("SIGKILL\n") && !log_has("did not stop"));
    for (int i = 0; i < nk; i++) CHECK(!alive(kids[i]));
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- profiles */

/* The deployment's profile reaches the worker as --profile (exact by default); changing it on a
 * reload is a new placement: a new worker, the old one retired. */
TEST(profile_pass_through) {
    fresh("w");
    set_mode("w", "serve");
    vsr_router_config *a = parse(ONE_FAKE);
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "%s        profile: batching\n", ONE_FAKE);
    vsr_router_config *b = parse(yaml);
    CHECK(a && b && !a->n_errors && !b->n_errors);
    if (!a || !b || a->n_errors || b->n_errors) return;
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(tdir("st-profile"));
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(a, used, 1, &o, &e);
    CHECK_MSG(s != NULL, "%s", e.msg);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    int p1 = last_pid("w");
    CHECK_OK(vsr_sup_reload(s, b, used, 1, &e), e);
    CHECK(log_has("reload: 0 replica(s) kept, 1 started, 1 retired"));
    CHECK(vsr_sup_wait_ready(s, 5000));
    for (int i = 0; i < 200 && spawns("w", NULL, NULL, 0) < 2; i++) msleep(10);
    CHECK(spawns("w", NULL, NULL, 0) == 2 && wait_gone(p1, 3000));
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/spawns-w", g_fake_dir);
    char *args = test_read_file(p, NULL);
    char *second = args ? strchr(args, '\n') : NULL;
    CHECK_MSG(args && second && strstr(args, " --max-request-bytes 67108864 --profile exact") &&
                  strstr(args, " --profile exact") < second && strstr(second, " --profile batching") &&
                  !strstr(second, "--profile exact"),
              "spawns: %s", args ? args : "(none)");
    free(args);
    vsr_sup_stop(s);
    vsr_router_config_free(a);
    vsr_router_config_free(b);
}

/* A real vllm-srun started by the supervisor with profile batching answers, and its /v1/models
 * says it runs batching (beside exact). */
TEST(real_worker_batching) {
    vsr_sup_opts o;
    vsr_router_config *c = real_worker_setup("        profile: batching\n", "st-real-batching", &o);
    if (!c) return;
    const char *used[] = {"dm"};
    vsr_err e = {0};
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK_MSG(s != NULL, "%s", e.msg);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 120000));
    vsr_sup_target t;
    CHECK(vsr_sup_pick(s, "dm", &t));
    static char body[65536];
    char url[600];
    snprintf(url, sizeof url, "%s/v1/models", t.url);
    long code = http_uds(t.uds_path, url, NULL, body, sizeof body);
    CHECK_MSG(code == 200 && strstr(body, "\"id\":\"dm\"") && strstr(body, "\"profile\":\"batching\"") &&
                  strstr(body, "\"name\":\"batching\",\"numerics\":\"approximate\""),
              "/v1/models %ld: %.600s", code, body);
    /* it answers a decision (a request that asks for batching, and one that asks for exact) */
    for (int k = 0; k < 2; k++) {
        char req[1024], resp[8192] = "";
        snprintf(req, sizeof req,
                 "{\"model\":\"dm\",\"state\":\"Write a Python function that merges two sorted lists.\","
                 "\"options\":{\"profile\":\"%s\"},\"questions\":{\"domain\":{\"type\":\"choice\","
                 "\"instructions\":\"Which domain does this request belong to?\","
                 "\"criteria\":{\"code\":\"Programming\",\"other\":\"Anything else\"}}}}",
                 k ? "exact" : "batching");
        snprintf(url, sizeof url, "%s/v1/decisions", t.url);
        code = http_uds(t.uds_path, url, req, resp, sizeof resp);
        CHECK_MSG(code == 200 && strstr(resp, "\"choice\":"), "decision (%s) %ld: %.400s", k ? "exact" : "batching",
                  code, resp);
    }
    vsr_sup_release(s, &t);
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/logs/dm-0.log", o.state_dir);
    char *lg = test_read_file(logp, NULL);
    CHECK_MSG(lg && strstr(lg, " serve vllm-sr-c/d3-tiny ") && strstr(lg, " --profile batching"), "log: %.300s",
              lg ? lg : "(none)");
    free(lg);
    vsr_sup_stop(s);
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- back-off */

TEST(backoff) {
    fresh("w");
    set_mode("w", "exit3");
    vsr_router_config *c = parse(ONE_FAKE);
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(tdir("st-backoff"));
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    double t[16];
    for (int i = 0; i < 400 && spawns("w", NULL, NULL, 0) < 6; i++) msleep(10);
    int n = spawns("w", t, NULL, 16);
    CHECK(n >= 6);
    if (n >= 6) {
        double want[] = {0.1, 0.2, 0.4, 0.4, 0.4};
        for (int i = 0; i < 5; i++) {
            double gap = t[i + 1] - t[i];
            /* at least the back-off; at most one monitor tick and the script's start later */
            CHECK_MSG(gap >= want[i] - 0.005 && gap < want[i] + 0.3, "gap %d: %.3f s, want %.1f s", i, gap, want[i]);
        }
    }
    CHECK(log_has("exited with status 3; restarting in 0.1 s") && log_has("restarting in 0.2 s") &&
          log_has("restarting in 0.4 s"));
    rinfo ri = info(s, "w", 0);
    CHECK(ri.restarts >= 5 && !ri.ready);
    /* once it comes up and stays ready for stable_ms, the back-off starts over at 0.1 s */
    set_mode("w", "serve");
    CHECK(vsr_sup_wait_ready(s, 3000));
    msleep(500);
    log_clear();
    kill(last_pid("w"), SIGKILL);
    for (int i = 0; i < 200 && !log_has("restarting in"); i++) msleep(10);
    CHECK_MSG(log_has("was killed by signal 9 (Killed); restarting in 0.1 s"), "%s", log_buf ? log_buf : "");
    CHECK(vsr_sup_wait_ready(s, 3000));
    /* a worker that dies before the stable period keeps doubling */
    log_clear();
    kill(last_pid("w"), SIGKILL);
    for (int i = 0; i < 200 && !log_has("restarting in"); i++) msleep(10);
    CHECK_MSG(log_has("restarting in 0.2 s"), "%s", log_buf ? log_buf : "");
    CHECK(vsr_sup_wait_ready(s, 3000));
    vsr_sup_stop(s);
    vsr_router_config_free(c);
}

TEST(ready_timeout) {
    fresh("w");
    set_mode("w", "hang");
    vsr_router_config *c = parse(ONE_FAKE);
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(tdir("st-hang"));
    o.ready_timeout_ms = 300;
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    for (int i = 0; i < 300 && !log_has("restarting in"); i++) msleep(10);
    CHECK(log_has("not ready after 0.") && log_has("; killing it"));
    CHECK(log_has("was killed by signal 9"));
    CHECK(!vsr_sup_wait_ready(s, 100));
    set_mode("w", "serve");
    CHECK(vsr_sup_wait_ready(s, 3000));
    vsr_sup_stop(s);
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- stop */

TEST(stop_sigkill) {
    fresh("w"), fresh("v");
    set_mode("w", "ignoreterm");
    set_mode("v", "serve");
    vsr_router_config *c = parse("global:\n  model_catalog:\n    deployments:\n"
                                 "      w: {provider: model_runtime, artifact: /pkg/w, device: cpu}\n"
                                 "      v: {provider: model_runtime, artifact: /pkg/v, device: cpu}\n");
    CHECK(c && c->n_errors == 0);
    const char *used[] = {"w", "v"};
    vsr_sup_opts o = fake_opts(tdir("st-stop"));
    o.grace_ms = 500;
    vsr_err e = {0};
    vsr_sup *s = vsr_sup_start(c, used, 2, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    int pw = last_pid("w"), pv = last_pid("v");
    CHECK(alive(pw) && alive(pv));
    log_clear();
    double t0 = now_s();
    vsr_sup_stop(s);
    double took = now_s() - t0;
    CHECK_MSG(took >= 0.5 && took < 2.0, "stop took %.2f s", took);
    CHECK(log_has("stopping 2 workers (SIGTERM; SIGKILL after 0.5 s)"));
    char want[128];
    snprintf(want, sizeof want, "deployment w replica 0: worker pid %d did not stop within 0.5 s of SIGTERM; SIGKILL", pw);
    CHECK_MSG(log_has(want), "%s", log_buf ? log_buf : "");
    CHECK(log_count("did not stop") == 1);
    snprintf(want, sizeof want, "worker pid %d stopped (was killed by signal 15", pv);
    CHECK(log_has(want));
    snprintf(want, sizeof want, "worker pid %d stopped (was killed by signal 9", pw);
    CHECK(log_has(want));
    CHECK(!alive(pw) && !alive(pv));
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- attached */

static pid_t start_upstream(const char *name, const char *sock) {
    pid_t p = fork();
    if (p == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 2);
        execl(g_upstream, g_upstream, "--name", name, "--uds", sock, (char *)NULL);
        _exit(127);
    }
    return p;
}

TEST(attached) {
    char sock[PATH_MAX], yaml[PATH_MAX + 512];
    snprintf(sock, sizeof sock, "%s/att.sock", test_tmpdir());
    snprintf(yaml, sizeof yaml,
             "global:\n  model_catalog:\n    deployments:\n      ext:\n        provider: http\n"
             "        replicas:\n          - {endpoint: 'unix://%s', served_name: ext-model}\n"
             "          - {endpoint: 'http://127.0.0.1:1/', served_name: ext-model}\n",
             sock);
    vsr_router_config *c = parse(yaml);
    CHECK_MSG(c && c->n_errors == 0, "%s", c && c->n_errors ? c->errors[0].msg : "");
    if (!c || c->n_errors) return;
    pid_t up = start_upstream("ext", sock);
    const char *used[] = {"ext"};
    vsr_sup_opts o = fake_opts(tdir("st-att"));
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    CHECK(wait_state(s, "ext", 0, "attached-ready", 2000));
    CHECK(wait_state(s, "ext", 1, "attached-down", 2000));
    vsr_sup_target t;
    for (int i = 0; i < 4; i++) {
        CHECK(vsr_sup_pick(s, "ext", &t));
        CHECK(t.replica == 0 && !strcmp(t.uds_path, sock) && !strcmp(t.served_name, "ext-model") &&
              !strcmp(t.url, "http://localhost"));
        vsr_sup_release(s, &t);
    }
    int kids[8];
    CHECK(child_pids(kids, 8) == 1 && kids[0] == up); /* nothing started but the test's own upstream */
    kill(up, SIGTERM);
    waitpid(up, NULL, 0);
    CHECK(wait_state(s, "ext", 0, "attached-down", 2000));
    CHECK(!vsr_sup_pick(s, "ext", &t));
    CHECK(log_has("attached worker unix://") && log_has(" is down ("));
    up = start_upstream("ext", sock);
    CHECK(wait_state(s, "ext", 0, "attached-ready", 3000));
    CHECK(log_has(" is ready (HTTP 200)"));
    /* report_failure takes it out until the next health check */
    CHECK(vsr_sup_pick(s, "ext", &t));
    vsr_sup_report_failure(s, &t);
    vsr_sup_release(s, &t);
    CHECK(log_has("a call to the attached worker failed; not picked until its next health check"));
    CHECK(wait_state(s, "ext", 0, "attached-ready", 2000));
    vsr_sup_stop(s);
    kill(up, SIGTERM);
    waitpid(up, NULL, 0);
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- round robin, failures */

TEST(round_robin) {
    fresh("w");
    set_mode("w", "serve");
    vsr_router_config *c =
        parse("global:\n  model_catalog:\n    deployments:\n      w:\n        provider: model_runtime\n"
              "        artifact: /pkg/w\n        replicas:\n          - {device: cpu}\n          - {device: cpu}\n");
    CHECK(c && c->n_errors == 0);
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(tdir("st-rr"));
    o.health_interval_ms = 300;
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    CHECK(wait_state(s, "w", 1, "ready", 3000));
    vsr_sup_target t[4];
    for (int i = 0; i < 4; i++) CHECK(vsr_sup_pick(s, "w", &t[i]));
    CHECK(t[0].replica != t[1].replica && t[0].replica == t[2].replica && t[1].replica == t[3].replica);
    CHECK(strcmp(t[0].uds_path, t[1].uds_path) != 0);
    for (int i = 0; i < 4; i++) vsr_sup_release(s, &t[i]);
    /* a transport failure on one: both next picks go to the other */
    vsr_sup_report_failure(s, &t[0]);
    CHECK(log_has("a call failed at transport level; not picked until its next health check"));
    vsr_sup_target u;
    CHECK(vsr_sup_pick(s, "w", &u) && u.replica == t[1].replica);
    vsr_sup_release(s, &u);
    CHECK(vsr_sup_pick(s, "w", &u) && u.replica == t[1].replica);
    vsr_sup_release(s, &u);
    CHECK(wait_state(s, "w", t[0].replica, "ready", 2000));
    CHECK(log_has("is ready again"));
    CHECK(!vsr_sup_pick(s, "other", &u));
    vsr_sup_stop(s);
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- reload */

static const char *CFG_A = "global:\n  model_catalog:\n    deployments:\n"
                           "      x: {provider: model_runtime, artifact: /pkg/x-bf16, device: cpu}\n"
                           "      y: {provider: model_runtime, artifact: /pkg/y, device: cpu}\n";
static const char *CFG_B = "global:\n  model_catalog:\n    deployments:\n"
                           "      x: {provider: model_runtime, artifact: /pkg/x-fp8, device: cpu}\n"
                           "      y: {provider: model_runtime, artifact: /pkg/y, device: cpu}\n"
                           "      z: {provider: model_runtime, artifact: /pkg/z, device: cpu}\n";

TEST(reload) {
    fresh("x"), fresh("y"), fresh("z");
    set_mode("x", "serve");
    set_mode("y", "serve");
    set_mode("z", "serve");
    vsr_router_config *a = parse(CFG_A), *b = parse(CFG_B);
    CHECK(a && b && !a->n_errors && !b->n_errors);
    const char *ua[] = {"x", "y"}, *ub[] = {"x", "y", "z"};
    vsr_sup_opts o = fake_opts(tdir("st-reload"));
    o.grace_ms = 3000;
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(a, ua, 2, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    int px = last_pid("x"), py = last_pid("y");
    vsr_sup_target old;
    CHECK(vsr_sup_pick(s, "x", &old)); /* an in-flight call on the old x */
    /* y crashes once so its restart count is 1, and must stay 1 across the reload */
    kill(py, SIGKILL);
    CHECK(wait_state(s, "y", 0, "starting", 2000) || wait_state(s, "y", 0, "ready", 2000));
    CHECK(vsr_sup_wait_ready(s, 5000));
    py = last_pid("y");
    CHECK(info(s, "y", 0).restarts == 1);

    set_mode("x", "slow"); /* the new x takes 0.6 s to come up */
    CHECK_OK(vsr_sup_reload(s, b, ub, 3, &e), e);
    CHECK(log_has("reload: 1 replica(s) kept, 2 started, 1 retired"));
    /* until the new x is ready, x is still served by the old one */
    vsr_sup_target t;
    CHECK(vsr_sup_pick(s, "x", &t) && t.id == old.id);
    vsr_sup_release(s, &t);
    CHECK(vsr_sup_wait_ready(s, 5000));
    CHECK(vsr_sup_pick(s, "x", &t) && t.id != old.id && strcmp(t.uds_path, old.uds_path));
    vsr_sup_release(s, &t);
    int px2 = last_pid("x");
    CHECK(px2 != px && alive(px2));
    /* the old x keeps running while our call is in flight ... */
    msleep(300);
    CHECK(alive(px));
    rinfo rx = info(s, "x", 0);
    CHECK(rx.n == 3 && rx.ready); /* retired replicas are not listed */
    /* ... and gets SIGTERM once it is released */
    vsr_sup_release(s, &old);
    CHECK(wait_gone(px, 2000));
    CHECK(log_has("retired by reload; SIGTERM to worker pid"));
    CHECK(log_has("(0 calls in flight)"));
    /* y unchanged: same process, same restart count */
    CHECK(last_pid("y") == py && alive(py) && info(s, "y", 0).restarts == 1);
    CHECK(spawns("z", NULL, NULL, 0) == 1);
    int pz = last_pid("z");

    /* rollback: the previous file; z goes, x goes back to bf16 */
    set_mode("x", "serve");
    log_clear();
    CHECK_OK(vsr_sup_reload(s, a, ua, 2, &e), e);
    CHECK(log_has("reload: 1 replica(s) kept, 1 started, 2 retired"));
    bool back = vsr_sup_wait_ready(s, 5000);
    bool gone = wait_gone(pz, 3000) && wait_gone(px2, 3000);
    if (!back || !gone) log_dump("the rollback: not ready in 5 s, or z and the second x not stopped in 3 s");
    CHECK(back);
    CHECK(gone);
    CHECK(alive(py) && last_pid("y") == py);
    char *args = NULL;
    {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/spawns-x", g_fake_dir);
        args = test_read_file(p, NULL);
    }
    CHECK(args && strstr(args, "serve /pkg/x-fp8 --device cpu") && strrchr(args, '\n') &&
          strstr(strstr(args, "/pkg/x-fp8"), "serve /pkg/x-bf16 --device cpu"));
    free(args);
    CHECK(!vsr_sup_pick(s, "z", &t));
    vsr_sup_stop(s);
    vsr_router_config_free(a);
    vsr_router_config_free(b);
}

/* The rollback's own placement (x on bf16) has the same replica id, so the same socket, as the
 * retired worker of that placement, which may still be running when the rollback comes. */
static const char *ROLL_A = "global:\n  model_catalog:\n    deployments:\n"
                            "      x: {provider: model_runtime, artifact: /pkg/x-bf16, device: cpu}\n";
static const char *ROLL_B = "global:\n  model_catalog:\n    deployments:\n"
                            "      x: {provider: model_runtime, artifact: /pkg/x-fp8, device: cpu}\n";

/* true when `first` is in the log and `then` after it */
static bool log_order(const char *first, const char *then) {
    pthread_mutex_lock(&log_mu);
    const char *a = log_buf ? strstr(log_buf, first) : NULL;
    bool r = a && strstr(a, then);
    pthread_mutex_unlock(&log_mu);
    return r;
}

/* x's replica answers /health on its socket and is ready, `rounds` health intervals from now. */
static bool still_serving(vsr_sup *s, const vsr_sup_opts *o, int rounds, unsigned long long *id) {
    msleep(rounds * o->health_interval_ms);
    vsr_sup_target t;
    if (!vsr_sup_pick(s, "x", &t)) return false;
    char body[4096], url[600];
    snprintf(url, sizeof url, "%s/health", t.url);
    long code = get_uds(t.uds_path, url, body);
    vsr_sup_release(s, &t);
    rinfo ri = info(s, "x", 0);
    if (id) *id = t.id;
    return code == 200 && ri.ready && !strcmp(ri.state, "ready");
}

/* A rollback while the old worker still drains a call: that worker is still running its
 * placement, so it goes back in service (no second worker on its socket) and the canary goes. */
TEST(rollback_while_draining) {
    fresh("x");
    set_mode("x", "serve");
    vsr_router_config *a = parse(ROLL_A), *b = parse(ROLL_B);
    CHECK(a && b && !a->n_errors && !b->n_errors);
    if (!a || !b || a->n_errors || b->n_errors) return;
    const char *used[] = {"x"};
    vsr_sup_opts o = fake_opts(tdir("st-roll-drain"));
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(a, used, 1, &o, &e);
    CHECK(s && vsr_sup_wait_ready(s, 5000));
    if (!s) return;
    int p1 = last_pid("x");
    vsr_sup_target old;
    CHECK(vsr_sup_pick(s, "x", &old)); /* in flight across both reloads */
    CHECK_OK(vsr_sup_reload(s, b, used, 1, &e), e);
    CHECK(vsr_sup_wait_ready(s, 5000)); /* the fp8 worker is ready; the bf16 one waits for our call */
    int p2 = last_pid("x");
    CHECK(spawns("x", NULL, NULL, 0) == 2 && p2 != p1 && alive(p1) && alive(p2));
    log_clear();
    CHECK_OK(vsr_sup_reload(s, a, used, 1, &e), e);
    CHECK_MSG(log_has("reload: 1 replica(s) kept, 0 started, 1 retired") &&
                  log_has("deployment x replica 0 (r-") &&
                  log_has("): the reload brings its placement back; the retired replica returns to service"),
              "%s", log_buf ? log_buf : "");
    CHECK(vsr_sup_wait_ready(s, 5000));
    bool gone = wait_gone(p2, o.grace_ms + 3000); /* x has a ready replica again: the fp8 one is retired */
    if (!gone) log_dump("the fp8 worker still runs after the rollback");
    CHECK(gone);
    vsr_sup_release(s, &old);
    unsigned long long id = 0;
    CHECK(still_serving(s, &o, 10, &id));
    CHECK(id == old.id && alive(p1) && spawns("x", NULL, NULL, 0) == 2 && info(s, "x", 0).restarts == 0);
    vsr_sup_stop(s);
    vsr_router_config_free(a);
    vsr_router_config_free(b);
}

/* A rollback while the old worker of that placement is still stopping (here it ignores SIGTERM
 * until SIGKILL after grace): the new worker starts once the old one is reaped, and the old one's
 * exit does not take the new one's socket. */
TEST(rollback_while_stopping) {
    fresh("x");
    set_mode("x", "ignoreterm");
    vsr_router_config *a = parse(ROLL_A), *b = parse(ROLL_B);
    CHECK(a && b && !a->n_errors && !b->n_errors);
    if (!a || !b || a->n_errors || b->n_errors) return;
    const char *used[] = {"x"};
    vsr_sup_opts o = fake_opts(tdir("st-roll-stop"));
    o.grace_ms = 1000;
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(a, used, 1, &o, &e);
    CHECK(s && vsr_sup_wait_ready(s, 5000));
    if (!s) return;
    int p1 = last_pid("x");
    set_mode("x", "serve");
    CHECK_OK(vsr_sup_reload(s, b, used, 1, &e), e);
    CHECK(vsr_sup_wait_ready(s, 5000));
    char want[160];
    snprintf(want, sizeof want, "retired by reload; SIGTERM to worker pid %d", p1);
    for (int i = 0; i < 300 && !log_has(want); i++) msleep(10);
    CHECK(log_has(want) && alive(p1)); /* stopping: SIGKILL comes after grace */
    int p2 = last_pid("x");
    CHECK_OK(vsr_sup_reload(s, a, used, 1, &e), e);
    CHECK(log_has("reload: 0 replica(s) kept, 1 started, 1 retired"));
    CHECK(vsr_sup_wait_ready(s, o.grace_ms + 5000));
    CHECK(wait_gone(p1, o.grace_ms + 3000) && wait_gone(p2, o.grace_ms + 3000));
    int p3 = last_pid("x");
    CHECK(spawns("x", NULL, NULL, 0) == 3 && p3 != p1 && p3 != p2);
    char stopped[96], started[96];
    snprintf(stopped, sizeof stopped, "worker pid %d stopped (was killed by signal 9", p1);
    snprintf(started, sizeof started, "started worker pid %d on ", p3);
    bool ordered = log_order(stopped, started);
    bool serving = still_serving(s, &o, 10, NULL);
    if (!ordered || !serving) log_dump("the rollback onto a stopping worker's socket");
    CHECK(ordered);
    CHECK(serving);
    vsr_sup_stop(s);
    vsr_router_config_free(a);
    vsr_router_config_free(b);
}

/* A retired replica with a call that never ends is stopped after grace anyway. */
TEST(reload_grace) {
    fresh("x"), fresh("y");
    set_mode("x", "serve");
    set_mode("y", "serve");
    vsr_router_config *a = parse(CFG_A), *b = parse(CFG_B);
    const char *ua[] = {"x", "y"}, *ub[] = {"x", "y"};
    vsr_sup_opts o = fake_opts(tdir("st-grace"));
    o.grace_ms = 400;
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(a, ua, 2, &o, &e);
    CHECK(s && vsr_sup_wait_ready(s, 5000));
    if (!s) return;
    int px = last_pid("x");
    vsr_sup_target old;
    CHECK(vsr_sup_pick(s, "x", &old)); /* never released */
    CHECK_OK(vsr_sup_reload(s, b, ub, 2, &e), e);
    CHECK(vsr_sup_wait_ready(s, 5000));
    CHECK(wait_gone(px, 3000));
    CHECK(log_has("(1 call in flight)"));
    vsr_sup_release(s, &old); /* a release after the replica is gone is harmless */
    vsr_sup_stop(s);
    vsr_router_config_free(a);
    vsr_router_config_free(b);
}

/* A log path that cannot be opened, and a worker binary the kernel cannot execute: logged,
 * retried with back-off, the router keeps running. */
TEST(spawn_failures) {
    fresh("w");
    set_mode("w", "serve");
    vsr_router_config *c = parse(ONE_FAKE);
    const char *used[] = {"w"};
    const char *st = tdir("st-spawn");
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/logs/w-0.log", st);
    CHECK(mkdir(st, 0700) == 0);
    snprintf(logp, sizeof logp, "%s/logs", st);
    CHECK(mkdir(logp, 0700) == 0);
    snprintf(logp, sizeof logp, "%s/logs/w-0.log", st);
    CHECK(mkdir(logp, 0700) == 0); /* a directory where the log file goes */
    vsr_sup_opts o = fake_opts(st);
    vsr_err e = {0};
    log_clear();
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    for (int i = 0; i < 300 && log_count("cannot open the worker log") < 2; i++) msleep(10);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "deployment w replica 0: cannot open the worker log %s: Is a directory; retrying in 0.1 s",
             logp);
    CHECK_MSG(log_has(want), "%s", log_buf ? log_buf : "");
    CHECK(log_count("cannot open the worker log") >= 2 && spawns("w", NULL, NULL, 0) == 0);
    CHECK(log_has("Is a directory; retrying in 0.2 s")); /* the back-off doubles here too */
    rmdir(logp); /* put right: it starts */
    CHECK(vsr_sup_wait_ready(s, 3000));
    vsr_sup_stop(s);

    /* an executable file that is no program */
    char junk[PATH_MAX + 32];
    snprintf(junk, sizeof junk, "%s/junk-worker", st);
    test_write_file(junk, "\x7f\x45\x4c\x46garbage", 11);
    chmod(junk, 0755);
    o.worker_bin = junk;
    log_clear();
    s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK(s != NULL);
    if (!s) return;
    for (int i = 0; i < 200 && !log_has("restarting in"); i++) msleep(10);
    CHECK_MSG(log_has("exited with status 127; restarting in 0.1 s"), "%s", log_buf ? log_buf : "");
    vsr_sup_stop(s);
    char *lg = test_read_file(logp, NULL);
    snprintf(want, sizeof want, "vllm-sr: cannot execute the worker %s\n", junk);
    CHECK_MSG(lg && strstr(lg, want), "%s", lg ? lg : "(no log)");
    free(lg);
    vsr_router_config_free(c);
}

/* ---------------------------------------------------------------- long state dir, PDEATHSIG */

TEST(long_state_dir) {
    set_mode("w", "serve");
    char st[PATH_MAX];
    snprintf(st, sizeof st, "%s/%s", test_tmpdir(), "a-rather-long-state-folder-name-that-pushes-sockets-past-100-bytes");
    vsr_router_config *c = parse(ONE_FAKE);
    const char *used[] = {"w"};
    vsr_sup_opts o = fake_opts(st);
    vsr_err e = {0};
    vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
    CHECK_MSG(s != NULL, "%s", e.msg);
    if (!s) return;
    CHECK(vsr_sup_wait_ready(s, 5000));
    vsr_sup_target t;
    CHECK(vsr_sup_pick(s, "w", &t));
    CHECK_MSG(!strncmp(t.uds_path, "/tmp/vsr-", 9) && strlen(t.uds_path) <= 100, "%s", t.uds_path);
    char dir[300];
    snprintf(dir, sizeof dir, "%s", t.uds_path);
    *strrchr(dir, '/') = 0;
    struct stat sb;
    CHECK(lstat(dir, &sb) == 0 && (sb.st_mode & 07777) == 0700 && sb.st_uid == geteuid());
    vsr_sup_release(s, &t);
    vsr_sup_stop(s);
    rmdir(dir);
    vsr_router_config_free(c);
}

TEST(dies_with_router) {
    set_mode("w", "serve");
    char st[PATH_MAX];
    snprintf(st, sizeof st, "%s/st-death", test_tmpdir());
    int before = spawns("w", NULL, NULL, 0);
    pid_t router = fork();
    if (router == 0) {
        vsr_router_config *c = parse(ONE_FAKE);
        const char *used[] = {"w"};
        vsr_sup_opts o = fake_opts(st);
        o.log = NULL;
        o.quiet = true;
        vsr_err e = {0};
        vsr_sup *s = vsr_sup_start(c, used, 1, &o, &e);
        if (!s || !vsr_sup_wait_ready(s, 5000)) _exit(1);
        for (;;) pause();
    }
    for (int i = 0; i < 500 && spawns("w", NULL, NULL, 0) == before; i++) msleep(10);
    int pw = last_pid("w");
    CHECK(spawns("w", NULL, NULL, 0) == before + 1 && alive(pw));
    msleep(200);
    kill(router, SIGKILL);
    waitpid(router, NULL, 0);
    CHECK_MSG(wait_gone(pw, 2000), "worker %d outlived the router", pw);
}

int main(void) {
    setup();
    RUN(refusals);
    RUN(real_worker);
    RUN(profile_pass_through);
    RUN(real_worker_batching);
    RUN(backoff);
    RUN(ready_timeout);
    RUN(stop_sigkill);
    RUN(attached);
    RUN(round_robin);
    RUN(reload);
    RUN(rollback_while_draining);
    RUN(rollback_while_stopping);
    RUN(reload_grace);
    RUN(spawn_failures);
    RUN(long_state_dir);
    RUN(dies_with_router);
    return test_summary();
}
