/* vsr/router.h: the router's (vllm-sr) config, v0.3 subset (reference-runtime.md 7; issue #21).
 *
 * vsr_router_config_load reads the YAML with libyaml into a typed struct and checks every
 * rule it knows. It collects every error (not only the first), each with its YAML path and
 * the 1-based line and column of the offending node. Unknown keys are errors.
 *
 * Capability of span bindings (pii, hallucination) is decided without reading weights: the
 * catalogue's family for a known repo@revision, else the package's family from
 * vsr_package_open (config and headers only) for an absolute path or a Hub id in the store.
 * A Hub id that is neither catalogued nor in the store is not checked here (the worker
 * refuses it at load). */
#ifndef VSR_ROUTER_H
#define VSR_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

#include "vsr/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VSR_RT_MAX_REPLICAS 64

typedef enum vsr_rt_provider { VSR_RT_MODEL_RUNTIME, VSR_RT_HTTP } vsr_rt_provider;

typedef struct vsr_rt_replica {
    char *device;      /* NULL when attached */
    char *endpoint;    /* NULL when managed */
    char *served_name; /* attached only */
    int line, col;
} vsr_rt_replica;

typedef struct vsr_rt_deployment {
    char *key;
    vsr_rt_provider provider;
    char *artifact;    /* Hub id or absolute path; NULL when absent */
    char *revision;    /* 40-hex commit; NULL when absent */
    char *device;      /* "auto" when absent (managed, no replicas) */
    char *profile;     /* "exact" when absent */
    char *endpoint, *served_name, *public_name;
    int n_replicas;
    vsr_rt_replica *replicas;
    int line, col;     /* the key's position */
} vsr_rt_deployment;

typedef struct vsr_rt_binding {
    char *name;        /* "pii_classifier", "hallucination_detector", "domain_classifier", ... */
    char *deployment;
    char *contract;    /* "token_spans.v1", ... (defaults from the binding name) */
    int line, col;
} vsr_rt_binding;

typedef struct vsr_rt_condition {
    char *signal;      /* "pii" or "hallucination": a span signal (the bound deployment is asked the
                          preset question; it matches when spans are found); NULL for a question */
    char *question;    /* the question id (NULL for a signal) */
    char *type;        /* choice | noul | score */
    char *instructions;
    char **criteria;   /* choice: option keys; score: levels */
    char **criteria_desc; /* the descriptions when criteria is a mapping (choice, noul); else NULL */
    int n_criteria;
    char *label;       /* choice: the option that matches */
    double threshold;  /* noul, score: the answer matches at >= threshold */
    bool has_threshold;
    int line, col;
} vsr_rt_condition;

typedef struct vsr_rt_decision {
    char *name;
    int priority;
    bool operator_or;  /* rules.operator: AND (false) or OR (true) */
    bool fail_request; /* on_unknown: no_match (false) or fail_request (true) */
    int n_conditions;
    vsr_rt_condition *conditions;
    int n_model_refs;
    char **model_refs;
    int line, col;
} vsr_rt_decision;

typedef struct vsr_rt_backend {
    char *name, *endpoint;
    double weight;
} vsr_rt_backend;

typedef struct vsr_rt_model {
    char *name;
    char *api_format;  /* "openai" */
    int n_backends;
    vsr_rt_backend *backends;
    int line, col;
} vsr_rt_model;

typedef struct vsr_rt_listener {
    char *name, *address;
    int port;
} vsr_rt_listener;

typedef struct vsr_rt_error {
    char *path;        /* "global.model_catalog.deployments.d3-fp8.revision" */
    int line, col;     /* 1-based; 0 when the error has no node */
    char *msg;
} vsr_rt_error;

typedef struct vsr_router_config {
    char *file;
    int signal_timeout_ms; /* global.model_catalog.signal_timeout_ms (2000) */
    int n_deployments;
    vsr_rt_deployment *deployments;
    int n_bindings;
    vsr_rt_binding *bindings;
    char *decision_model; /* deployment key, or NULL */
    int n_models;
    vsr_rt_model *models;
    char *default_model;
    int n_decisions;
    vsr_rt_decision *decisions;
    int n_listeners;
    vsr_rt_listener *listeners;
    int n_errors;
    vsr_rt_error *errors;
} vsr_router_config;

typedef struct vsr_router_options {
    const char *store_dir; /* NULL: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub */
} vsr_router_options;

/* Loads and checks `path`. Returns NULL only when out of memory; otherwise the config, whose
 * n_errors says whether it is valid (an unreadable file or bad YAML is one error). */
vsr_router_config *vsr_router_config_load(const char *path, const vsr_router_options *opt);
/* Same, from a string (`name` is used in messages). */
vsr_router_config *vsr_router_config_parse(const char *yaml, size_t len, const char *name,
                                           const vsr_router_options *opt);
void vsr_router_config_free(vsr_router_config *c);
const vsr_rt_deployment *vsr_router_deployment(const vsr_router_config *c, const char *key);
/* "path (line L, column C): message" into buf. */
const char *vsr_rt_error_format(const vsr_rt_error *e, char *buf, size_t n);

/* The family a deployment's artifact has, decided without weights: "decision3", "span", or
 * NULL when unknown here. `source` (may be NULL) gets "catalogue", "store" or "package". */
const char *vsr_router_artifact_family(const vsr_rt_deployment *d, const char *store_dir,
                                       const char **source);

#ifdef __cplusplus
}
#endif

#endif
