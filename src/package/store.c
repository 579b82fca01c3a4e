/* The package store: a Hugging Face hub cache read offline (compressed-tensors-format.md
 * section 5). models--<org>--<name>/refs/<revision> holds a commit (the revision path is
 * used verbatim, so refs/pr/1 lives at refs/refs/pr/1); snapshots/<commit>/ holds the
 * files, usually as links into ../../blobs. Nothing is ever downloaded. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "package/package_internal.h"

/* $VAR-free "~" expansion, as huggingface_hub's expanduser. */
static void expand_home(const char *in, char *buf, size_t n) {
    const char *home = getenv("HOME");
    if (in[0] == '~' && (in[1] == '/' || in[1] == 0) && home) snprintf(buf, n, "%s%s", home, in + 1);
    else snprintf(buf, n, "%s", in);
}

const char *vsr_store_dir(const char *override, char *buf, size_t n) {
    const char *e;
    char tmp[PATH_MAX];
    if (override && *override) expand_home(override, buf, n);
    else if ((e = getenv("HF_HUB_CACHE")) && *e) expand_home(e, buf, n);
    else if ((e = getenv("HUGGINGFACE_HUB_CACHE")) && *e) expand_home(e, buf, n);
    else if ((e = getenv("HF_HOME")) && *e) {
        expand_home(e, tmp, sizeof tmp);
        snprintf(buf, n, "%s/hub", tmp);
    } else if ((e = getenv("XDG_CACHE_HOME")) && *e) {
        expand_home(e, tmp, sizeof tmp);
        snprintf(buf, n, "%s/huggingface/hub", tmp);
    } else {
        expand_home("~/.cache/huggingface/hub", buf, n);
    }
    return buf;
}

/* ^[A-Za-z0-9][\w.-]*\/[\w.-]+$ */
static bool word_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; }
bool vsr_repo_name_valid(const char *repo) {
    if (!isalnum((unsigned char)repo[0])) return false;
    const char *slash = strchr(repo, '/');
    if (!slash || !slash[1]) return false;
    for (const char *s = repo + 1; s < slash; s++)
        if (!word_char(*s)) return false;
    for (const char *s = slash + 1; *s; s++)
        if (!word_char(*s)) return false;
    return true;
}

static bool is_commit(const char *s) {
    if (strlen(s) != 40) return false;
    for (int i = 0; i < 40; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

typedef struct strlist {
    char **v;
    size_t n;
} strlist;

static void sl_add(strlist *l, const char *s) {
    char **nv = realloc(l->v, (l->n + 1) * sizeof *nv);
    if (!nv) return;
    l->v = nv;
    if ((l->v[l->n] = strdup(s))) l->n++;
}
static void sl_free(strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}
static int cmp_s(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
/* "a, b, c" (truncated with ", ..." past n bytes) */
static void sl_join(strlist *l, char *buf, size_t n) {
    if (l->n > 1) qsort(l->v, l->n, sizeof *l->v, cmp_s);
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < l->n; i++) {
        size_t need = strlen(l->v[i]) + 2;
        if (len + need + 8 >= n) {
            snprintf(buf + len, n - len, ", ...");
            return;
        }
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", l->v[i]);
    }
}

/* Ref names under refs/, recursively (refs/pr/1 is a file at refs/refs/pr/1). */
static void list_refs(const char *dir, const char *prefix, int depth, strlist *out) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[PATH_MAX], name[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s%s", prefix, e->d_name);
        if (is_dir(p)) {
            if (depth < 4) {
                char np[PATH_MAX + 2];
                snprintf(np, sizeof np, "%s/", name);
                list_refs(p, np, depth + 1, out);
            }
        } else {
            sl_add(out, name);
        }
    }
    closedir(d);
}

static void list_dir(const char *dir, strlist *out) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') sl_add(out, e->d_name);
    closedir(d);
}

/* "refs: main, v1; snapshots: <commit>, ..." */
static void describe_repo(const char *repo_dir, char *buf, size_t n) {
    char p[PATH_MAX], a[400], b[400];
    strlist refs = {0}, snaps = {0};
    snprintf(p, sizeof p, "%s/refs", repo_dir);
    list_refs(p, "", 0, &refs);
    snprintf(p, sizeof p, "%s/snapshots", repo_dir);
    list_dir(p, &snaps);
    sl_join(&refs, a, sizeof a);
    sl_join(&snaps, b, sizeof b);
    snprintf(buf, n, "refs: %s; snapshots: %s", refs.n ? a : "none", snaps.n ? b : "none");
    sl_free(&refs);
    sl_free(&snaps);
}

vsr_status vsr_store_resolve(const char *store_dir, const char *repo, const char *revision,
                             char *snapshot, size_t snapshot_n, char commit[41], vsr_err *err) {
    char sbuf[PATH_MAX], repo_dir[PATH_MAX], p[PATH_MAX + 64], info[900];
    const char *store = vsr_store_dir(store_dir, sbuf, sizeof sbuf);
    if (!repo || !vsr_repo_name_valid(repo))
        return vsr_err_set(err, VSR_E_INVALID,
                           "\"%.200s\" is not a Hub repository ID (org/name: letters, digits, '_', '.', '-')",
                           repo ? repo : "");
    if (!revision || !*revision) revision = "main";
    if (revision[0] == '/' || strstr(revision, "..") || strchr(revision, '\\') || strlen(revision) > 200)
        return vsr_err_set(err, VSR_E_INVALID, "%s: revision \"%.200s\" is not a commit, branch or tag name", repo,
                           revision);

    const char *slash = strchr(repo, '/');
    snprintf(repo_dir, sizeof repo_dir, "%s/models--%.*s--%s", store, (int)(slash - repo), repo, slash + 1);
    if (!is_dir(repo_dir)) {
        strlist held = {0};
        DIR *d = opendir(store);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (strncmp(e->d_name, "models--", 8)) continue;
                const char *rest = e->d_name + 8, *sep = strstr(rest, "--");
                if (!sep) continue;
                char name[NAME_MAX + 2];
                snprintf(name, sizeof name, "%.*s/%s", (int)(sep - rest), rest, sep + 2);
                sl_add(&held, name);
            }
            closedir(d);
        }
        char list[700];
        sl_join(&held, list, sizeof list);
        vsr_err_set(err, VSR_E_NOT_FOUND, "%s is not in the package store %s (%s%s); nothing is downloaded", repo,
                    store, !d ? "the store folder does not exist" : held.n ? "the store holds: " : "the store is empty",
                    held.n ? list : "");
        sl_free(&held);
        return VSR_E_NOT_FOUND;
    }

    char c[64];
    if (is_commit(revision)) {
        memcpy(c, revision, 41);
    } else {
        snprintf(p, sizeof p, "%s/refs/%s", repo_dir, revision);
        FILE *f = fopen(p, "rb");
        if (!f) {
            describe_repo(repo_dir, info, sizeof info);
            return vsr_err_set(err, VSR_E_NOT_FOUND,
                               "%s: revision \"%s\" is not in the package store %s (%s); a revision is a 40-hex "
                               "commit or a branch or tag under refs/",
                               repo, revision, store, info);
        }
        char buf[128];
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ')) buf[--got] = 0;
        if (!is_commit(buf))
            return vsr_err_set(err, VSR_E_FORMAT, "%s: refs/%s holds \"%.64s\", not a 40-hex commit", repo, revision,
                               buf);
        memcpy(c, buf, 41);
    }
    snprintf(p, sizeof p, "%s/snapshots/%.40s", repo_dir, c);
    if (!is_dir(p)) {
        describe_repo(repo_dir, info, sizeof info);
        if (is_commit(revision))
            return vsr_err_set(err, VSR_E_NOT_FOUND, "%s: commit %s has no snapshot in the package store %s (%s)",
                               repo, c, store, info);
        return vsr_err_set(err, VSR_E_NOT_FOUND,
                           "%s: refs/%s points to commit %s, which has no snapshot in the package store %s (%s)",
                           repo, revision, c, store, info);
    }
    char real[PATH_MAX];
    if (!realpath(p, real)) return vsr_err_set(err, VSR_E_IO, "%s: %s", p, strerror(errno));
    if (snprintf(snapshot, snapshot_n, "%s", real) >= (int)snapshot_n)
        return vsr_err_set(err, VSR_E_INVALID, "%s: snapshot path too long", repo);
    memcpy(commit, c, 41);
    return VSR_OK;
}
