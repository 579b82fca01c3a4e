/* A /v1/decisions request for a vela2 package (reference-profiles-spans.md 3.1, 3.7;
 * reference-runtime.md 1.4, 2.1): typed state parts, questions of the five types, the presets
 * of calibration.json, `over`, `threshold`, `head`, `overflow`, `require_full_input`.
 * A question that does not validate gets invalid_question and never affects the others. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "vela2/decide_internal.h"

const char *const v2_kind_names[V2_KIND_COUNT] = {"choice", "noul", "score", "set", "span"};
const char *const v2_role_names[V2_ROLES] = {"user", "context", "answer"};

/* STATE_KEY_ROLES */
static const struct {
    const char *key;
    int role;
} key_roles[] = {{"request", V2_USER},   {"user", V2_USER},     {"prompt", V2_USER},
                 {"source", V2_CONTEXT}, {"context", V2_CONTEXT}, {"document", V2_CONTEXT},
                 {"tools", V2_CONTEXT},  {"previous_answer", V2_CONTEXT}, {"answer", V2_ANSWER},
                 {"response", V2_ANSWER}};

static int known_role(const char *key) {
    char low[64];
    size_t n = strlen(key);
    if (n >= sizeof low) return -1;
    for (size_t i = 0; i <= n; i++) low[i] = (char)((key[i] >= 'A' && key[i] <= 'Z') ? key[i] + 32 : key[i]);
    for (size_t i = 0; i < sizeof key_roles / sizeof key_roles[0]; i++)
        if (!strcmp(key_roles[i].key, low)) return key_roles[i].role;
    return -1;
}

static const char NOUL_DEFAULT_NO[] = "No. The statement or question is not satisfied.";
static const char NOUL_DEFAULT_YES[] = "Yes. The statement or question is satisfied.";
static const char *const PRESETS[3] = {"pii", "halu", "relevance"};

char *v2_canonical(const json_t *v) { return vsr_json_dumps_python(v, true, false, true); }

char *v2_content_text(const json_t *v) {
    return json_is_string(v) ? strdup(json_string_value(v)) : v2_canonical(v);
}

static bool py_blank(const char *s) {
    v2_text t;
    if (v2_text_init(&t, s, strlen(s), NULL) != VSR_OK) return false;
    bool blank = true;
    for (int32_t i = 0; i < t.n && blank; i++) blank = v2_py_space(t.cp[i]);
    v2_text_free(&t);
    return blank;
}

static int32_t cp_len(const char *s) {
    int32_t n = 0;
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) n += (*u & 0xc0) != 0x80;
    return n;
}

void v2_qfail(v2_question *q, const char *code, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    q->err_code = code;
    free(q->err_msg);
    q->err_msg = strdup(buf);
}

int v2_part_index(const v2_request *r, int role) {
    for (int i = 0; i < r->n_parts; i++)
        if (r->parts[i].role == role) return i;
    return -1;
}

/* ---- the state ---- */

static bool add_part(v2_request *r, int role, char *text) {
    if (!text) return false;
    v2_part *p = &r->parts[r->n_parts++];
    memset(p, 0, sizeof *p);
    p->role = role;
    p->text = text;
    return true;
}

static bool add_field(v2_request *r, const char *key, int role, int32_t a, int32_t b) {
    v2_field *f = realloc(r->fields, sizeof *f * (size_t)(r->n_fields + 1));
    if (!f) return false;
    r->fields = f;
    f[r->n_fields++] = (v2_field){strdup(key), role, a, b};
    return true;
}

/* read_state: a string is the user part (a string holding a JSON object is that object); an
 * array is canonical JSON in the user part; an object maps its keys to parts. */
static const char *read_state(v2_request *r, const json_t *state) {
    json_t *decoded = NULL;
    if (json_is_string(state)) {
        const char *s = json_string_value(state);
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
        if (*s == '{') {
            decoded = json_loads(s, JSON_REJECT_DUPLICATES, NULL);
            if (decoded && json_is_object(decoded)) state = decoded;
        }
    }
    const char *why = NULL;
    if (json_is_string(state)) {
        if (py_blank(json_string_value(state))) why = "state must not be empty or whitespace";
        else if (!add_part(r, V2_USER, strdup(json_string_value(state))) ||
                 !add_field(r, "request", V2_USER, 0, cp_len(json_string_value(state))))
            why = "out of memory";
    } else if (json_is_array(state)) {
        char *text = v2_canonical(state);
        if (!text || !add_part(r, V2_USER, text) || !add_field(r, "request", V2_USER, 0, cp_len(text)))
            why = "out of memory";
    } else if (!json_is_object(state) || json_object_size(state) == 0) {
        why = "state must be a non-empty string, JSON object or JSON array";
    } else {
        for (int role = 0; role < V2_ROLES && !why; role++) {
            int count = 0;
            bool all_known = true;
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)state, k, v) {
                int kr = known_role(k);
                if ((kr < 0 ? V2_CONTEXT : kr) != role) continue;
                count++;
                all_known &= kr >= 0;
            }
            if (!count) continue;
            vsr_strbuf b = {0};
            json_object_foreach((json_t *)state, k, v) {
                int kr = known_role(k);
                if ((kr < 0 ? V2_CONTEXT : kr) != role) continue;
                char *value = v2_content_text(v);
                if (!value) {
                    why = "out of memory";
                    break;
                }
                if (count == 1 && all_known) {
                    add_field(r, k, role, 0, cp_len(value));
                    vsr_strbuf_puts(&b, value);
                } else {
                    if (b.n) vsr_strbuf_puts(&b, "\n\n");
                    int32_t at = b.p ? cp_len(b.p) : 0;
                    int32_t head = cp_len(k) + 2;
                    add_field(r, k, role, at + head, at + head + cp_len(value));
                    vsr_strbuf_printf(&b, "%s:\n%s", k, value);
                }
                free(value);
            }
            char *text = vsr_strbuf_take(&b, NULL);
            if (!why && !text) why = "out of memory";
            if (why) {
                free(text);
                break;
            }
            if (py_blank(text)) {
                free(text);
                static char msg[64];
                snprintf(msg, sizeof msg, "the %s part of the state is empty", v2_role_names[role]);
                why = msg; /* copied by the caller at once */
                break;
            }
            add_part(r, role, text);
        }
    }
    json_decref(decoded);
    return why;
}

/* ---- questions ---- */

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

/* Python repr of a sorted list of names: ['a', 'b'] */
static void name_list(char *out, size_t n, const char **names, int count) {
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    size_t len = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < count && len < n; i++) len += (size_t)snprintf(out + len, n - len, "%s'%s'", i ? ", " : "", names[i]);
    if (len < n) snprintf(out + len, n - len, "]");
}

static bool text_value(const json_t *v) {
    return json_is_string(v) ? !py_blank(json_string_value(v)) : json_is_object(v) || json_is_array(v);
}

static bool set_options(v2_question *q, int n) {
    q->n_opt = n;
    q->names = calloc((size_t)n, sizeof *q->names);
    q->descs = calloc((size_t)n, sizeof *q->descs);
    q->keys = calloc((size_t)n, sizeof *q->keys);
    if (!q->names || !q->descs || !q->keys) {
        v2_qfail(q, "internal_error", "out of memory");
        return false;
    }
    return true;
}

#define QFAIL(...)                                                                                 \
    do {                                                                                           \
        v2_qfail(q, "invalid_question", __VA_ARGS__);                                              \
        return false;                                                                              \
    } while (0)

/* {key: description} or the ordered [{key, description}] form (`ordered` names it). */
static bool named_options(v2_question *q, const json_t *crit, const json_t *ord, const char *ordname, int min,
                          const char *what) {
    size_t n = crit ? (json_is_object(crit) ? json_object_size(crit) : 0) : (json_is_array(ord) ? json_array_size(ord) : 0);
    if (crit ? !json_is_object(crit) : !json_is_array(ord)) n = 0;
    if (n < (size_t)min || n > 255) {
        if (crit || !ord) QFAIL("criteria must name %d to 255 %s", min, what);
        QFAIL("%s must list %d to 255 %s", ordname, min, what);
    }
    if (!set_options(q, (int)n)) return false;
    for (size_t i = 0; i < n; i++) {
        const char *k;
        const json_t *desc;
        if (crit) {
            void *it = json_object_iter((json_t *)crit);
            for (size_t s = 0; s < i; s++) it = json_object_iter_next((json_t *)crit, it);
            k = json_object_iter_key(it);
            desc = json_object_iter_value(it);
        } else {
            const json_t *e = json_array_get(ord, i);
            if (!json_is_object(e)) QFAIL("%s entries must be objects with key and description", ordname);
            const char *kk;
            json_t *vv;
            json_object_foreach((json_t *)e, kk, vv) if (strcmp(kk, "key") && strcmp(kk, "description"))
                QFAIL("%s entries take only key and description, not '%s'", ordname, kk);
            const json_t *jk = json_object_get(e, "key");
            if (!json_is_string(jk)) QFAIL("%s keys must be unique nonempty strings", ordname);
            k = json_string_value(jk);
            desc = json_object_get(e, "description");
        }
        if (!*k || py_blank(k)) QFAIL("%s keys must be unique nonempty strings", crit ? "criteria" : ordname);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(q->names[j], k)) QFAIL("%s keys must be unique nonempty strings", crit ? "criteria" : ordname);
        if (desc && !json_is_null(desc) && !text_value(desc))
            QFAIL("option '%s': a description must be non-blank text, an object, an array or null", k);
        q->names[i] = strdup(k);
        q->keys[i] = strdup(k);
        q->descs[i] = desc && !json_is_null(desc) ? v2_content_text(desc) : strdup("");
        if (!q->names[i] || !q->keys[i] || !q->descs[i]) {
            v2_qfail(q, "internal_error", "out of memory");
            return false;
        }
    }
    return true;
}

static bool noul_options(v2_question *q, const json_t *crit, const json_t *ord) {
    const json_t *desc[2] = {NULL, NULL};
    if (crit) {
        if (!json_is_object(crit)) QFAIL("noul criteria may contain only false and true");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)crit, k, v) {
            int idx = !strcmp(k, "false") ? 0 : !strcmp(k, "true") ? 1 : -1;
            if (idx < 0) QFAIL("noul criteria may contain only false and true");
            desc[idx] = v;
        }
    } else if (ord) {
        if (!json_is_array(ord) || json_array_size(ord) < 1 || json_array_size(ord) > 2)
            QFAIL("noul choices may contain only false and true");
        for (size_t i = 0; i < json_array_size(ord); i++) {
            const json_t *e = json_array_get(ord, i);
            const json_t *jk = json_is_object(e) ? json_object_get(e, "key") : NULL;
            const char *k = json_is_string(jk) ? json_string_value(jk) : "";
            int idx = !strcmp(k, "false") ? 0 : !strcmp(k, "true") ? 1 : -1;
            if (idx < 0 || desc[idx]) QFAIL("noul choices may contain only false and true");
            desc[idx] = json_object_get(e, "description") ? json_object_get(e, "description") : json_null();
        }
    }
    if (!set_options(q, 2)) return false;
    static const char *const names[2] = {"no", "yes"}, *const keys[2] = {"false", "true"};
    const char *dflt[2] = {NOUL_DEFAULT_NO, NOUL_DEFAULT_YES};
    for (int i = 0; i < 2; i++) {
        if (desc[i] && !json_is_null(desc[i]) && !text_value(desc[i]))
            QFAIL("noul %s: a description must be non-blank text, an object or an array", keys[i]);
        q->names[i] = strdup(names[i]);
        q->keys[i] = strdup(keys[i]);
        q->descs[i] = desc[i] && !json_is_null(desc[i]) ? v2_content_text(desc[i]) : strdup(dflt[i]);
    }
    return true;
}

/* Score levels are the options in order (no descriptions), or the relevance preset's named
 * levels (names with the level texts as descriptions). */
static bool score_options(v2_question *q, const json_t *lv, const char *src, const json_t *named) {
    if (!json_is_array(lv) || json_array_size(lv) < 2 || json_array_size(lv) > 10) QFAIL("%s must list 2 to 10 levels", src);
    int n = (int)json_array_size(lv);
    if (!set_options(q, n)) return false;
    q->legend = calloc((size_t)n, sizeof *q->legend);
    if (!q->legend) QFAIL("out of memory");
    const char *nk = NULL;
    void *it = named ? json_object_iter((json_t *)named) : NULL;
    for (int i = 0; i < n; i++) {
        const json_t *v = json_array_get(lv, (size_t)i);
        if (!text_value(v)) QFAIL("score levels must be distinct and non-empty");
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        char *text = v2_content_text(v);
        for (int j = 0; j < i && text; j++)
            if (!strcmp(q->legend[j], text)) {
                free(text);
                QFAIL("score levels must be distinct and non-empty");
            }
        if (it) {
            nk = json_object_iter_key(it);
            it = json_object_iter_next((json_t *)named, it);
        }
        q->keys[i] = strdup(key);
        q->legend[i] = text;
        q->names[i] = strdup(named ? nk : text ? text : "");
        q->descs[i] = strdup(named && text ? text : "");
    }
    return true;
}

static const char *const choice_fields[] = {"type", "instructions", "criteria", "choices", "over", "preset",
                                            "overflow", "require_full_input", NULL};
static const char *const score_fields[] = {"type", "instructions", "criteria", "levels", "over", "preset",
                                           "overflow", "require_full_input", NULL};
static const char *const set_fields[] = {"type", "instructions", "criteria", "labels", "threshold", "over",
                                         "preset", "overflow", "require_full_input", NULL};
static const char *const span_fields[] = {"type", "instructions", "criteria", "labels", "threshold", "head", "over",
                                          "preset", "overflow", "require_full_input", NULL};

static bool unknown_fields(v2_question *q, const json_t *jq, const char *const *allowed) {
    const char *bad[16];
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)jq, k, v) if (!in_list(k, allowed) && n < 16) bad[n++] = k;
    if (!n) return true;
    char list[256];
    name_list(list, sizeof list, bad, n);
    QFAIL("%s questions do not take %s", v2_kind_names[q->kind], list);
}

/* A preset expands to the package's trained schema; over, threshold and overflow stay the
 * caller's. Returns the expanded question (new reference) or NULL with q failed. */
static json_t *expand_preset(const vsr_v2_decider *d, v2_question *q, const json_t *jq, const json_t **named) {
    const json_t *p = json_object_get(jq, "preset");
    int which = -1;
    for (int i = 0; i < 3; i++)
        if (json_is_string(p) && !strcmp(json_string_value(p), PRESETS[i]) && d->cal.schema[i]) which = i;
    if (which < 0) {
        const char *names[3];
        int n = 0;
        for (int i = 0; i < d->n_presets; i++) names[n++] = d->presets[i];
        char list[128];
        size_t len = (size_t)snprintf(list, sizeof list, "[");
        for (int i = 0; i < n; i++) len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", i ? ", " : "", names[i]);
        snprintf(list + len, sizeof list - len, "]");
        v2_qfail(q, "invalid_question", "preset must be one of %s", list);
        return NULL;
    }
    const char *k;
    json_t *v;
    static const char *const allowed[] = {"preset", "type", "over", "threshold", "overflow", NULL};
    json_object_foreach((json_t *)jq, k, v) if (!in_list(k, allowed)) {
        v2_qfail(q, "invalid_question", "a preset question takes only preset, type, over, threshold and overflow");
        return NULL;
    }
    const json_t *schema = d->cal.schema[which];
    const char *type = which == 2 ? "score" : "span";
    const json_t *jt = json_object_get(jq, "type");
    if (jt && !json_is_null(jt) && !(json_is_string(jt) && !strcmp(json_string_value(jt), type))) {
        v2_qfail(q, "invalid_question", "preset %s is a %s question", PRESETS[which], type);
        return NULL;
    }
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(type));
    json_object_set(e, "instructions", json_object_get(schema, "text"));
    if (which == 2) {
        const json_t *levels = json_object_get(schema, "levels");
        json_t *crit = json_array();
        json_object_foreach((json_t *)levels, k, v) json_array_append(crit, v);
        json_object_set_new(e, "criteria", crit);
        *named = levels;
    } else {
        json_object_set(e, "criteria", json_object_get(schema, "labels"));
    }
    json_object_set_new(e, "preset", json_string(PRESETS[which]));
    static const char *const kept[] = {"over", "threshold", "overflow"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(jq, kept[i])) json_object_set(e, kept[i], json_object_get(jq, kept[i]));
    return e;
}

static bool resolve_over(const v2_request *r, v2_question *q, const json_t *over) {
    bool list = json_is_array(over);
    size_t n = list ? json_array_size(over) : 1;
    bool want[V2_ROLES] = {false, false, false};
    for (size_t i = 0; i < n; i++) {
        const json_t *it = list ? json_array_get(over, i) : over;
        if (!json_is_string(it)) QFAIL("over must be a state key, a part name or a list of them");
        const char *s = json_string_value(it);
        int role = -1;
        for (int f = 0; f < r->n_fields && role < 0; f++)
            if (!strcmp(r->fields[f].key, s)) {
                role = r->fields[f].role;
                if (!list) {
                    q->has_range = true;
                    q->range_start = r->fields[f].start;
                    q->range_end = r->fields[f].end;
                }
            }
        for (int p = 0; p < V2_ROLES && role < 0; p++)
            if (!strcmp(v2_role_names[p], s) && v2_part_index(r, p) >= 0) role = p;
        if (role < 0) {
            /* exact key of STATE_KEY_ROLES (case-sensitive here) naming a present part */
            for (size_t k = 0; k < sizeof key_roles / sizeof key_roles[0] && role < 0; k++)
                if (!strcmp(key_roles[k].key, s) && v2_part_index(r, key_roles[k].role) >= 0) role = key_roles[k].role;
        }
        if (role < 0) QFAIL("'%s' is not a field of the state", s);
        want[role] = true;
    }
    if (n == 0) QFAIL("over must not be empty");
    q->n_over = 0;
    for (int p = 0; p < r->n_parts; p++)
        if (want[r->parts[p].role]) q->over[q->n_over++] = r->parts[p].role;
    return true;
}

static void default_over(const v2_request *r, v2_question *q) {
    if (q->kind == V2_SPAN) {
        int role = v2_part_index(r, V2_ANSWER) >= 0 ? V2_ANSWER : v2_part_index(r, V2_USER) >= 0 ? V2_USER : r->parts[0].role;
        q->n_over = 1;
        q->over[0] = role;
        return;
    }
    q->n_over = r->n_parts;
    for (int p = 0; p < r->n_parts; p++) q->over[p] = r->parts[p].role;
}

static bool build_question(const vsr_v2_decider *d, const v2_request *r, v2_question *q, const json_t *jq0) {
    q->kind = -1;
    q->threshold = NAN;
    q->head = V2_HEAD_NONE;
    if (!json_is_object(jq0)) QFAIL("a question must be an object");
    json_t *expanded = NULL;
    const json_t *named = NULL, *jq = jq0;
    const json_t *jp = json_object_get(jq0, "preset");
    if (jp && !json_is_null(jp)) {
        if (!(expanded = expand_preset(d, q, jq0, &named))) return false;
        jq = expanded;
    }
    bool ok = false;
    const json_t *jt = json_object_get(jq, "type");
    for (int t = 0; t < V2_KIND_COUNT; t++)
        if (json_is_string(jt) && !strcmp(json_string_value(jt), v2_kind_names[t])) q->kind = t;
    if (q->kind < 0) {
        v2_qfail(q, "invalid_question", "type must be one of ['noul', 'choice', 'score', 'set', 'span']");
        goto out;
    }
    static const char *const *fields[V2_KIND_COUNT] = {choice_fields, choice_fields, score_fields, set_fields, span_fields};
    if (!unknown_fields(q, jq, fields[q->kind])) goto out;
    const json_t *ji = json_object_get(jq, "instructions");
    if (!ji || json_is_null(ji)) {
        v2_qfail(q, "invalid_question", "instructions is required");
        goto out;
    }
    if (json_is_string(ji) && py_blank(json_string_value(ji))) {
        v2_qfail(q, "invalid_question", "instructions must not be empty or whitespace");
        goto out;
    }
    if (!text_value(ji)) {
        v2_qfail(q, "invalid_question", "instructions must be non-blank text, an object or an array");
        goto out;
    }
    const json_t *crit = json_object_get(jq, "criteria");
    if (crit && json_is_null(crit)) crit = NULL;
    static const char *const ordered[V2_KIND_COUNT] = {"choices", "choices", "levels", "labels", "labels"};
    const json_t *ord = json_object_get(jq, ordered[q->kind]);
    if (ord && json_is_null(ord)) ord = NULL;
    if (crit && ord) {
        v2_qfail(q, "invalid_question", "use criteria or %s, not both", ordered[q->kind]);
        goto out;
    }
    bool opts;
    switch ((v2_kind)q->kind) {
    case V2_CHOICE: opts = named_options(q, crit, ord, "choices", 2, "options"); break;
    case V2_NOUL: opts = noul_options(q, crit, ord); break;
    case V2_SCORE:
        opts = score_options(q, crit ? crit : ord, crit || !ord ? "criteria" : "levels", named);
        break;
    default: opts = named_options(q, crit, ord, "labels", 1, "labels"); break;
    }
    if (!opts) goto out;
    q->text = v2_content_text(ji);
    q->key = strdup(named || (jp && !json_is_null(jp)) ? json_string_value(json_object_get(jq, "preset")) : q->id);
    q->abstain = q->kind == V2_CHOICE || q->kind == V2_NOUL;
    const json_t *over = json_object_get(jq, "over");
    if (over && !json_is_null(over)) {
        if (!resolve_over(r, q, over)) goto out;
    } else {
        default_over(r, q);
    }
    if (q->kind != V2_SPAN) {
        q->has_range = false;
    } else if (q->n_over > 1) {
        v2_qfail(q, "invalid_question", "a span question reads one part");
        goto out;
    }
    const json_t *th = json_object_get(jq, "threshold");
    if (th && !json_is_null(th)) {
        if (!json_is_number(th) || !(json_number_value(th) >= 0.0 && json_number_value(th) <= 1.0)) {
            v2_qfail(q, "invalid_question", "threshold must be a number in [0, 1]");
            goto out;
        }
        q->threshold = json_number_value(th);
    }
    const json_t *of = json_object_get(jq, "overflow");
    if (of && !json_is_null(of)) {
        if (!json_is_string(of) || (strcmp(json_string_value(of), "window") && strcmp(json_string_value(of), "truncate"))) {
            v2_qfail(q, "invalid_question", "overflow must be one of ['window', 'truncate']");
            goto out;
        }
        q->truncate = !strcmp(json_string_value(of), "truncate");
    }
    const json_t *hd = json_object_get(jq, "head");
    if (hd && !json_is_null(hd)) {
        if (!json_is_string(hd) || (strcmp(json_string_value(hd), "router") && strcmp(json_string_value(hd), "broad"))) {
            v2_qfail(q, "invalid_question", "head must be one of ['router', 'broad']");
            goto out;
        }
        q->head = strcmp(json_string_value(hd), "router") ? VSR_V2_HEAD_BROAD : VSR_V2_HEAD_ROUTER;
        if (q->head == VSR_V2_HEAD_BROAD && !d->broad) {
            v2_qfail(q, "invalid_question", "this model has no broad span head");
            goto out;
        }
    }
    const json_t *rf = json_object_get(jq0, "require_full_input");
    if (rf && !json_is_null(rf)) {
        if (!json_is_boolean(rf)) {
            v2_qfail(q, "invalid_question", "require_full_input must be true or false");
            goto out;
        }
        q->full_input = json_is_true(rf);
        if (q->full_input && q->truncate) {
            v2_qfail(q, "invalid_question", "require_full_input cannot be combined with overflow: truncate");
            goto out;
        }
    }
    ok = true;
out:
    json_decref(expanded);
    return ok;
}
#undef QFAIL

/* A set's label answers live at answers["<id>.<label>"]: none may be another question's ID. */
static void check_set_ids(v2_request *r) {
    for (int i = 0; i < r->n_q; i++) {
        v2_question *q = &r->q[i];
        if (q->err_code || q->kind != V2_SET) continue;
        for (int l = 0; l < q->n_opt && !q->err_code; l++)
            for (int j = 0; j < r->n_q; j++) {
                size_t n = strlen(q->id);
                if (!strncmp(r->q[j].id, q->id, n) && r->q[j].id[n] == '.' && !strcmp(r->q[j].id + n + 1, q->names[l])) {
                    v2_qfail(q, "invalid_question", "a label answer %s.<label> is another question's ID", q->id);
                    break;
                }
            }
    }
}

bool v2_parse_request(const vsr_v2_decider *d, v2_request *r, const json_t *o, const char *where,
                      vsr_http_error *h) {
    const json_t *im = json_object_get(o, "images"), *vi = json_object_get(o, "videos");
    if ((im && !json_is_null(im) && !(json_is_array(im) && !json_array_size(im))) ||
        (vi && !json_is_null(vi) && !(json_is_array(vi) && !json_array_size(vi)))) {
        vsr_http_fail(h, 400, "invalid_request", "%sthis model has no %s modality: the Vela 2.0 packages read text only",
                      where, im && !json_is_null(im) && !(json_is_array(im) && !json_array_size(im)) ? "image" : "video");
        return false;
    }
    const json_t *js = json_object_get(o, "state");
    if (!js) {
        vsr_http_fail(h, 400, "invalid_request", "%sstate is required", where);
        return false;
    }
    const char *why = read_state(r, js);
    if (why) {
        vsr_http_fail(h, 400, "invalid_request", "%s%s", where, why);
        return false;
    }
    const json_t *jq = json_object_get(o, "questions");
    if (!json_is_object(jq) || json_object_size(jq) == 0) {
        vsr_http_fail(h, 400, "invalid_request", "%squestions must be an object with at least one question", where);
        return false;
    }
    if (json_object_size(jq) > 256) {
        vsr_http_fail(h, 400, "invalid_request", "%squestions holds %zu questions; at most 256 are allowed", where,
                      json_object_size(jq));
        return false;
    }
    r->n_q = (int)json_object_size(jq);
    r->q = calloc((size_t)r->n_q, sizeof *r->q);
    if (!r->q) {
        vsr_http_fail(h, 500, "internal_error", "out of memory");
        return false;
    }
    int i = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)jq, k, v) {
        r->q[i].id = strdup(k);
        build_question(d, r, &r->q[i], v);
        i++;
    }
    check_set_ids(r);
    return v2_layout(d, r, h);
}

static void free_strs(char **s, int n) {
    if (!s) return;
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

void v2_request_free(v2_request *r) {
    v2_trees_free(r);
    for (int i = 0; i < r->n_q; i++) {
        v2_question *q = &r->q[i];
        free(q->id);
        free(q->text);
        free_strs(q->names, q->n_opt);
        free_strs(q->descs, q->n_opt);
        free_strs(q->keys, q->n_opt);
        free_strs(q->legend, q->n_opt);
        free(q->key);
        free(q->alias);
        free(q->err_msg);
        free(q->probs);
        free(q->spans);
    }
    free(r->q);
    for (int p = 0; p < r->n_parts; p++) {
        v2_part *pt = &r->parts[p];
        free(pt->text);
        free(pt->ids);
        v2_text_free(&pt->t);
        free(pt->tok);
        free(pt->words);
        free(pt->first);
    }
    for (int f = 0; f < r->n_fields; f++) free(r->fields[f].key);
    free(r->fields);
    free(r->name);
    free(r->err);
}
