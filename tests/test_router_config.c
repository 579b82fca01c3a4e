/* The router config (vsr/router.h): a valid v0.3 config loads into the typed struct; each rule
 * is broken alone by an edit of that config, and the loader reports exactly that error with
 * the message of the issue (verbatim), its YAML path, and the line and column of the node
 * the edit broke. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vsr/fixture.h"
#include "vsr/router.h"

static const char *BASE =
    "global:\n"                                                                   /* 1 */
    "  model_catalog:\n"                                                          /* 2 */
    "    signal_timeout_ms: 2000\n"                                               /* 3 */
    "    deployments:\n"                                                          /* 4 */
    "      d3-fp8:\n"                                                             /* 5 */
    "        provider: model_runtime\n"                                           /* 6 */
    "        artifact: vllm-sr/d3-FP8\n"                                          /* 7 */
    "        revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62\n"                /* 8 */
    "        device: rocm:0\n"                                                    /* 9 */
    "      spans:\n"                                                              /* 10 */
    "        provider: model_runtime\n"                                           /* 11 */
    "        artifact: acme/span\n"                                               /* 12 */
    "      local:\n"                                                              /* 13 */
    "        provider: model_runtime\n"                                           /* 14 */
    "        artifact: LOCALPATH\n"                                               /* 15 */
    "        device: cpu\n"                                                       /* 16 */
    "      ext:\n"                                                                /* 17 */
    "        provider: http\n"                                                    /* 18 */
    "        endpoint: http://127.0.0.1:9000\n"                                   /* 19 */
    "        served_name: ext-model\n"                                            /* 20 */
    "    bindings:\n"                                                             /* 21 */
    "      pii: spans\n"                                                          /* 22 */
    "      hallucination_detector: {deployment: spans, contract: token_spans.v1}\n" /* 23 */
    "    system:\n"                                                               /* 24 */
    "      decision_model: {deployment: d3-fp8}\n"                                /* 25 */
    "providers:\n"                                                                /* 26 */
    "  models:\n"                                                                 /* 27 */
    "    - name: small\n"                                                         /* 28 */
    "      api_format: openai\n"                                                  /* 29 */
    "      backend_refs:\n"                                                       /* 30 */
    "        - {name: a, endpoint: http://127.0.0.1:9001, weight: 90}\n"          /* 31 */
    "        - {name: b, endpoint: http://127.0.0.1:9002, weight: 10}\n"          /* 32 */
    "  defaults:\n"                                                               /* 33 */
    "    default_model: small\n"                                                  /* 34 */
    "routing:\n"                                                                  /* 35 */
    "  decisions:\n"                                                              /* 36 */
    "    - name: code\n"                                                          /* 37 */
    "      priority: 10\n"                                                        /* 38 */
    "      rules:\n"                                                              /* 39 */
    "        operator: AND\n"                                                     /* 40 */
    "        on_unknown: no_match\n"                                              /* 41 */
    "        conditions:\n"                                                       /* 42 */
    "          - question: domain\n"                                              /* 43 */
    "            type: choice\n"                                                  /* 44 */
    "            instructions: Which domain does this request belong to?\n"       /* 45 */
    "            criteria: {code: Programming, other: Anything else}\n"           /* 46 */
    "            label: code\n"                                                   /* 47 */
    "      modelRefs:\n"                                                          /* 48 */
    "        - model: small\n"                                                    /* 49 */
    "listeners:\n"                                                                /* 50 */
    "  - name: main\n"                                                            /* 51 */
    "    address: 127.0.0.1\n"                                                    /* 52 */
    "    port: 8899\n";                                                           /* 53 */

static char g_local[1024], g_store[1024];

/* s with the first `from` replaced by `to` (malloc'd); the test fails when `from` is absent. */
static char *replace(const char *s, const char *from, const char *to) {
    const char *p = strstr(s, from);
    CHECK_MSG(p != NULL, "the fixture has no \"%s\"", from);
    if (!p) return strdup(s);
    size_t a = (size_t)(p - s), lf = strlen(from), lt = strlen(to), ls = strlen(s);
    char *out = malloc(ls - lf + lt + 1);
    memcpy(out, s, a);
    memcpy(out + a, to, lt);
    memcpy(out + a + lt, p + lf, ls - a - lf + 1);
    return out;
}

static char *base_yaml(void) { return replace(BASE, "LOCALPATH", g_local); }

static vsr_router_config *load(const char *yaml) {
    vsr_router_options opt = {.store_dir = g_store};
    return vsr_router_config_parse(yaml, strlen(yaml), "test.yaml", &opt);
}

static void dump(const vsr_router_config *c) {
    char line[2048];
    for (int i = 0; i < c->n_errors; i++) fprintf(stderr, "    %s\n", vsr_rt_error_format(&c->errors[i], line, sizeof line));
}

/* Edits the base config (from -> to), loads it, and expects exactly one error: `msg` in its
 * message, at `path`, line, column. */
static void expect_one(const char *from, const char *to, const char *path, int line, int col, const char *msg) {
    char *base = base_yaml();
    char *y = replace(base, from, to);
    vsr_router_config *c = load(y);
    CHECK(c != NULL);
    if (c) {
        bool ok = c->n_errors == 1 && strstr(c->errors[0].msg, msg) && !strcmp(c->errors[0].path, path) &&
                  c->errors[0].line == line && c->errors[0].col == col;
        CHECK_MSG(ok, "edit \"%s\" -> \"%s\": want one error at %s (line %d, column %d) containing \"%s\"; got %d:",
                  from, to, path, line, col, msg, c->n_errors);
        if (!ok) dump(c);
        vsr_router_config_free(c);
    }
    free(y);
    free(base);
}

static void setup(void) {
    /* A real Decision 3.0 package at an absolute path. */
    snprintf(g_local, sizeof g_local, "%s/d3-local", test_tmpdir());
    vsr_fixture_opts o = {.family = "decision3", .size = "tiny", .scheme = "bf16", .seed = 0};
    vsr_err err = {0};
    vsr_status st = vsr_fixture_write(g_local, &o, NULL, &err);
    CHECK_OK(st, err);
    /* A store: acme/span (refs/main, a token-classification config: span family) and acme/d3
     * (refs/main, a copy of the Decision 3.0 fixture's metadata). */
    snprintf(g_store, sizeof g_store, "%s/hub", test_tmpdir());
    const char *c1 = "1111111111111111111111111111111111111111", *c2 = "2222222222222222222222222222222222222222";
    char p[2048];
    snprintf(p, sizeof p, "%s/models--acme--span/refs/main", g_store);
    CHECK(test_write_file(p, c1, 40) == 0);
    snprintf(p, sizeof p, "%s/models--acme--span/snapshots/%s/config.json", g_store, c1);
    const char *cfg = "{\"architectures\":[\"Qwen3_5ForTokenClassification\"],\"model_type\":\"qwen3_5_text\"}";
    CHECK(test_write_file(p, cfg, strlen(cfg)) == 0);
    snprintf(p, sizeof p, "%s/models--acme--d3/refs/main", g_store);
    CHECK(test_write_file(p, c2, 40) == 0);
    const char *files[] = {"config.json", "decision_config.json"};
    for (int i = 0; i < 2; i++) {
        char src[2048];
        size_t n;
        snprintf(src, sizeof src, "%s/%s", g_local, files[i]);
        char *data = test_read_file(src, &n);
        CHECK(data != NULL);
        snprintf(p, sizeof p, "%s/models--acme--d3/snapshots/%s/%s", g_store, c2, files[i]);
        CHECK(data && test_write_file(p, data, n) == 0);
        free(data);
    }
}

TEST(valid_config_loads_typed) {
    char *y = base_yaml();
    vsr_router_config *c = load(y);
    CHECK(c && c->n_errors == 0);
    if (c && c->n_errors) dump(c);
    if (c && !c->n_errors) {
        CHECK(c->n_deployments == 4);
        const vsr_rt_deployment *d = vsr_router_deployment(c, "d3-fp8");
        CHECK(d && d->provider == VSR_RT_MODEL_RUNTIME && !strcmp(d->artifact, "vllm-sr/d3-FP8") &&
              !strcmp(d->revision, "2fb271adbdaf6dc969ca1ca746b61a6a5127ed62") && !strcmp(d->device, "rocm:0") &&
              !strcmp(d->profile, "exact") && d->line == 5 && d->col == 7);
        d = vsr_router_deployment(c, "ext");
        CHECK(d && d->provider == VSR_RT_HTTP && !strcmp(d->endpoint, "http://127.0.0.1:9000") &&
              !strcmp(d->served_name, "ext-model") && !d->device);
        CHECK(c->n_bindings == 2 && !strcmp(c->bindings[0].name, "pii_classifier") &&
              !strcmp(c->bindings[0].deployment, "spans") && !strcmp(c->bindings[0].contract, "token_spans.v1") &&
              !strcmp(c->bindings[1].name, "hallucination_detector"));
        CHECK(c->decision_model && !strcmp(c->decision_model, "d3-fp8"));
        CHECK(c->n_models == 1 && c->models[0].n_backends == 2 && c->models[0].backends[1].weight == 10);
        CHECK(c->default_model && !strcmp(c->default_model, "small"));
        CHECK(c->n_decisions == 1 && c->decisions[0].priority == 10 && !c->decisions[0].operator_or &&
              !c->decisions[0].fail_request && c->decisions[0].n_conditions == 1 &&
              !strcmp(c->decisions[0].conditions[0].label, "code") && c->decisions[0].conditions[0].n_criteria == 2);
        CHECK(c->n_listeners == 1 && c->listeners[0].port == 8899);
        const char *src;
        CHECK(!strcmp(vsr_router_artifact_family(vsr_router_deployment(c, "spans"), g_store, &src), "span") &&
              !strcmp(src, "store"));
        CHECK(!strcmp(vsr_router_artifact_family(vsr_router_deployment(c, "local"), g_store, &src), "decision3") &&
              !strcmp(src, "package"));
        CHECK(!strcmp(vsr_router_artifact_family(vsr_router_deployment(c, "d3-fp8"), g_store, &src), "decision3") &&
              !strcmp(src, "catalogue"));
    }
    vsr_router_config_free(c);
    free(y);
}

TEST(revision_rules) {
    expect_one("revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62", "revision: main",
               "global.model_catalog.deployments.d3-fp8.revision", 8, 19, "revision must be a 40-hex commit");
    expect_one("revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62", "revision: 2FB271ADBDAF6DC969CA1CA746B61A6A5127ED62",
               "global.model_catalog.deployments.d3-fp8.revision", 8, 19, "revision must be a 40-hex commit");
    /* not built in, no revision, not in the store */
    expect_one("artifact: acme/span", "artifact: acme/absent", "global.model_catalog.deployments.spans.artifact", 12,
               19, "revision must be a 40-hex commit");
    /* a built-in needs none: the catalogue's default revision */
    char *base = base_yaml();
    char *y = replace(base, "        revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62\n", "");
    vsr_router_config *c = load(y);
    CHECK(c && c->n_errors == 0);
    if (c && c->n_errors) dump(c);
    vsr_router_config_free(c);
    free(y);
    free(base);
    expect_one("device: cpu\n", "device: cpu\n        revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62\n",
               "global.model_catalog.deployments.local.revision", 17, 19, "revision applies only to Hub repositories");
}

TEST(artifact_rules) {
    expect_one("artifact: acme/span", "artifact: models/acme/span", "global.model_catalog.deployments.spans.artifact",
               12, 19, "artifact must be a Hub repository ID or an absolute package path");
    expect_one("artifact: acme/span", "artifact: -acme/span", "global.model_catalog.deployments.spans.artifact", 12, 19,
               "artifact must be a Hub repository ID or an absolute package path");
    expect_one("        artifact: acme/span\n", "", "global.model_catalog.deployments.spans", 11, 9,
               "a managed model_runtime deployment requires artifact (a Hub repository or an absolute package path)");
}

TEST(binding_rules) {
    expect_one("pii: spans", "pii: nope", "global.model_catalog.bindings.pii", 22, 12, "Unknown model deployment 'nope'");
    expect_one("{deployment: spans, contract", "{deployment: nope, contract",
               "global.model_catalog.bindings.hallucination_detector.deployment", 23, 44,
               "Unknown model deployment 'nope'");
    expect_one("pii: spans", "pii: d3-fp8", "global.model_catalog.bindings.pii", 22, 12,
               "model capability mismatch: deployment \"d3-fp8\" serves vllm-sr/d3-FP8, which has no classify head and "
               "no ready-made pii question; bind a token head or a model that defines the pii question, such as Vela "
               "2.0");
    char want[2048];
    snprintf(want, sizeof want,
             "model capability mismatch: deployment \"local\" serves %s, which has no classify head and no ready-made "
             "pii question; bind a token head or a model that defines the pii question, such as Vela 2.0",
             g_local);
    expect_one("pii: spans", "pii: local", "global.model_catalog.bindings.pii", 22, 12, want);
    expect_one("{deployment: spans, contract", "{deployment: d3-fp8, contract",
               "global.model_catalog.bindings.hallucination_detector.deployment", 23, 44,
               "no ready-made hallucination question");
    /* decision.v1 is allowed on a model_runtime deployment: no capability check */
    expect_one("contract: token_spans.v1", "contract: embedding.v1",
               "global.model_catalog.bindings.hallucination_detector.contract", 23, 61,
               "binding hallucination_detector takes contract token_spans.v1");
    /* a Hub id found in the store: its family decides (acme/d3 is a Decision 3.0 package) */
    char *base = base_yaml();
    char *y = replace(base, "artifact: acme/span", "artifact: acme/d3");
    vsr_router_config *c = load(y);
    CHECK(c && c->n_errors == 2 && strstr(c->errors[0].msg, "deployment \"spans\" serves acme/d3, which has no classify head") &&
          c->errors[0].line == 22 && strstr(c->errors[1].msg, "ready-made hallucination question") &&
          c->errors[1].line == 23);
    if (c && c->n_errors != 2) dump(c);
    vsr_router_config_free(c);
    free(y);
    free(base);
}

TEST(decision_model_rules) {
    expect_one("decision_model: {deployment: d3-fp8}", "decision_model: d3-fp8",
               "global.model_catalog.system.decision_model", 25, 23,
               "decision_model must be {deployment: <declared deployment key>}");
    expect_one("decision_model: {deployment: d3-fp8}", "decision_model: {model: d3-fp8}",
               "global.model_catalog.system.decision_model", 25, 23,
               "decision_model must be {deployment: <declared deployment key>}");
    expect_one("decision_model: {deployment: d3-fp8}", "decision_model: {deployment: nope}",
               "global.model_catalog.system.decision_model.deployment", 25, 36,
               "decision_model.deployment: unknown deployment 'nope'");
    expect_one("decision_model: {deployment: d3-fp8}", "decision_model: {deployment: ext}",
               "global.model_catalog.system.decision_model.deployment", 25, 36,
               "decision_model.deployment 'ext' must use provider model_runtime");
}

TEST(placement_rules) {
    expect_one("device: rocm:0", "devices: rocm:0", "global.model_catalog.deployments.d3-fp8.devices", 9, 9,
               "unknown key 'devices'");
    expect_one("device: rocm:0", "device: ROCm-0", "global.model_catalog.deployments.d3-fp8.device", 9, 17,
               "device must be auto or an accelerator name");
    expect_one("endpoint: http://127.0.0.1:9000", "endpoint: ftp://x", "global.model_catalog.deployments.ext.endpoint",
               19, 19, "endpoint must use unix://, http:// or https://");
    expect_one("endpoint: http://127.0.0.1:9000", "endpoint: unix://run/x.sock",
               "global.model_catalog.deployments.ext.endpoint", 19, 19, "endpoint unix:// needs an absolute socket path");
    expect_one("        device: cpu\n", "        device: cpu\n        served_name: x\n",
               "global.model_catalog.deployments.local.served_name", 17, 22, "served_name requires an attached endpoint");
    /* 65 replicas */
    char reps[2048] = "replicas: [";
    for (int i = 0; i < 65; i++) strcat(reps, i ? ", {device: cpu}" : "{device: cpu}");
    strcat(reps, "]");
    expect_one("device: cpu", reps, "global.model_catalog.deployments.local.replicas", 16, 19,
               "replicas must contain at most 64 worker placements");
    expect_one("device: cpu", "replicas: [{device: cpu}, {device: 'cuda:x'}]",
               "global.model_catalog.deployments.local.replicas[1].device", 16, 44,
               "replica 1: device must be an accelerator name with an optional index");
    expect_one("device: cpu", "replicas: [{device: cpu, endpoint: 'http://h:1'}]",
               "global.model_catalog.deployments.local.replicas[0].device", 16, 29,
               "replica 0: an attached endpoint cannot set device");
    expect_one("        device: cpu\n", "        device: cpu\n        replicas: [{device: cpu}]\n",
               "global.model_catalog.deployments.local.replicas", 17, 19,
               "replicas cannot be combined with deployment device, endpoint or served_name");
    expect_one("        device: cpu\n", "        device: cpu\n        profile: Fast\n",
               "global.model_catalog.deployments.local.profile", 17, 18,
               "profile must be a profile name, such as exact or batching");
    /* a well-formed name vllm-srun does not serve: refused here, naming deployment and profiles */
    expect_one("        device: cpu\n", "        device: cpu\n        profile: max_speed\n",
               "global.model_catalog.deployments.local.profile", 17, 18,
               "deployment 'local': unknown profile 'max_speed'; available: batching, exact");
    expect_one("        device: cpu\n", "        device: cpu\n        profile: shared_context\n",
               "global.model_catalog.deployments.local.profile", 17, 18,
               "deployment 'local': unknown profile 'shared_context'; available: batching, exact");
    /* the profiles it serves load as written (the supervisor passes them as --profile) */
    for (int pi = 0; pi < 2; pi++) {
        const char *pn = pi ? "exact" : "batching";
        char *b0 = base_yaml(), to[128];
        snprintf(to, sizeof to, "        device: cpu\n        profile: %s\n", pn);
        char *y0 = replace(b0, "        device: cpu\n", to);
        vsr_router_config *c0 = load(y0);
        const vsr_rt_deployment *d0 = c0 ? vsr_router_deployment(c0, "local") : NULL;
        CHECK_MSG(c0 && !c0->n_errors && d0 && !strcmp(d0->profile, pn), "profile %s", pn);
        if (c0 && c0->n_errors) dump(c0);
        vsr_router_config_free(c0);
        free(y0);
        free(b0);
    }
    /* replicas as a list of placements load typed */
    char *base = base_yaml();
    char *y = replace(base, "device: cpu", "replicas: [{device: cpu}, {endpoint: 'unix:///run/w.sock', served_name: w}]");
    vsr_router_config *c = load(y);
    const vsr_rt_deployment *d = c ? vsr_router_deployment(c, "local") : NULL;
    CHECK(c && !c->n_errors && d && d->n_replicas == 2 && !strcmp(d->replicas[0].device, "cpu") &&
          !strcmp(d->replicas[1].endpoint, "unix:///run/w.sock") && !strcmp(d->replicas[1].served_name, "w"));
    vsr_router_config_free(c);
    free(y);
    free(base);
}

TEST(routing_rules) {
    expect_one("operator: AND", "operator: XOR", "routing.decisions[0].rules.operator", 40, 19,
               "operator must be AND or OR");
    expect_one("on_unknown: no_match", "on_unknown: ignore", "routing.decisions[0].rules.on_unknown", 41, 21,
               "on_unknown must be no_match or fail_request");
    expect_one("label: code", "label: math", "routing.decisions[0].rules.conditions[0].label", 47, 20,
               "label 'math' is not one of the criteria's options");
    expect_one("type: choice", "type: span", "routing.decisions[0].rules.conditions[0].type", 44, 19,
               "type must be one of [choice, noul, score]");
    expect_one("- model: small", "- model: big", "routing.decisions[0].modelRefs[0].model", 49, 18,
               "model 'big' is not a providers.models name");
    expect_one("default_model: small", "default_model: big", "providers.defaults.default_model", 34, 20,
               "default_model 'big' is not a providers.models name");
    expect_one("weight: 10}", "weight: -1}", "providers.models[0].backend_refs[1].weight", 32, 62,
               "weight must be a non-negative number");
    expect_one("port: 8899", "port: 99999", "listeners[0].port", 53, 11, "port must be an integer from 1 to 65535");
    expect_one("listeners:", "listener:", "listener", 50, 1, "unknown key 'listener'");
    expect_one("priority: 10", "priority: high", "routing.decisions[0].priority", 38, 17, "priority must be an integer");
}

TEST(yaml_errors) {
    vsr_router_config *c = load("global:\n  model_catalog: [\n");
    CHECK(c && c->n_errors == 1 && strstr(c->errors[0].msg, "invalid YAML") && c->errors[0].line >= 2);
    vsr_router_config_free(c);
    vsr_router_options opt = {0};
    c = vsr_router_config_load("/nonexistent/config.yaml", &opt);
    CHECK(c && c->n_errors == 1 && strstr(c->errors[0].msg, "cannot read /nonexistent/config.yaml"));
    vsr_router_config_free(c);
    /* several errors are all reported */
    char *base = base_yaml();
    char *y1 = replace(base, "pii: spans", "pii: nope");
    char *y2 = replace(y1, "operator: AND", "operator: XOR");
    c = load(y2);
    CHECK(c && c->n_errors == 2);
    vsr_router_config_free(c);
    free(y2);
    free(y1);
    free(base);
}

/* Conditions on span signals, one definition per question id, signal_timeout_ms, weights. */
TEST(signal_and_question_rules) {
    char *base = base_yaml();
    /* a signal condition beside a question: loads typed */
    char *y = replace(base, "          - question: domain\n", "          - signal: pii\n          - question: domain\n");
    vsr_router_config *c = load(y);
    CHECK(c && c->n_errors == 0 && c->signal_timeout_ms == 2000);
    if (c && c->n_errors) dump(c);
    if (c && !c->n_errors)
        CHECK(c->decisions[0].n_conditions == 2 && !strcmp(c->decisions[0].conditions[0].signal, "pii") &&
              !c->decisions[0].conditions[0].question && !strcmp(c->decisions[0].conditions[1].question, "domain") &&
              !strcmp(c->decisions[0].conditions[1].criteria_desc[0], "Programming"));
    vsr_router_config_free(c);
    free(y);
    free(base);
    expect_one("          - question: domain\n", "          - signal: toxic\n          - question: domain\n",
               "routing.decisions[0].rules.conditions[0].signal", 43, 21, "signal must be pii or hallucination (found \"toxic\")");
    expect_one("          - question: domain\n", "          - {signal: pii, label: x}\n          - question: domain\n",
               "routing.decisions[0].rules.conditions[0].label", 43, 27, "unknown key 'label' (expected one of: signal)");
    /* a signal needs its binding */
    base = base_yaml();
    char *y1 = replace(base, "      pii: spans\n", "");
    char *y2 = replace(y1, "          - question: domain\n", "          - signal: pii\n          - question: domain\n");
    c = load(y2);
    CHECK(c && c->n_errors == 1 &&
          !strcmp(c->errors[0].msg, "signal pii needs a pii binding (global.model_catalog.bindings.pii: <span deployment>)") &&
          !strcmp(c->errors[0].path, "routing.decisions[0].rules.conditions[0].signal") && c->errors[0].line == 42);
    if (c && c->n_errors != 1) dump(c);
    vsr_router_config_free(c);
    free(y2);
    free(y1);
    /* decisions of span signals only need no decision model */
    y1 = replace(base, "      decision_model: {deployment: d3-fp8}\n", "");
    y2 = replace(y1, "    system:\n", "");
    char *y3 = replace(y2,
                       "          - question: domain\n            type: choice\n            instructions: Which domain does "
                       "this request belong to?\n            criteria: {code: Programming, other: Anything else}\n       "
                       "     label: code\n",
                       "          - signal: hallucination\n");
    c = load(y3);
    CHECK(c && c->n_errors == 0);
    if (c && c->n_errors) dump(c);
    vsr_router_config_free(c);
    free(y3);
    /* ... but a question does */
    c = load(y2);
    CHECK(c && c->n_errors == 1 && !strcmp(c->errors[0].msg, "routing.decisions need global.model_catalog.system.decision_model"));
    vsr_router_config_free(c);
    free(y2);
    free(y1);
    /* one question id, one definition */
    y1 = replace(base, "listeners:\n",
                 "    - name: code2\n      rules:\n        conditions:\n          - {question: domain, type: choice, "
                 "instructions: Another wording?, criteria: {code: Programming, other: Anything else}, label: code}\n"
                 "      modelRefs: [{model: small}]\n"
                 "    - name: code3\n      rules:\n        conditions:\n          - {question: domain, type: choice, "
                 "instructions: Which domain does this request belong to?, criteria: {code: Programming, other: Anything else}, label: other}\n"
                 "      modelRefs: [{model: small}]\n"
                 "listeners:\n");
    c = load(y1);
    CHECK(c && c->n_errors == 1 && !strcmp(c->errors[0].path, "routing.decisions[1].rules.conditions[0]") &&
          c->errors[0].line == 53 &&
          !strcmp(c->errors[0].msg, "question 'domain' is asked differently in decision 'code' (line 43); one question id "
                                    "has one type, instructions and criteria (the decision model is asked it once per request)"));
    if (c && c->n_errors != 1) dump(c);
    vsr_router_config_free(c);
    free(y1);
    free(base);
    expect_one("signal_timeout_ms: 2000", "signal_timeout_ms: 0", "global.model_catalog.signal_timeout_ms", 3, 24,
               "signal_timeout_ms must be a positive integer (at most 600000)");
    base = base_yaml();
    y = replace(base, "signal_timeout_ms: 2000", "signal_timeout_ms: 150");
    c = load(y);
    CHECK(c && c->n_errors == 0 && c->signal_timeout_ms == 150);
    vsr_router_config_free(c);
    free(y);
    free(base);
    base = base_yaml();
    y1 = replace(base, "weight: 90}", "weight: 0}");
    y2 = replace(y1, "weight: 10}", "weight: 0}");
    c = load(y2);
    CHECK(c && c->n_errors == 1 && !strcmp(c->errors[0].path, "providers.models[0].backend_refs") &&
          !strcmp(c->errors[0].msg, "backend_refs of model 'small' all have weight 0; at least one needs weight > 0"));
    vsr_router_config_free(c);
    free(y2);
    free(y1);
    free(base);
    expect_one("  defaults:\n", "    - {name: small, backend_refs: [{endpoint: 'http://h:1'}]}\n  defaults:\n",
               "providers.models[1].name", 33, 14, "duplicate provider model 'small'");
}

/* A Vela 2.0 deployment is span-capable (issue 23): the seed's bindings {pii: spans,
 * hallucination: spans} are accepted on it, whether the package is a local path, a Hub id in the
 * store, a built-in of the catalogue, or a store snapshot that does not open (decided from
 * config.json's model_type); the same bindings on a Decision 3.0 deployment stay refused with the
 * issue's message. */
TEST(vela2_is_span_capable) {
    char v2[1200], st2[1200];
    snprintf(v2, sizeof v2, "%s/vela2-local", test_tmpdir());
    snprintf(st2, sizeof st2, "%s/hub-v2", test_tmpdir());
    vsr_fixture_opts o = {.family = "vela2", .size = "tiny"};
    vsr_err err = {0};
    CHECK_OK(vsr_fixture_write(v2, &o, NULL, &err), err);
    char rev[41], snap[4096];
    vsr_fixture_info info;
    CHECK_OK(vsr_fixture_install(st2, "acme/vela2", &o, NULL, &info, rev, snap, sizeof snap, &err), err);
    /* a snapshot whose config.json names vela2-decoder but which does not open (no other file) */
    const char *c3 = "3333333333333333333333333333333333333333";
    char p[2048];
    snprintf(p, sizeof p, "%s/models--acme--vela2-broken/refs/main", st2);
    CHECK(test_write_file(p, c3, 40) == 0);
    snprintf(p, sizeof p, "%s/models--acme--vela2-broken/snapshots/%s/config.json", st2, c3);
    const char *cfg = "{\"format_version\":1,\"model_type\":\"vela2-decoder\"}";
    CHECK(test_write_file(p, cfg, strlen(cfg)) == 0);
    struct {
        const char *artifact, *revision, *source;
    } cases[] = {
        {v2, NULL, "package"},
        {"acme/vela2", rev, "store"},
        {"vllm-sr-c/vela2-tiny", NULL, "catalogue"},
        {"vllm-sr-c/vela2-tiny-no-broad", "cd98d1b3fe1b2ac2de770a0388c7a3155d56cae8", "catalogue"},
        {"acme/vela2-broken", c3, "store"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *base = base_yaml(), art[2048];
        if (cases[i].revision)
            snprintf(art, sizeof art, "artifact: %s\n        revision: %s", cases[i].artifact, cases[i].revision);
        else
            snprintf(art, sizeof art, "artifact: %s", cases[i].artifact);
        char *y = replace(base, "artifact: acme/span", art);
        vsr_router_options opt = {.store_dir = st2};
        vsr_router_config *c = vsr_router_config_parse(y, strlen(y), "test.yaml", &opt);
        CHECK_MSG(c && c->n_errors == 0, "%s: the seed's span bindings on a vela2 deployment: %d errors",
                  cases[i].artifact, c ? c->n_errors : -1);
        if (c && c->n_errors) dump(c);
        if (c && !c->n_errors) {
            const char *src = NULL, *fam = vsr_router_artifact_family(vsr_router_deployment(c, "spans"), st2, &src);
            CHECK_MSG(fam && !strcmp(fam, "span") && src && !strcmp(src, cases[i].source), "%s: family %s from %s",
                      cases[i].artifact, fam ? fam : "(none)", src ? src : "(none)");
            CHECK(c->n_bindings == 2 && !strcmp(c->bindings[0].deployment, "spans") &&
                  !strcmp(c->bindings[1].deployment, "spans"));
        }
        vsr_router_config_free(c);
        free(y);
        free(base);
    }
    /* the seed's layout, with the pii and hallucination bindings on the Decision 3.0 deployment instead:
     * both refused with the message, word for word */
    char *base = base_yaml();
    char *y1 = replace(base, "pii: spans", "pii: d3-fp8");
    char *y = replace(y1, "{deployment: spans, contract: token_spans.v1}", "d3-fp8");
    vsr_router_config *c = load(y);
    CHECK(c && c->n_errors == 2);
    if (c && c->n_errors == 2) {
        CHECK(!strcmp(c->errors[0].msg,
                      "model capability mismatch: deployment \"d3-fp8\" serves vllm-sr/d3-FP8, which has no classify "
                      "head and no ready-made pii question; bind a token head or a model that defines the pii question, "
                      "such as Vela 2.0"));
        CHECK(!strcmp(c->errors[1].msg,
                      "model capability mismatch: deployment \"d3-fp8\" serves vllm-sr/d3-FP8, which has no classify "
                      "head and no ready-made hallucination question; bind a token head or a model that defines the "
                      "hallucination question, such as Vela 2.0"));
    } else if (c) {
        dump(c);
    }
    /* the built-in Decision 3.0 fixture too (family from the catalogue) */
    vsr_router_config_free(c);
    free(y);
    char *y2 = replace(y1, "artifact: vllm-sr/d3-FP8\n        revision: 2fb271adbdaf6dc969ca1ca746b61a6a5127ed62",
                       "artifact: vllm-sr-c/d3-tiny");
    c = load(y2);
    CHECK(c && c->n_errors == 1 &&
          !strcmp(c->errors[0].msg,
                  "model capability mismatch: deployment \"d3-fp8\" serves vllm-sr-c/d3-tiny, which has no classify head "
                  "and no ready-made pii question; bind a token head or a model that defines the pii question, such as "
                  "Vela 2.0"));
    if (c && c->n_errors != 1) dump(c);
    vsr_router_config_free(c);
    free(y2);
    free(y1);
    free(base);
}

int main(void) {
    setup();
    RUN(valid_config_loads_typed);
    RUN(revision_rules);
    RUN(artifact_rules);
    RUN(binding_rules);
    RUN(vela2_is_span_capable);
    RUN(decision_model_rules);
    RUN(placement_rules);
    RUN(routing_rules);
    RUN(yaml_errors);
    RUN(signal_and_question_rules);
    return test_summary();
}
