/* The router config (vsr/router.h): libyaml document -> typed struct, every error with its
 * YAML path, line and column. Messages quoted in issue #21 and reference-runtime.md 7 are
 * kept verbatim. */
#include "vsr/router.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "vsr/catalog.h"
#include "vsr/package.h"

typedef struct ctx {
    vsr_router_config *c;
    bool decision_model_declared; /* system.decision_model is present (valid or not) */
    yaml_document_t *doc;
    const vsr_router_options *opt;
} ctx;


static void add_error(ctx *x, const char *path, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_error(ctx *x, const char *path, const yaml_node_t *n, const char *fmt, ...) {
    vsr_router_config *c = x->c;
    vsr_rt_error *e = realloc(c->errors, (size_t)(c->n_errors + 1) * sizeof *e);
    if (!e) return;
    c->errors = e;
    e += c->n_errors++;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->path = strdup(path && *path ? path : "(document)");
    e->msg = strdup(msg);
    e->line = n ? (int)n->start_mark.line + 1 : 0;
    e->col = n ? (int)n->start_mark.column + 1 : 0;
}

static yaml_node_t *node(ctx *x, int id) { return yaml_document_get_node(x->doc, id); }
static bool is_map(const yaml_node_t *n) { return n && n->type == YAML_MAPPING_NODE; }
static bool is_seq(const yaml_node_t *n) { return n && n->type == YAML_SEQUENCE_NODE; }
static const char *scalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}
/* A plain scalar that YAML 1.1/1.2 core would read as null. */
static bool is_null(const yaml_node_t *n) {
    const char *s = scalar(n);
    return s && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"));
}

/* out = base + "." + key (or key when base is empty), cut to fit n. */
static void append(char *out, size_t n, size_t *at, const char *s) {
    size_t l = strlen(s);
    if (*at + l >= n) l = n - 1 - *at;
    memcpy(out + *at, s, l);
    *at += l;
    out[*at] = 0;
}
static void join(char *out, size_t n, const char *base, const char *key) {
    size_t at = 0;
    out[0] = 0;
    append(out, n, &at, base);
    if (*base) append(out, n, &at, ".");
    append(out, n, &at, key);
}
/* out = base + "[i]" */
static void join_idx(char *out, size_t n, const char *base, int i) {
    char ix[16];
    size_t at = 0;
    snprintf(ix, sizeof ix, "[%d]", i);
    out[0] = 0;
    append(out, n, &at, base);
    append(out, n, &at, ix);
}

/* Checks that every key of mapping n is one of `allowed` (NULL-terminated). */
static void check_keys(ctx *x, const char *path, yaml_node_t *n, const char *const *allowed) {
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(x, p->key);
        const char *ks = scalar(k);
        if (!ks) {
            add_error(x, path, k, "keys must be strings");
            continue;
        }
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, ks)) ok = true;
        if (!ok) {
            char p2[512], list[512] = "";
            join(p2, sizeof p2, path, ks);
            for (const char *const *a = allowed; *a; a++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a == allowed ? "" : ", ", *a);
            add_error(x, p2, k, "unknown key '%s' (expected one of: %s)", ks, list);
        }
    }
}

static yaml_node_t *get(ctx *x, yaml_node_t *map, const char *key) {
    if (!is_map(map)) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *ks = scalar(node(x, p->key));
        if (ks && !strcmp(ks, key)) return node(x, p->value);
    }
    return NULL;
}

/* A string field: NULL when absent or null; an error when not a scalar. */
static char *get_str(ctx *x, yaml_node_t *map, const char *path, const char *key) {
    yaml_node_t *v = get(x, map, key);
    if (!v || is_null(v)) return NULL;
    char p2[512];
    join(p2, sizeof p2, path, key);
    if (!scalar(v)) {
        add_error(x, p2, v, "%s must be a string", key);
        return NULL;
    }
    return strdup(scalar(v));
}

static bool parse_int(const char *s, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno) return false;
    *out = v;
    return true;
}

static bool parse_num(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Checks a mapping node; reports `what must be a mapping` otherwise. */
static bool want_map(ctx *x, const char *path, yaml_node_t *n, const char *what) {
    if (is_map(n)) return true;
    add_error(x, path, n, "%s must be a mapping", what);
    return false;
}

/* ---- pattern checks (reference-runtime.md 7) ---- */
static bool is_hex40(const char *s) {
    if (!s || strlen(s) != 40) return false;
    for (const char *p = s; *p; p++)
        if (!(isdigit((unsigned char)*p) || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}
static bool wordch(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '.' || ch == '-'; }
/* ^[A-Za-z0-9][\w.-]*\/[\w.-]+$ */
static bool is_hub_id(const char *s) {
    if (!s || !isalnum((unsigned char)s[0])) return false;
    const char *slash = strchr(s, '/');
    if (!slash || slash[1] == 0 || strchr(slash + 1, '/')) return false;
    for (const char *p = s; *p; p++)
        if (p != slash && !wordch(*p)) return false;
    return true;
}
/* ^[a-z][a-z0-9_]*$ */
static bool is_profile(const char *s) {
    if (!s || !(*s >= 'a' && *s <= 'z')) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || isdigit((unsigned char)*p) || *p == '_')) return false;
    return true;
}
/* ^[a-z][a-z0-9_]*(:[0-9]+)?$ */
static bool is_device(const char *s) {
    if (!s || !(*s >= 'a' && *s <= 'z')) return false;
    const char *p = s;
    while ((*p >= 'a' && *p <= 'z') || isdigit((unsigned char)*p) || *p == '_') p++;
    if (!*p) return true;
    if (*p != ':' || !p[1]) return false;
    for (p++; *p; p++)
        if (!isdigit((unsigned char)*p)) return false;
    return true;
}
static const char *check_endpoint(const char *e) {
    const char *rest;
    if (!strncmp(e, "unix://", 7)) {
        if (e[7] != '/') return "endpoint unix:// needs an absolute socket path (unix:///run/vllm-sr/runtime.sock)";
        return NULL;
    }
    if (!strncmp(e, "http://", 7)) rest = e + 7;
    else if (!strncmp(e, "https://", 8)) rest = e + 8;
    else return "endpoint must use unix://, http:// or https://";
    if (!*rest || *rest == '/' || *rest == ':') return "endpoint needs a host";
    return NULL;
}

/* ---- deployments ---- */
static const char *const deployment_keys[] = {"provider", "artifact", "revision", "device", "profile", "replicas",
                                              "endpoint", "served_name", "public_name", NULL};

static void load_replicas(ctx *x, const char *path, yaml_node_t *seq, vsr_rt_deployment *d) {
    if (!is_seq(seq)) {
        add_error(x, path, seq, "replicas must be a list of {device} or {endpoint, served_name}");
        return;
    }
    int n = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > VSR_RT_MAX_REPLICAS) {
        add_error(x, path, seq, "replicas must contain at most 64 worker placements (found %d)", n);
        return;
    }
    if (n == 0) {
        add_error(x, path, seq, "replicas must name at least one worker placement");
        return;
    }
    d->replicas = calloc((size_t)n, sizeof *d->replicas);
    if (!d->replicas) return;
    static const char *const keys[] = {"device", "endpoint", "served_name", NULL};
    for (int i = 0; i < n; i++) {
        yaml_node_t *r = node(x, seq->data.sequence.items.start[i]);
        char rp[512];
        join_idx(rp, sizeof rp, path, i);
        if (!want_map(x, rp, r, "a replica")) continue;
        check_keys(x, rp, r, keys);
        vsr_rt_replica *rep = &d->replicas[d->n_replicas++];
        rep->line = (int)r->start_mark.line + 1;
        rep->col = (int)r->start_mark.column + 1;
        rep->device = get_str(x, r, rp, "device");
        rep->endpoint = get_str(x, r, rp, "endpoint");
        rep->served_name = get_str(x, r, rp, "served_name");
        char fp[512];
        if (rep->endpoint && rep->device) {
            join(fp, sizeof fp, rp, "device");
            add_error(x, fp, get(x, r, "device"), "replica %d: an attached endpoint cannot set device", i);
        }
        if (rep->device && !is_device(rep->device)) {
            join(fp, sizeof fp, rp, "device");
            add_error(x, fp, get(x, r, "device"),
                      "replica %d: device must be an accelerator name with an optional index, such as cpu, cuda:0 or "
                      "rocm:1",
                      i);
        }
        if (rep->served_name && !rep->endpoint) {
            join(fp, sizeof fp, rp, "served_name");
            add_error(x, fp, get(x, r, "served_name"), "served_name requires an attached endpoint");
        }
        if (rep->endpoint) {
            const char *why = check_endpoint(rep->endpoint);
            join(fp, sizeof fp, rp, "endpoint");
            if (why) add_error(x, fp, get(x, r, "endpoint"), "%s", why);
            for (int j = 0; j < d->n_replicas - 1; j++) {
                const vsr_rt_replica *o = &d->replicas[j];
                const char *sa = rep->served_name ? rep->served_name : d->key;
                const char *sb = o->served_name ? o->served_name : d->key;
                if (o->endpoint && !strcmp(o->endpoint, rep->endpoint) && !strcmp(sa, sb))
                    add_error(x, rp, r, "duplicate attached worker (%s, %s)", rep->endpoint, sa);
            }
        }
        if (!rep->endpoint && !rep->device) rep->device = strdup("auto");
    }
}

static void load_deployment(ctx *x, const char *path, yaml_node_t *k, yaml_node_t *v, vsr_rt_deployment *d) {
    d->key = strdup(scalar(k));
    d->line = (int)k->start_mark.line + 1;
    d->col = (int)k->start_mark.column + 1;
    if (!want_map(x, path, v, "a deployment")) return;
    check_keys(x, path, v, deployment_keys);
    char fp[512];
    char *prov = get_str(x, v, path, "provider");
    if (!prov || !strcmp(prov, "model_runtime")) d->provider = VSR_RT_MODEL_RUNTIME;
    else if (!strcmp(prov, "http")) d->provider = VSR_RT_HTTP;
    else {
        join(fp, sizeof fp, path, "provider");
        add_error(x, fp, get(x, v, "provider"), "provider must be model_runtime or http (found \"%s\")", prov);
    }
    free(prov);
    d->artifact = get_str(x, v, path, "artifact");
    d->revision = get_str(x, v, path, "revision");
    d->device = get_str(x, v, path, "device");
    d->profile = get_str(x, v, path, "profile");
    d->endpoint = get_str(x, v, path, "endpoint");
    d->served_name = get_str(x, v, path, "served_name");
    d->public_name = get_str(x, v, path, "public_name");
    bool abs_path = d->artifact && d->artifact[0] == '/';
    if (d->artifact && !abs_path && !is_hub_id(d->artifact)) {
        join(fp, sizeof fp, path, "artifact");
        add_error(x, fp, get(x, v, "artifact"),
                  "artifact must be a Hub repository ID or an absolute package path (found \"%s\")", d->artifact);
    }
    if (d->revision) {
        join(fp, sizeof fp, path, "revision");
        if (abs_path)
            add_error(x, fp, get(x, v, "revision"), "revision applies only to Hub repositories (artifact %s is a path)",
                      d->artifact);
        else if (!is_hex40(d->revision))
            add_error(x, fp, get(x, v, "revision"),
                      "revision must be a 40-hex commit (found \"%s\"; the Router refuses a branch or a tag in YAML)",
                      d->revision);
    } else if (d->artifact && !abs_path && is_hub_id(d->artifact) && !vsr_catalog_default_revision(d->artifact)) {
        /* Not built in: the store's refs/main may stand for it (a locally installed package). */
        char snap[PATH_MAX], commit[41];
        vsr_err e = {0};
        if (vsr_store_resolve(x->opt ? x->opt->store_dir : NULL, d->artifact, "main", snap, sizeof snap, commit, &e)) {
            join(fp, sizeof fp, path, "artifact");
            add_error(x, fp, get(x, v, "artifact"),
                      "revision must be a 40-hex commit: %s is not a built-in package, so its deployment needs "
                      "revision (%s)",
                      d->artifact, e.msg);
        }
    }
    if (d->profile && !is_profile(d->profile)) {
        join(fp, sizeof fp, path, "profile");
        add_error(x, fp, get(x, v, "profile"), "profile must be a profile name, such as exact or batching");
    } else if (d->profile && strcmp(d->profile, "exact") && strcmp(d->profile, "batching")) {
        /* the profiles vllm-srun serves (its --profile); the supervisor passes the name on */
        join(fp, sizeof fp, path, "profile");
        add_error(x, fp, get(x, v, "profile"), "deployment '%s': unknown profile '%s'; available: batching, exact",
                  d->key, d->profile);
    }
    yaml_node_t *reps = get(x, v, "replicas");
    if (reps && !is_null(reps)) {
        join(fp, sizeof fp, path, "replicas");
        if (d->device || d->endpoint || d->served_name)
            add_error(x, fp, reps, "replicas cannot be combined with deployment device, endpoint or served_name");
        load_replicas(x, fp, reps, d);
    }
    if (d->device && !is_device(d->device)) {
        join(fp, sizeof fp, path, "device");
        add_error(x, fp, get(x, v, "device"),
                  "device must be auto or an accelerator name with an optional index, such as cpu, cuda:0 or rocm:1");
    }
    if (d->served_name && !d->endpoint) {
        join(fp, sizeof fp, path, "served_name");
        add_error(x, fp, get(x, v, "served_name"), "served_name requires an attached endpoint");
    }
    if (d->endpoint) {
        const char *why = check_endpoint(d->endpoint);
        join(fp, sizeof fp, path, "endpoint");
        if (why) add_error(x, fp, get(x, v, "endpoint"), "%s", why);
        if (d->device) {
            join(fp, sizeof fp, path, "device");
            add_error(x, fp, get(x, v, "device"), "an attached endpoint cannot set device");
        }
    }
    if (d->public_name) {
        const char *s = d->public_name;
        size_t n = strlen(s);
        bool bad = !n || isspace((unsigned char)s[0]) || isspace((unsigned char)s[n - 1]) || s[0] == '/' ||
                   strstr(s, "://");
        for (const char *p = s; *p && !bad; p++) bad = isspace((unsigned char)*p);
        if (bad) {
            join(fp, sizeof fp, path, "public_name");
            add_error(x, fp, get(x, v, "public_name"),
                      "public_name must be a trimmed public model ID, not a path or endpoint");
        }
    }
    /* A managed deployment: model_runtime with no attached endpoint anywhere. */
    bool attached = d->endpoint != NULL;
    for (int i = 0; i < d->n_replicas; i++)
        if (d->replicas[i].endpoint) attached = true;
    if (d->provider == VSR_RT_MODEL_RUNTIME && !attached && !d->artifact)
        add_error(x, path, v,
                  "a managed model_runtime deployment requires artifact (a Hub repository or an absolute package path)");
    if (d->provider == VSR_RT_HTTP && !d->endpoint && d->n_replicas == 0)
        add_error(x, path, v, "an http deployment requires endpoint");
    if (!d->profile) d->profile = strdup("exact");
    if (!d->device && !d->endpoint && d->n_replicas == 0) d->device = strdup("auto");
}

const vsr_rt_deployment *vsr_router_deployment(const vsr_router_config *c, const char *key) {
    for (int i = 0; c && key && i < c->n_deployments; i++)
        if (!strcmp(c->deployments[i].key, key)) return &c->deployments[i];
    return NULL;
}

/* ---- family without weights ---- */
static const char *family_of_dir(const char *dir) {
    char p[PATH_MAX + 64];
    struct stat sb;
    snprintf(p, sizeof p, "%s/decision_config.json", dir);
    if (!stat(p, &sb)) return "decision3";
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *cfg = json_load_file(p, 0, NULL);
    const char *fam = NULL;
    /* Vela 2.0 (model_type vela2-decoder, or the 0.3B vela2-unified): span-capable */
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    if (mt && !strncmp(mt, "vela2-", 6)) fam = "span";
    json_t *arch = json_object_get(cfg, "architectures");
    for (size_t i = 0; i < json_array_size(arch); i++) {
        const char *a = json_string_value(json_array_get(arch, i));
        size_t n = a ? strlen(a) : 0, m = strlen("ForTokenClassification");
        if (n >= m && !strcmp(a + n - m, "ForTokenClassification")) fam = "span";
    }
    json_decref(cfg);
    return fam;
}

const char *vsr_router_artifact_family(const vsr_rt_deployment *d, const char *store_dir, const char **source) {
    if (source) *source = NULL;
    if (!d || !d->artifact) return NULL;
    bool abs_path = d->artifact[0] == '/';
    if (!abs_path) {
        const vsr_builtin *b = vsr_catalog_find(d->artifact, d->revision);
        if (b && b->family) {
            if (source) *source = "catalogue";
            return !strcmp(b->family, "vela2") ? "span" : b->family; /* the built-in vllm-sr-c/vela2-* */
        }
    }
    vsr_package *p = NULL;
    vsr_err e = {0};
    if (!vsr_package_open(d->artifact, abs_path ? NULL : (d->revision ? d->revision : "main"), store_dir, &p, &e)) {
        /* Vela 2.0 decoder packages answer span questions (the pii and halu presets): family "span" */
        const char *fam = p->family == VSR_FAMILY_DECISION3                                   ? "decision3"
                          : p->family == VSR_FAMILY_SPAN || p->family == VSR_FAMILY_VELA2 ? "span"
                                                                                            : NULL;
        vsr_package_close(p);
        if (fam) {
            if (source) *source = abs_path ? "package" : "store";
            return fam;
        }
    }
    /* The package did not open (or its family is not one we know): decide from its files as
     * vsr_package_open does, when the folder is there. */
    char dir[PATH_MAX], commit[41];
    if (abs_path) snprintf(dir, sizeof dir, "%s", d->artifact);
    else if (vsr_store_resolve(store_dir, d->artifact, d->revision ? d->revision : "main", dir, sizeof dir, commit, &e))
        return NULL;
    const char *fam = family_of_dir(dir);
    if (fam && source) *source = abs_path ? "package" : "store";
    return fam;
}

/* ---- bindings ---- */
typedef struct binding_kind {
    const char *name, *shorthand, *contract, *question;
} binding_kind;
static const binding_kind binding_kinds[] = {
    {"pii_classifier", "pii", "token_spans.v1", "pii"},
    {"hallucination_detector", "hallucination", "token_spans.v1", "hallucination"},
    {"domain_classifier", "domain", "label_distribution.v1", NULL},
    {"fact_check_classifier", "fact_check", "label_distribution.v1", NULL},
    {"feedback_detector", "feedback", "label_distribution.v1", NULL},
    {"modality_detector", "modality", "label_distribution.v1", NULL},
    {"prompt_guard", "jailbreak", "label_distribution.v1", NULL},
    {"embedding", "embedding", "embedding.v1", NULL},
};

static void load_bindings(ctx *x, const char *path, yaml_node_t *m) {
    if (!want_map(x, path, m, "bindings")) return;
    size_t n = (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
    x->c->bindings = calloc(n ? n : 1, sizeof *x->c->bindings);
    if (!x->c->bindings) return;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        const char *ks = scalar(k);
        if (!ks) continue;
        char bp[512];
        join(bp, sizeof bp, path, ks);
        const binding_kind *kind = NULL;
        for (size_t i = 0; i < sizeof binding_kinds / sizeof binding_kinds[0]; i++)
            if (!strcmp(ks, binding_kinds[i].name) || !strcmp(ks, binding_kinds[i].shorthand)) kind = &binding_kinds[i];
        if (!kind) {
            char list[512] = "";
            for (size_t i = 0; i < sizeof binding_kinds / sizeof binding_kinds[0]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s (%s)", i ? ", " : "",
                         binding_kinds[i].shorthand, binding_kinds[i].name);
            add_error(x, bp, k, "unknown key '%s' (expected one of: %s)", ks, list);
            continue;
        }
        vsr_rt_binding *b = &x->c->bindings[x->c->n_bindings++];
        b->name = strdup(kind->name);
        b->line = (int)k->start_mark.line + 1;
        b->col = (int)k->start_mark.column + 1;
        yaml_node_t *dep_node = v;
        char dp[512];
        join(dp, sizeof dp, "", bp);
        if (is_map(v)) {
            static const char *const keys[] = {"deployment", "contract", NULL};
            check_keys(x, bp, v, keys);
            b->deployment = get_str(x, v, bp, "deployment");
            b->contract = get_str(x, v, bp, "contract");
            dep_node = get(x, v, "deployment");
            join(dp, sizeof dp, bp, "deployment");
            if (!b->deployment) {
                add_error(x, bp, v, "a binding needs deployment: <declared deployment key>");
                continue;
            }
        } else if (scalar(v) && !is_null(v)) {
            b->deployment = strdup(scalar(v));
        } else {
            add_error(x, bp, v, "a binding is a deployment key or {deployment, contract}");
            continue;
        }
        if (b->contract && strcmp(b->contract, kind->contract) && strcmp(b->contract, "decision.v1")) {
            char cp[512];
            join(cp, sizeof cp, bp, "contract");
            add_error(x, cp, get(x, v, "contract"), "binding %s takes contract %s (found \"%s\")", kind->name,
                      kind->contract, b->contract);
        }
        if (!b->contract) b->contract = strdup(kind->contract);
        const vsr_rt_deployment *d = vsr_router_deployment(x->c, b->deployment);
        if (!d) {
            add_error(x, dp, dep_node, "Unknown model deployment '%s'", b->deployment);
            continue;
        }
        if (kind->question && strcmp(b->contract, "decision.v1")) {
            const char *src = NULL;
            const char *fam = vsr_router_artifact_family(d, x->opt ? x->opt->store_dir : NULL, &src);
            if (fam && !strcmp(fam, "decision3"))
                add_error(x, dp, dep_node,
                          "model capability mismatch: deployment \"%s\" serves %s, which has no classify head and no "
                          "ready-made %s question; bind a token head or a model that defines the %s question, such "
                          "as Vela 2.0",
                          d->key, d->artifact, kind->question, kind->question);
        }
    }
}

/* ---- system ---- */
static void load_system(ctx *x, const char *path, yaml_node_t *m) {
    if (!want_map(x, path, m, "system")) return;
    static const char *const keys[] = {"decision_model", NULL};
    check_keys(x, path, m, keys);
    yaml_node_t *dm = get(x, m, "decision_model");
    if (!dm) return;
    x->decision_model_declared = true;
    char dp[512];
    join(dp, sizeof dp, path, "decision_model");
    yaml_node_t *dn = get(x, dm, "deployment");
    size_t nkeys = is_map(dm) ? (size_t)(dm->data.mapping.pairs.top - dm->data.mapping.pairs.start) : 0;
    if (!is_map(dm) || nkeys != 1 || !dn || !scalar(dn) || is_null(dn)) {
        add_error(x, dp, dm, "decision_model must be {deployment: <declared deployment key>}");
        return;
    }
    x->c->decision_model = strdup(scalar(dn));
    char kp[512];
    join(kp, sizeof kp, dp, "deployment");
    const vsr_rt_deployment *d = vsr_router_deployment(x->c, x->c->decision_model);
    if (!d) add_error(x, kp, dn, "decision_model.deployment: unknown deployment '%s'", x->c->decision_model);
    else if (d->provider != VSR_RT_MODEL_RUNTIME)
        add_error(x, kp, dn, "decision_model.deployment '%s' must use provider model_runtime", d->key);
}

static void load_catalog(ctx *x, const char *path, yaml_node_t *m) {
    if (!want_map(x, path, m, "model_catalog")) return;
    static const char *const keys[] = {"signal_timeout_ms", "deployments", "bindings", "system", NULL};
    check_keys(x, path, m, keys);
    char p2[512];
    yaml_node_t *t = get(x, m, "signal_timeout_ms");
    long ms;
    if (t && (!parse_int(scalar(t), &ms) || ms <= 0 || ms > 600000)) {
        join(p2, sizeof p2, path, "signal_timeout_ms");
        add_error(x, p2, t, "signal_timeout_ms must be a positive integer (at most 600000)");
    } else if (t) {
        x->c->signal_timeout_ms = (int)ms;
    }
    yaml_node_t *deps = get(x, m, "deployments");
    join(p2, sizeof p2, path, "deployments");
    if (deps && want_map(x, p2, deps, "deployments")) {
        size_t n = (size_t)(deps->data.mapping.pairs.top - deps->data.mapping.pairs.start);
        x->c->deployments = calloc(n ? n : 1, sizeof *x->c->deployments);
        if (!x->c->deployments) return;
        for (yaml_node_pair_t *p = deps->data.mapping.pairs.start; p < deps->data.mapping.pairs.top; p++) {
            yaml_node_t *k = node(x, p->key);
            const char *ks = scalar(k);
            if (!ks || !*ks || isspace((unsigned char)ks[0]) || isspace((unsigned char)ks[strlen(ks) - 1]) ||
                ks[0] == '@') {
                add_error(x, p2, k, "a deployment name must be a trimmed, non-empty string not starting with '@'");
                continue;
            }
            if (vsr_router_deployment(x->c, ks)) {
                char dp[512];
                join(dp, sizeof dp, p2, ks);
                add_error(x, dp, k, "duplicate deployment '%s'", ks);
                continue;
            }
            char dp[512];
            join(dp, sizeof dp, p2, ks);
            load_deployment(x, dp, k, node(x, p->value), &x->c->deployments[x->c->n_deployments++]);
        }
    }
    yaml_node_t *b = get(x, m, "bindings");
    join(p2, sizeof p2, path, "bindings");
    if (b && !is_null(b)) load_bindings(x, p2, b);
    yaml_node_t *s = get(x, m, "system");
    join(p2, sizeof p2, path, "system");
    if (s && !is_null(s)) load_system(x, p2, s);
}

/* ---- providers ---- */
static void load_providers(ctx *x, const char *path, yaml_node_t *m) {
    if (!want_map(x, path, m, "providers")) return;
    static const char *const keys[] = {"models", "defaults", NULL};
    check_keys(x, path, m, keys);
    char p2[512];
    yaml_node_t *models = get(x, m, "models");
    join(p2, sizeof p2, path, "models");
    if (models && !is_seq(models)) add_error(x, p2, models, "models must be a list");
    else if (models) {
        int n = (int)(models->data.sequence.items.top - models->data.sequence.items.start);
        x->c->models = calloc(n ? (size_t)n : 1, sizeof *x->c->models);
        if (!x->c->models) return;
        for (int i = 0; i < n; i++) {
            yaml_node_t *e = node(x, models->data.sequence.items.start[i]);
            char mp[512];
            join_idx(mp, sizeof mp, p2, i);
            if (!want_map(x, mp, e, "a provider model")) continue;
            static const char *const mkeys[] = {"name", "backend_refs", "api_format", NULL};
            check_keys(x, mp, e, mkeys);
            vsr_rt_model *md = &x->c->models[x->c->n_models++];
            md->line = (int)e->start_mark.line + 1;
            md->col = (int)e->start_mark.column + 1;
            md->name = get_str(x, e, mp, "name");
            if (!md->name) add_error(x, mp, e, "a provider model needs name");
            for (int j = 0; md->name && j < x->c->n_models - 1; j++)
                if (x->c->models[j].name && !strcmp(x->c->models[j].name, md->name)) {
                    char np[512];
                    join(np, sizeof np, mp, "name");
                    add_error(x, np, get(x, e, "name"), "duplicate provider model '%s'", md->name);
                }
            md->api_format = get_str(x, e, mp, "api_format");
            if (md->api_format && strcmp(md->api_format, "openai")) {
                char ap[512];
                join(ap, sizeof ap, mp, "api_format");
                add_error(x, ap, get(x, e, "api_format"), "api_format must be openai (found \"%s\")", md->api_format);
            }
            yaml_node_t *br = get(x, e, "backend_refs");
            char bp[512];
            join(bp, sizeof bp, mp, "backend_refs");
            if (!br || !is_seq(br) || br->data.sequence.items.top == br->data.sequence.items.start) {
                add_error(x, br ? bp : mp, br ? br : e, "backend_refs must be a non-empty list of {name, endpoint, weight}");
                continue;
            }
            int nb = (int)(br->data.sequence.items.top - br->data.sequence.items.start);
            md->backends = calloc((size_t)nb, sizeof *md->backends);
            if (!md->backends) return;
            for (int j = 0; j < nb; j++) {
                yaml_node_t *r = node(x, br->data.sequence.items.start[j]);
                char rp[512];
                join_idx(rp, sizeof rp, bp, j);
                if (!want_map(x, rp, r, "a backend ref")) continue;
                static const char *const bkeys[] = {"name", "endpoint", "weight", NULL};
                check_keys(x, rp, r, bkeys);
                vsr_rt_backend *be = &md->backends[md->n_backends++];
                be->name = get_str(x, r, rp, "name");
                be->endpoint = get_str(x, r, rp, "endpoint");
                be->weight = 1;
                if (!be->endpoint) add_error(x, rp, r, "a backend ref needs endpoint");
                else if (strncmp(be->endpoint, "http://", 7) && strncmp(be->endpoint, "https://", 8)) {
                    char ep[512];
                    join(ep, sizeof ep, rp, "endpoint");
                    add_error(x, ep, get(x, r, "endpoint"), "endpoint must use http:// or https://");
                }
                yaml_node_t *w = get(x, r, "weight");
                if (w && (!parse_num(scalar(w), &be->weight) || be->weight < 0)) {
                    char wp[512];
                    join(wp, sizeof wp, rp, "weight");
                    add_error(x, wp, w, "weight must be a non-negative number");
                }
            }
            double total = 0;
            for (int j = 0; j < md->n_backends; j++) total += md->backends[j].weight;
            if (md->n_backends && total <= 0)
                add_error(x, bp, br, "backend_refs of model '%s' all have weight 0; at least one needs weight > 0",
                          md->name ? md->name : "?");
        }
    }
    yaml_node_t *defs = get(x, m, "defaults");
    join(p2, sizeof p2, path, "defaults");
    if (defs && want_map(x, p2, defs, "defaults")) {
        static const char *const dkeys[] = {"default_model", NULL};
        check_keys(x, p2, defs, dkeys);
        x->c->default_model = get_str(x, defs, p2, "default_model");
        bool found = false;
        for (int i = 0; x->c->default_model && i < x->c->n_models; i++)
            if (x->c->models[i].name && !strcmp(x->c->models[i].name, x->c->default_model)) found = true;
        if (x->c->default_model && !found) {
            char dp[512];
            join(dp, sizeof dp, p2, "default_model");
            add_error(x, dp, get(x, defs, "default_model"), "default_model '%s' is not a providers.models name",
                      x->c->default_model);
        }
    }
}

/* ---- routing ---- */
/* {signal: pii|hallucination}: the span binding of that name is asked its preset question. */
static void load_signal_condition(ctx *x, const char *path, yaml_node_t *n, vsr_rt_condition *q) {
    static const char *const keys[] = {"signal", NULL};
    check_keys(x, path, n, keys);
    q->signal = get_str(x, n, path, "signal");
    char fp[512];
    join(fp, sizeof fp, path, "signal");
    const char *binding = !q->signal                          ? NULL
                          : !strcmp(q->signal, "pii")           ? "pii_classifier"
                          : !strcmp(q->signal, "hallucination") ? "hallucination_detector"
                                                                : NULL;
    if (!binding) {
        add_error(x, fp, get(x, n, "signal"), "signal must be pii or hallucination (found \"%s\")",
                  q->signal ? q->signal : "");
        return;
    }
    for (int i = 0; i < x->c->n_bindings; i++)
        if (!strcmp(x->c->bindings[i].name, binding)) return;
    add_error(x, fp, get(x, n, "signal"),
              "signal %s needs a %s binding (global.model_catalog.bindings.%s: <span deployment>)", q->signal,
              q->signal, q->signal);
}

static void load_condition(ctx *x, const char *path, yaml_node_t *n, vsr_rt_condition *q) {
    q->line = (int)n->start_mark.line + 1;
    q->col = (int)n->start_mark.column + 1;
    if (get(x, n, "signal")) {
        load_signal_condition(x, path, n, q);
        return;
    }
    static const char *const keys[] = {"signal", "question", "type", "instructions", "criteria", "label", "threshold", NULL};
    check_keys(x, path, n, keys);
    q->question = get_str(x, n, path, "question");
    q->type = get_str(x, n, path, "type");
    q->instructions = get_str(x, n, path, "instructions");
    q->label = get_str(x, n, path, "label");
    char fp[512];
    if (!q->question) add_error(x, path, n, "a condition needs question (the question id)");
    if (!q->instructions) add_error(x, path, n, "a condition needs instructions (the question asked)");
    if (!q->type || (strcmp(q->type, "choice") && strcmp(q->type, "noul") && strcmp(q->type, "score"))) {
        join(fp, sizeof fp, path, "type");
        add_error(x, fp, q->type ? get(x, n, "type") : n, "type must be one of [choice, noul, score]");
        return;
    }
    yaml_node_t *cr = get(x, n, "criteria");
    join(fp, sizeof fp, path, "criteria");
    if (cr && is_map(cr)) {
        for (yaml_node_pair_t *p = cr->data.mapping.pairs.start; p < cr->data.mapping.pairs.top; p++) {
            const char *ks = scalar(node(x, p->key));
            const char *vs = scalar(node(x, p->value));
            char **a = realloc(q->criteria, (size_t)(q->n_criteria + 1) * sizeof *a);
            if (a) q->criteria = a;
            char **b = realloc(q->criteria_desc, (size_t)(q->n_criteria + 1) * sizeof *b);
            if (b) q->criteria_desc = b;
            if (!a || !b || !ks) break;
            q->criteria_desc[q->n_criteria] = strdup(vs ? vs : "");
            q->criteria[q->n_criteria++] = strdup(ks);
        }
    } else if (cr && is_seq(cr)) {
        for (yaml_node_item_t *it = cr->data.sequence.items.start; it < cr->data.sequence.items.top; it++) {
            const char *s = scalar(node(x, *it));
            char **a = realloc(q->criteria, (size_t)(q->n_criteria + 1) * sizeof *a);
            if (!a || !s) break;
            q->criteria = a;
            q->criteria[q->n_criteria++] = strdup(s);
        }
    }
    yaml_node_t *th = get(x, n, "threshold");
    if (th) {
        q->has_threshold = parse_num(scalar(th), &q->threshold);
        join(fp, sizeof fp, path, "threshold");
        if (!q->has_threshold) add_error(x, fp, th, "threshold must be a number");
    }
    if (!strcmp(q->type, "choice")) {
        if (!is_map(cr) || q->n_criteria < 2 || q->n_criteria > 255) {
            join(fp, sizeof fp, path, "criteria");
            add_error(x, fp, cr ? cr : n, "criteria must name 2 to 255 options");
        }
        if (!q->label) add_error(x, path, n, "a choice condition needs label (the option that matches)");
        else {
            bool found = false;
            for (int i = 0; i < q->n_criteria; i++)
                if (!strcmp(q->criteria[i], q->label)) found = true;
            if (!found && q->n_criteria) {
                join(fp, sizeof fp, path, "label");
                add_error(x, fp, get(x, n, "label"), "label '%s' is not one of the criteria's options", q->label);
            }
        }
    } else {
        if (!strcmp(q->type, "score") && (!is_seq(cr) || q->n_criteria < 2 || q->n_criteria > 10)) {
            join(fp, sizeof fp, path, "criteria");
            add_error(x, fp, cr ? cr : n, "criteria must list 2 to 10 levels");
        }
        if (!strcmp(q->type, "noul") && cr && !is_map(cr)) {
            join(fp, sizeof fp, path, "criteria");
            add_error(x, fp, cr, "noul criteria may contain only false and true");
        }
        if (q->label) {
            join(fp, sizeof fp, path, "label");
            add_error(x, fp, get(x, n, "label"), "a %s condition matches by threshold, not label", q->type);
        }
        if (!th) add_error(x, path, n, "a %s condition needs threshold", q->type);
    }
}

static bool same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* Every decision's questions go to the decision model in one call, keyed by question id: an id
 * asked twice must be asked the same way (type, instructions, criteria). */
static void check_same_question(ctx *x, const char *path, yaml_node_t *n, const vsr_rt_condition *q) {
    if (!q->question || !q->type) return;
    for (int i = 0; i < x->c->n_decisions; i++) {
        const vsr_rt_decision *d = &x->c->decisions[i];
        for (int j = 0; j < d->n_conditions; j++) {
            const vsr_rt_condition *o = &d->conditions[j];
            if (o == q) return;
            if (!o->question || strcmp(o->question, q->question) || !o->type) continue;
            bool same = !strcmp(o->type, q->type) && same_str(o->instructions, q->instructions) &&
                        o->n_criteria == q->n_criteria;
            for (int k = 0; same && k < q->n_criteria; k++)
                same = !strcmp(o->criteria[k], q->criteria[k]) && !o->criteria_desc == !q->criteria_desc &&
                       (!q->criteria_desc || !strcmp(o->criteria_desc[k], q->criteria_desc[k]));
            if (!same) /* compared with the first definition only */
                add_error(x, path, n,
                          "question '%s' is asked differently in decision '%s' (line %d); one question id has one "
                          "type, instructions and criteria (the decision model is asked it once per request)",
                          q->question, d->name ? d->name : "?", o->line);
            return;
        }
    }
}

static void load_decisions(ctx *x, const char *path, yaml_node_t *seq) {
    if (!is_seq(seq)) {
        add_error(x, path, seq, "decisions must be a list");
        return;
    }
    int n = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    x->c->decisions = calloc(n ? (size_t)n : 1, sizeof *x->c->decisions);
    if (!x->c->decisions) return;
    for (int i = 0; i < n; i++) {
        yaml_node_t *e = node(x, seq->data.sequence.items.start[i]);
        char dp[512], fp[512];
        join_idx(dp, sizeof dp, path, i);
        if (!want_map(x, dp, e, "a decision")) continue;
        static const char *const keys[] = {"name", "priority", "rules", "modelRefs", NULL};
        check_keys(x, dp, e, keys);
        vsr_rt_decision *d = &x->c->decisions[x->c->n_decisions++];
        d->line = (int)e->start_mark.line + 1;
        d->col = (int)e->start_mark.column + 1;
        d->name = get_str(x, e, dp, "name");
        if (!d->name) add_error(x, dp, e, "a decision needs name");
        for (int j = 0; d->name && j < x->c->n_decisions - 1; j++)
            if (x->c->decisions[j].name && !strcmp(x->c->decisions[j].name, d->name)) {
                join(fp, sizeof fp, dp, "name");
                add_error(x, fp, get(x, e, "name"), "duplicate decision '%s'", d->name);
            }
        yaml_node_t *pr = get(x, e, "priority");
        long prio = 0;
        if (pr && !parse_int(scalar(pr), &prio)) {
            join(fp, sizeof fp, dp, "priority");
            add_error(x, fp, pr, "priority must be an integer");
        }
        d->priority = (int)prio;
        yaml_node_t *mr = get(x, e, "modelRefs");
        join(fp, sizeof fp, dp, "modelRefs");
        if (!is_seq(mr) || mr->data.sequence.items.top == mr->data.sequence.items.start)
            add_error(x, mr ? fp : dp, mr ? mr : e, "modelRefs must be a non-empty list of {model: <providers.models name>}");
        else {
            int nm = (int)(mr->data.sequence.items.top - mr->data.sequence.items.start);
            d->model_refs = calloc((size_t)nm, sizeof *d->model_refs);
            for (int j = 0; d->model_refs && j < nm; j++) {
                yaml_node_t *r = node(x, mr->data.sequence.items.start[j]);
                char rp[512];
                join_idx(rp, sizeof rp, fp, j);
                if (!want_map(x, rp, r, "a modelRef")) continue;
                static const char *const rkeys[] = {"model", NULL};
                check_keys(x, rp, r, rkeys);
                char *m = get_str(x, r, rp, "model");
                if (!m) {
                    add_error(x, rp, r, "a modelRef needs model");
                    continue;
                }
                bool found = false;
                for (int k = 0; k < x->c->n_models; k++)
                    if (x->c->models[k].name && !strcmp(x->c->models[k].name, m)) found = true;
                if (!found) {
                    char mp[512];
                    join(mp, sizeof mp, rp, "model");
                    add_error(x, mp, get(x, r, "model"), "model '%s' is not a providers.models name", m);
                }
                d->model_refs[d->n_model_refs++] = m;
            }
        }
        yaml_node_t *rules = get(x, e, "rules");
        char rp[512];
        join(rp, sizeof rp, dp, "rules");
        if (!rules) {
            add_error(x, dp, e, "a decision needs rules");
            continue;
        }
        if (!want_map(x, rp, rules, "rules")) continue;
        static const char *const rkeys[] = {"operator", "on_unknown", "conditions", NULL};
        check_keys(x, rp, rules, rkeys);
        char *op = get_str(x, rules, rp, "operator");
        if (op && strcmp(op, "AND") && strcmp(op, "OR")) {
            join(fp, sizeof fp, rp, "operator");
            add_error(x, fp, get(x, rules, "operator"), "operator must be AND or OR (found \"%s\")", op);
        }
        d->operator_or = op && !strcmp(op, "OR");
        free(op);
        char *ou = get_str(x, rules, rp, "on_unknown");
        if (ou && strcmp(ou, "no_match") && strcmp(ou, "fail_request")) {
            join(fp, sizeof fp, rp, "on_unknown");
            add_error(x, fp, get(x, rules, "on_unknown"), "on_unknown must be no_match or fail_request (found \"%s\")",
                      ou);
        }
        d->fail_request = ou && !strcmp(ou, "fail_request");
        free(ou);
        yaml_node_t *cs = get(x, rules, "conditions");
        join(fp, sizeof fp, rp, "conditions");
        if (!is_seq(cs) || cs->data.sequence.items.top == cs->data.sequence.items.start) {
            add_error(x, cs ? fp : rp, cs ? cs : rules, "conditions must be a non-empty list");
            continue;
        }
        int nc = (int)(cs->data.sequence.items.top - cs->data.sequence.items.start);
        d->conditions = calloc((size_t)nc, sizeof *d->conditions);
        for (int j = 0; d->conditions && j < nc; j++) {
            yaml_node_t *cn = node(x, cs->data.sequence.items.start[j]);
            char cp[512];
            join_idx(cp, sizeof cp, fp, j);
            if (!want_map(x, cp, cn, "a condition")) continue;
            vsr_rt_condition *q = &d->conditions[d->n_conditions++];
            load_condition(x, cp, cn, q);
            check_same_question(x, cp, cn, q);
        }
    }
    bool asks = false; /* a question needs the decision model; span signals do not */
    for (int i = 0; i < x->c->n_decisions; i++)
        for (int j = 0; j < x->c->decisions[i].n_conditions; j++)
            if (x->c->decisions[i].conditions[j].question) asks = true;
    if (asks && !x->decision_model_declared)
        add_error(x, path, seq, "routing.decisions need global.model_catalog.system.decision_model");
}

static void load_listeners(ctx *x, const char *path, yaml_node_t *seq) {
    if (!is_seq(seq)) {
        add_error(x, path, seq, "listeners must be a list");
        return;
    }
    int n = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    x->c->listeners = calloc(n ? (size_t)n : 1, sizeof *x->c->listeners);
    if (!x->c->listeners) return;
    for (int i = 0; i < n; i++) {
        yaml_node_t *e = node(x, seq->data.sequence.items.start[i]);
        char lp[512];
        join_idx(lp, sizeof lp, path, i);
        if (!want_map(x, lp, e, "a listener")) continue;
        static const char *const keys[] = {"name", "address", "port", NULL};
        check_keys(x, lp, e, keys);
        vsr_rt_listener *l = &x->c->listeners[x->c->n_listeners++];
        l->name = get_str(x, e, lp, "name");
        l->address = get_str(x, e, lp, "address");
        if (!l->address) l->address = strdup("127.0.0.1");
        yaml_node_t *p = get(x, e, "port");
        long port = 8899;
        if (p && (!parse_int(scalar(p), &port) || port < 1 || port > 65535)) {
            char pp[512];
            join(pp, sizeof pp, lp, "port");
            add_error(x, pp, p, "port must be an integer from 1 to 65535");
        }
        l->port = (int)port;
    }
}

static void load_root(ctx *x, yaml_node_t *root) {
    if (!root || is_null(root)) {
        add_error(x, "", root, "the configuration is empty");
        return;
    }
    if (!want_map(x, "", root, "the configuration")) return;
    static const char *const keys[] = {"version", "global", "providers", "routing", "listeners", NULL};
    check_keys(x, "", root, keys);
    yaml_node_t *g = get(x, root, "global");
    if (g && want_map(x, "global", g, "global")) {
        static const char *const gkeys[] = {"model_catalog", NULL};
        check_keys(x, "global", g, gkeys);
        yaml_node_t *mc = get(x, g, "model_catalog");
        if (mc) load_catalog(x, "global.model_catalog", mc);
    }
    yaml_node_t *p = get(x, root, "providers");
    if (p) load_providers(x, "providers", p);
    yaml_node_t *r = get(x, root, "routing");
    if (r && want_map(x, "routing", r, "routing")) {
        static const char *const rkeys[] = {"decisions", NULL};
        check_keys(x, "routing", r, rkeys);
        yaml_node_t *d = get(x, r, "decisions");
        if (d) load_decisions(x, "routing.decisions", d);
    }
    yaml_node_t *l = get(x, root, "listeners");
    if (l) load_listeners(x, "listeners", l);
}

vsr_router_config *vsr_router_config_parse(const char *yaml, size_t len, const char *name,
                                           const vsr_router_options *opt) {
    vsr_router_config *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->file = strdup(name ? name : "(config)");
    c->signal_timeout_ms = 2000;
    ctx x = {.c = c, .opt = opt};
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        add_error(&x, "", NULL, "cannot initialise the YAML parser");
        return c;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        vsr_rt_error *e = realloc(c->errors, sizeof *e);
        if (e) {
            c->errors = e;
            c->n_errors = 1;
            char msg[512];
            snprintf(msg, sizeof msg, "invalid YAML: %s%s%s", parser.problem ? parser.problem : "syntax error",
                     parser.context ? " " : "", parser.context ? parser.context : "");
            e->path = strdup("(document)");
            e->msg = strdup(msg);
            e->line = (int)parser.problem_mark.line + 1;
            e->col = (int)parser.problem_mark.column + 1;
        }
        yaml_parser_delete(&parser);
        return c;
    }
    x.doc = &doc;
    load_root(&x, yaml_document_get_root_node(&doc));
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return c;
}

vsr_router_config *vsr_router_config_load(const char *path, const vsr_router_options *opt) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        vsr_router_config *c = calloc(1, sizeof *c);
        if (!c) return NULL;
        c->file = strdup(path);
        c->errors = calloc(1, sizeof *c->errors);
        if (c->errors) {
            char msg[512];
            snprintf(msg, sizeof msg, "cannot read %s: %s", path, strerror(errno));
            c->n_errors = 1;
            c->errors[0].path = strdup("(document)");
            c->errors[0].msg = strdup(msg);
        }
        return c;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    fclose(f);
    vsr_router_config *c = vsr_router_config_parse(buf ? buf : "", len, path, opt);
    free(buf);
    return c;
}

const char *vsr_rt_error_format(const vsr_rt_error *e, char *buf, size_t n) {
    if (e->line > 0) snprintf(buf, n, "%s (line %d, column %d): %s", e->path, e->line, e->col, e->msg);
    else snprintf(buf, n, "%s: %s", e->path, e->msg);
    return buf;
}

void vsr_router_config_free(vsr_router_config *c) {
    if (!c) return;
    for (int i = 0; i < c->n_deployments; i++) {
        vsr_rt_deployment *d = &c->deployments[i];
        free(d->key), free(d->artifact), free(d->revision), free(d->device), free(d->profile);
        free(d->endpoint), free(d->served_name), free(d->public_name);
        for (int j = 0; j < d->n_replicas; j++)
            free(d->replicas[j].device), free(d->replicas[j].endpoint), free(d->replicas[j].served_name);
        free(d->replicas);
    }
    free(c->deployments);
    for (int i = 0; i < c->n_bindings; i++)
        free(c->bindings[i].name), free(c->bindings[i].deployment), free(c->bindings[i].contract);
    free(c->bindings);
    free(c->decision_model);
    for (int i = 0; i < c->n_models; i++) {
        vsr_rt_model *m = &c->models[i];
        free(m->name), free(m->api_format);
        for (int j = 0; j < m->n_backends; j++) free(m->backends[j].name), free(m->backends[j].endpoint);
        free(m->backends);
    }
    free(c->models);
    free(c->default_model);
    for (int i = 0; i < c->n_decisions; i++) {
        vsr_rt_decision *d = &c->decisions[i];
        free(d->name);
        for (int j = 0; j < d->n_conditions; j++) {
            vsr_rt_condition *q = &d->conditions[j];
            free(q->signal), free(q->question), free(q->type), free(q->instructions), free(q->label);
            for (int k = 0; k < q->n_criteria; k++) {
                free(q->criteria[k]);
                if (q->criteria_desc) free(q->criteria_desc[k]);
            }
            free(q->criteria);
            free(q->criteria_desc);
        }
        free(d->conditions);
        for (int j = 0; j < d->n_model_refs; j++) free(d->model_refs[j]);
        free(d->model_refs);
    }
    free(c->decisions);
    for (int i = 0; i < c->n_listeners; i++) free(c->listeners[i].name), free(c->listeners[i].address);
    free(c->listeners);
    for (int i = 0; i < c->n_errors; i++) free(c->errors[i].path), free(c->errors[i].msg);
    free(c->errors);
    free(c->file);
    free(c);
}
