/* vllm-srun inspect PKG [--revision R] [--store DIR] [--json] [--verify] [--threads N]
 *                       [--gpu-memory-gib G] [--memory-share S]
 * Describes a package without reading a weight byte (unless --verify): where it resolved,
 * its family and format, which linears each scheme covers, parameters, bytes on disk and
 * on a device, its identity, every present device's verdict, and the seed's memory math
 * (KV cache bytes per token, DeltaNet state per sequence, tokens that fit).
 *
 * It runs every check a load runs except hashing (vsr_package_check: tensors against the
 * config and scheme, the readout, the manifest's parameter counts, the input limit; and for
 * a Decision 3.0 package the chat template, tokenizer and answer-code checks of the
 * decider), so what a load would refuse shows as every device's verdict and inspect exits
 * 1. --verify adds the hashes and identity (it reads every byte). A device's own refusal
 * (capability, memory) is its verdict and does not change the exit status. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli.h"
#include "commands.h"
#include "pkg_cli.h"
#include "vsr/catalog.h"
#include "vsr/decision.h"
#include "vsr/device.h"
#include "vsr/package.h"
#include "vsr/progress.h"
#include "vsr/vela2_decide.h"

#define GB 1e9 /* the seed's memory math uses 1 GB = 10^9 bytes */

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun inspect PKG [--revision R] [--store DIR] [--json] [--verify] [--threads N]\n"
            "                             [--gpu-memory-gib G | --gpu-memory-gb G] [--memory-share S]\n\n"
            "PKG is org/name, org/name@rev or an absolute package path. Prints the resolved revision,\n"
            "family, format, the scheme of every linear group, parameters, bytes on disk and on a\n"
            "device, identity, each device's verdict, and the KV-cache memory math at a memory share\n"
            "(default 0.92) of each GPU's memory (or of --gpu-memory-gib G).\n"
            "Every check a load runs that reads no weight byte is run (tensors, readout, parameter\n"
            "counts, input limit, chat template, tokenizer and answer codes); a refusal is shown as\n"
            "every device's verdict and the exit status is 1.\n"
            "  --verify   also hash every file and check the identity (reads all bytes)\n");
}

/* 1234567 -> "1,234,567" */
static const char *commas(long long v, char *buf, size_t n) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v < 0 ? -v : v);
    size_t len = strlen(tmp), o = 0;
    if (v < 0 && o < n - 1) buf[o++] = '-';
    for (size_t i = 0; i < len && o < n - 1; i++) {
        if (i && (len - i) % 3 == 0 && o < n - 1) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

/* Linear kinds, grouped as people read a checkpoint. */
typedef struct lin_kind {
    const char *group, *name;
    vsr_layer_type layer;
} lin_kind;
static const lin_kind lin_kinds[] = {
    {"attention", "self_attn.q_proj", VSR_LAYER_FULL_ATTENTION},
    {"attention", "self_attn.k_proj", VSR_LAYER_FULL_ATTENTION},
    {"attention", "self_attn.v_proj", VSR_LAYER_FULL_ATTENTION},
    {"attention", "self_attn.o_proj", VSR_LAYER_FULL_ATTENTION},
    {"DeltaNet", "linear_attn.in_proj_qkv", VSR_LAYER_LINEAR_ATTENTION},
    {"DeltaNet", "linear_attn.in_proj_z", VSR_LAYER_LINEAR_ATTENTION},
    {"DeltaNet", "linear_attn.in_proj_b", VSR_LAYER_LINEAR_ATTENTION},
    {"DeltaNet", "linear_attn.in_proj_a", VSR_LAYER_LINEAR_ATTENTION},
    {"DeltaNet", "linear_attn.out_proj", VSR_LAYER_LINEAR_ATTENTION},
    {"MLP", "mlp.gate_proj", (vsr_layer_type)-1},
    {"MLP", "mlp.up_proj", (vsr_layer_type)-1},
    {"MLP", "mlp.down_proj", (vsr_layer_type)-1},
};

static const char *scheme_detail(const vsr_quant_config *q, char *buf, size_t n) {
    switch (q->scheme) {
    case VSR_SCHEME_FP8: snprintf(buf, n, "FP8 E4M3, per-channel scale, dynamic per-token FP8 activations"); break;
    case VSR_SCHEME_INT4:
        if (q->group_size > 0)
            snprintf(buf, n, "int4 %s, group %d%s, BF16 activations", q->symmetric ? "symmetric (GPTQ)" : "asymmetric (AWQ)",
                     q->group_size, q->actorder_group ? ", act-order g_idx" : "");
        else
            snprintf(buf, n, "int4 %s, per-channel, BF16 activations", q->symmetric ? "symmetric (GPTQ)" : "asymmetric (AWQ)");
        break;
    case VSR_SCHEME_NVFP4:
        snprintf(buf, n, "NVFP4 E2M1, groups of 16, E4M3 block scales, global scale, %s",
                 q->input_activations ? "FP4 activations (W4A4)" : "BF16 activations (W4A16)");
        break;
    default: snprintf(buf, n, "BF16"); break;
    }
    return buf;
}

static uint64_t file_size(const char *dir, const char *name) {
    char p[8192];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

typedef struct mem_math {
    int full_layers, linear_layers;
    uint64_t kv_bf16, kv_fp8;   /* bytes per token */
    uint64_t state_rec, state_conv; /* bytes per sequence */
} mem_math;

static void memory_math(const vsr_text_config *c, mem_math *m) {
    m->full_layers = vsr_text_count_layers(c, VSR_LAYER_FULL_ATTENTION);
    m->linear_layers = vsr_text_count_layers(c, VSR_LAYER_LINEAR_ATTENTION);
    /* K and V, per full-attention layer: layers x KV heads x head_dim x 2 x bytes */
    m->kv_bf16 = (uint64_t)m->full_layers * c->num_key_value_heads * c->head_dim * 2 * 2;
    m->kv_fp8 = m->kv_bf16 / 2;
    /* DeltaNet: an FP32 [Hv, dk, dv] state per layer, plus the conv window of
     * (kernel - 1) BF16 columns over q|k|v (2*Kd + Vd channels). */
    m->state_rec = (uint64_t)m->linear_layers * c->linear_num_value_heads * c->linear_key_head_dim *
                   c->linear_value_head_dim * 4;
    m->state_conv = (uint64_t)m->linear_layers * (uint64_t)(2 * vsr_text_linear_key_dim(c) + vsr_text_linear_value_dim(c)) *
                    (uint64_t)(c->linear_conv_kernel_dim - 1) * 2;
}

static void print_fit(const char *what, double mem_bytes, double share, uint64_t weights, const mem_math *m) {
    double budget = mem_bytes * share, left = budget - (double)weights;
    printf("  %s: %.1f GB x %.2f = %.1f GB; %.1f - %.1f (weights) = %.1f GB for the KV cache\n", what, mem_bytes / GB,
           share, budget / GB, budget / GB, weights / GB, left / GB);
    if (left <= 0 || !m->kv_bf16) {
        printf("    %s\n", left <= 0 ? "the weights do not fit in that share" : "no full-attention layer: no KV cache");
        return;
    }
    char a[32], b[32];
    printf("    BF16 KV: %.1f GB / %llu bytes = %s tokens; FP8 KV: %.1f GB / %llu bytes = %s tokens\n", left / GB,
           (unsigned long long)m->kv_bf16, commas((long long)(left / (double)m->kv_bf16), a, sizeof a), left / GB,
           (unsigned long long)m->kv_fp8, commas((long long)(left / (double)m->kv_fp8), b, sizeof b));
}

/* inspect's own options, after the shared ones (pkg_cli). */
typedef struct inspect_opts {
    bool verify;
    double gpu_gib, share;
} inspect_opts;

static int inspect_option(void *ctx, int argc, char **argv, int *i) {
    inspect_opts *o = ctx;
    const char *v;
    int r;
    if (!strcmp(argv[*i], "--verify")) {
        o->verify = true;
        return 1;
    }
    if ((r = arg_value(argc, argv, i, "--gpu-memory-gib", &v)) ||
        (r = arg_value(argc, argv, i, "--gpu-memory-gb", &v))) {
        char *end;
        if (r < 0 || (o->gpu_gib = strtod(v, &end)) <= 0 || *end) {
            fprintf(stderr, "inspect: --gpu-memory-gib/--gpu-memory-gb must be a positive number\n");
            return -1;
        }
        /* the seed's unit is 1 GB = 10^9 bytes; carry GB as GiB-equivalent */
        if (strstr(argv[*i - (strchr(argv[*i], '=') ? 0 : 1)], "-gb")) o->gpu_gib = o->gpu_gib * 1e9 / 1073741824.0;
        return 1;
    }
    if ((r = arg_value(argc, argv, i, "--memory-share", &v))) {
        char *end;
        if (r < 0 || (o->share = strtod(v, &end)) <= 0 || o->share > 1 || *end) {
            fprintf(stderr, "inspect: --memory-share must be in (0, 1]; got '%s'\n", r < 0 ? "" : v);
            return -1;
        }
        return 1;
    }
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    pkg_cli cli;
    inspect_opts o = {.share = 0.92};
    int rc = pkg_cli_parse(&cli, "inspect", usage, inspect_option, &o, argc, argv);
    if (rc >= 0) return rc;
    bool json = cli.json, verify = o.verify;
    double gpu_gib = o.gpu_gib, share = o.share;
    vsr_package *p = NULL;
    vsr_err e = {0};
    if (vsr_package_open(cli.pkg, cli.rev, cli.store, &p, &e)) {
        fprintf(stderr, "vllm-srun inspect: %s\n", e.msg);
        return 1;
    }
    vsr_status vst = VSR_OK;
    vsr_err ve = {0};
    if (verify) vst = vsr_package_verify(p, (int)cli.threads, NULL, &ve);
    /* What a load would refuse: the package checks that read no weight byte (verify ran
     * them already), then the decider's (template, tokenizer, answer codes). */
    vsr_status lst = verify ? vst : vsr_package_check(p, &ve);
    if (!lst && p->family == VSR_FAMILY_DECISION3) {
        vsr_decider *dec = NULL;
        lst = vsr_decider_open(p, NULL, &dec, &ve);
        vsr_decider_free(dec);
    }
    /* Vela 2.0: the decision layer's own checks (tokenizer, calibration's presets) with no model;
     * it also names the presets the package defines. */
    const char *presets[4] = {0};
    int n_presets = 0;
    const vsr_vela2_config *v2 = p->family == VSR_FAMILY_VELA2 ? p->vela2 : NULL;
    if (v2) {
        vsr_v2_info info = {.model_name = v2->model_name, .max_length = v2->max_length, .pad_token_id = v2->pad_token_id,
                            .head_dim = v2->head_dim, .span_d = v2->span_d, .span_slots = v2->span_slots,
                            .hybrid_rmax = v2->hybrid_rmax, .window = v2->window, .stride = v2->stride,
                            .window_above = v2->window_above, .has_broad_head = v2->has_broad_head,
                            .hidden_size = p->config.text.hidden_size};
        vsr_v2_decider *vd = NULL;
        vsr_err de0 = {0};
        vsr_status ds = vsr_v2_decider_open_dir(p->path, &info, &vd, &de0);
        if (!ds) n_presets = vsr_v2_decider_presets(vd, presets, 4);
        else if (!lst) lst = ds, ve = de0;
        vsr_v2_decider_free(vd);
    }

    const vsr_text_config *c = &p->config.text;
    const vsr_quant_config *q = &p->quant;
    char buf[256], a[32], b[32], d[32];
    json_t *J = json_object();

    /* where */
    json_object_set_new(J, "repo", p->repo[0] ? json_string(p->repo) : json_null());
    json_object_set_new(J, "revision", p->revision[0] ? json_string(p->revision) : json_null());
    json_object_set_new(J, "requested_revision", p->repo[0] ? json_string(p->requested_revision) : json_null());
    json_object_set_new(J, "path", json_string(p->path));
    json_object_set_new(J, "family", json_string(vsr_family_name(p->family)));
    const char *fmt = vsr_scheme_info(q->scheme)->ct_format;
    json_object_set_new(J, "format", json_pack("{s:s?,s:s?,s:s,s:s?}", "quant_method", fmt ? "compressed-tensors" : NULL,
                                               "format", fmt, "scheme", vsr_scheme_info(q->scheme)->name, "version",
                                               q->version[0] ? q->version : NULL));
    if (!json) {
        if (p->repo[0]) {
            printf("repo:        %s\n", p->repo);
            printf("revision:    %s", p->revision);
            if (strcmp(p->requested_revision, p->revision)) printf(" (from %s)", p->requested_revision);
            printf("\n");
        } else {
            printf("repo:        (local package, no revision)\n");
        }
        printf("path:        %s\n", p->path);
        printf("family:      %s\n", vsr_family_name(p->family));
        if (fmt) printf("format:      compressed-tensors / %s%s%s%s\n", fmt, q->version[0] ? " (written by " : "", q->version,
                        q->version[0] ? ")" : "");
        else printf("format:      BF16 (no quantization_config)\n");
        printf("backbone:    %s, %d layers (%d DeltaNet, %d full attention), hidden %lld\n", c->model_type,
               c->num_hidden_layers, vsr_text_count_layers(c, VSR_LAYER_LINEAR_ATTENTION),
               vsr_text_count_layers(c, VSR_LAYER_FULL_ATTENTION), (long long)c->hidden_size);
        if (p->family == VSR_FAMILY_DECISION3)
            printf("decision:    %s, attention %s, readout %s, temperature %g, max_length %s\n", p->decision.format_id,
                   p->decision.attention_mode, p->decision.readout_dtype, p->decision.temperature,
                   p->decision.max_length < 0 ? "null" : commas(p->decision.max_length, a, sizeof a));
        if (v2) {
            printf("vela2:       %s, max_length %s, span_layout %d / %d / %d (hybrid_rmax / window / stride)\n",
                   v2->model_name, commas(v2->max_length, a, sizeof a), v2->hybrid_rmax, v2->window, v2->stride);
            printf("heads (FP32, %s parameters):\n", commas(p->params_heads, a, sizeof a));
            printf("  candidate   head.* + set_bias, head_dim %d: choice, noul, score and set questions\n", v2->head_dim);
            printf("  router span span2.*, d %d, slots %d: span questions, the pii and halu presets\n", v2->span_d,
                   v2->span_slots);
            if (v2->has_broad_head)
                printf("  broad span  span_broad.* (broad_head.safetensors), d %d, slots %d: other label sets\n",
                       v2->broad_d, v2->broad_slots);
            else
                printf("  broad span  none (no broad_head.safetensors): every span question reads the router head\n");
            printf("presets:     ");
            for (int i = 0; i < n_presets; i++) printf("%s%s", i ? ", " : "", presets[i]);
            printf("%s\n", n_presets ? " (calibration.json)" : "none");
        }
        if (p->builtin) {
            char classes[128] = "";
            json_t *g = p->builtin->golden_json ? json_loads(p->builtin->golden_json, 0, NULL) : NULL;
            const char *k;
            json_t *gv;
            json_object_foreach(g, k, gv) snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s%s",
                                                   classes[0] ? ", " : "", k);
            json_decref(g);
            printf("catalogue:   %s (%s)%s%s\n", p->builtin->published ? "published package" : "built-in",
                   p->builtin->scheme_note ? p->builtin->scheme_note : "",
                   classes[0] ? "; golden answers recorded for " : "; no golden answers recorded (golden unverified)",
                   classes);
        }
    }

    /* schemes per linear group */
    json_t *JS = json_array();
    if (!json) printf("\nlinears (scheme: %s):\n", scheme_detail(q, buf, sizeof buf));
    for (size_t k = 0; k < sizeof lin_kinds / sizeof lin_kinds[0]; k++) {
        int layers = 0, quantized = 0;
        for (int l = 0; l < c->num_hidden_layers; l++) {
            if ((int)lin_kinds[k].layer >= 0 && c->layer_types[l] != lin_kinds[k].layer) continue;
            char mod[256];
            snprintf(mod, sizeof mod, "%slayers.%d.%s", p->text_prefix, l, lin_kinds[k].name);
            layers++;
            if (q->scheme != VSR_SCHEME_BF16 && !vsr_quant_module_ignored(q, mod)) quantized++;
        }
        if (!layers) continue;
        const char *shortname = strrchr(lin_kinds[k].name, '.') + 1;
        json_array_append_new(JS, json_pack("{s:s,s:s,s:i,s:i,s:i}", "group", lin_kinds[k].group, "linear", shortname,
                                            "layers", layers, "quantized", quantized, "bf16", layers - quantized));
        if (json) continue;
        if (quantized == layers) snprintf(buf, sizeof buf, "%s in all %d layers", vsr_scheme_info(q->scheme)->name, layers);
        else if (!quantized)
            snprintf(buf, sizeof buf, "BF16 in all %d layers%s", layers, q->scheme != VSR_SCHEME_BF16 ? " (ignore list)" : "");
        else
            snprintf(buf, sizeof buf, "%s in %d of %d layers, BF16 (ignore list) in %d", vsr_scheme_info(q->scheme)->name,
                     quantized, layers, layers - quantized);
        printf("  %-9s %-13s %s\n", lin_kinds[k].group, shortname, buf);
    }
    if (!json) printf("  embeddings, norms, conv1d, dt_bias, A_log stay %s; %s %s\n", c->dtype, v2 ? "heads" : "readout",
                      p->family == VSR_FAMILY_DECISION3 ? p->decision.readout_dtype : v2 ? "FP32 (above)" : "none");
    json_object_set_new(J, "linears", JS);
    if (v2) {
        json_t *JP = json_array();
        for (int i = 0; i < n_presets; i++) json_array_append_new(JP, json_string(presets[i]));
        json_object_set_new(
            J, "vela2",
            json_pack("{s:s,s:I,s:{s:i,s:i,s:i},s:I,s:{s:{s:s,s:i},s:{s:s,s:i,s:i},s:o},s:o}", "model_name",
                      v2->model_name, "max_length", (json_int_t)v2->max_length, "span_layout", "hybrid_rmax",
                      v2->hybrid_rmax, "window", v2->window, "stride", v2->stride, "head_parameters",
                      (json_int_t)p->params_heads, "heads", "candidate", "tensors", "head.*, set_bias", "head_dim",
                      v2->head_dim, "router_span", "tensors", "span2.*", "d", v2->span_d, "slots", v2->span_slots,
                      "broad_span",
                      v2->has_broad_head ? json_pack("{s:s,s:i,s:i}", "tensors", "span_broad.*", "d", v2->broad_d,
                                                     "slots", v2->broad_slots)
                                         : json_null(),
                      "presets", JP));
    }

    /* parameters */
    int64_t loaded = vsr_package_params_loaded(p);
    json_object_set_new(J, "parameters", json_pack("{s:I,s:I,s:I,s:I,s:I}", "text", (json_int_t)p->params_text, "vision",
                                                   (json_int_t)p->params_vision, "readout", (json_int_t)p->params_readout,
                                                   "heads", (json_int_t)p->params_heads, "loaded", (json_int_t)loaded));
    if (!json && v2) {
        printf("\nparameters:  backbone %s, heads %s, loaded %s\n", commas(p->params_text, a, sizeof a),
               commas(p->params_heads, b, sizeof b), commas(loaded, buf, sizeof buf));
    } else if (!json) {
        printf("\nparameters:  text %s, vision %s (not loaded), readout %s, loaded %s\n", commas(p->params_text, a, sizeof a),
               commas(p->params_vision, b, sizeof b), commas(p->params_readout, d, sizeof d),
               commas(loaded, buf, sizeof buf));
    }

    /* bytes */
    json_t *JF = json_object();
    uint64_t total = 0;
    if (!json) printf("\nfiles on disk:\n");
    int nf = p->has_manifest ? p->manifest.n_files : (int)vsr_weights_file_count(p->weights);
    for (int i = 0; i < nf; i++) {
        const char *name = p->has_manifest ? p->manifest.files[i].name : vsr_weights_file_name(p->weights, (size_t)i);
        uint64_t s = file_size(p->path, name);
        total += s;
        json_object_set_new(JF, name, json_integer((json_int_t)s));
        if (!json) printf("  %15s  %s\n", commas((long long)s, a, sizeof a), name);
    }
    uint64_t reserve = vsr_gate_reserve_bytes(p->device_weight_bytes);
    if (!json) {
        printf("  %15s  total (%.2f GiB); weight files %s bytes\n", commas((long long)total, a, sizeof a),
               total / 1073741824.0, commas((long long)p->weight_file_bytes, b, sizeof b));
        printf("on a device: %s bytes of weights as stored (%.2f GiB), plus an activation reserve of %.2f GiB\n",
               commas((long long)p->device_weight_bytes, a, sizeof a), p->device_weight_bytes / 1073741824.0,
               reserve / 1073741824.0);
    }
    json_object_set_new(J, "bytes", json_pack("{s:o,s:I,s:I,s:I,s:I}", "files", JF, "total", (json_int_t)total, "weight_files",
                                              (json_int_t)p->weight_file_bytes, "device_weights",
                                              (json_int_t)p->device_weight_bytes, "activation_reserve", (json_int_t)reserve));

    /* identity */
    const char *vstate = !verify ? "not verified (run vllm-srun verify)" : vst ? "failed" : "verified";
    json_object_set_new(J, "load", json_pack("{s:s,s:s?,s:b}", "status", lst ? "refused" : "ok", "reason",
                                             lst ? ve.msg : NULL, "hashed", verify));
    json_object_set_new(J, "identity",
                        json_pack("{s:s?,s:s?,s:s?,s:s,s:s?}", "model_sha256",
                                  p->has_manifest && p->manifest.model_sha256[0] ? p->manifest.model_sha256 : NULL,
                                  "manifest_sha256", p->has_manifest ? p->manifest.manifest_sha256 : NULL, "computed_model_sha256",
                                  p->verified ? p->model_sha256 : NULL, "status", vstate, "reason", vst ? ve.msg : NULL));
    if (!json) {
        printf("\nidentity:\n");
        if (p->has_manifest) {
            if (p->manifest.model_sha256[0]) printf("  model_sha256     %s (recorded)\n", p->manifest.model_sha256);
            else if (v2)
                printf("  model_sha256     %s\n", p->verified ? p->model_sha256
                                                            : "(not recorded: the vela2 manifest lists file digests; "
                                                              "--verify computes sha256_json of the weight digests)");
            printf("  manifest_sha256  %s\n", p->manifest.manifest_sha256);
        } else {
            printf("  no MODEL_MANIFEST.json\n");
        }
        printf("  %s%s%s\n", vstate, vst ? ": " : "", vst ? ve.msg : "");
        printf("\nload check:  %s%s\n", lst ? "a load refuses this package: " : "ok",
               lst ? ve.msg : verify ? " (hashes, identity, tensors, parameters, input limit, tokenizer)"
                                     : " (tensors, parameters, input limit, tokenizer; hashes not read: --verify)");
    }

    /* devices */
    vsr_device_list devs;
    vsr_err de = {0};
    json_t *JD = json_array();
    vsr_gate_request gr;
    vsr_package_gate_request(p, &gr);
    if (vsr_devices_probe(&devs, &de)) devs.count = 0;
    if (!json) printf("\ndevices:\n");
    for (int i = 0; i < devs.count; i++) {
        char id[32];
        vsr_err ge = {0};
        vsr_status gs = vsr_gate_device(&devs.dev[i], &gr, &ge);
        vsr_device_id(&devs.dev[i], id, sizeof id);
        /* A package refusal holds on every device; otherwise the device's own verdict. */
        const char *why = lst ? ve.msg : gs ? ge.msg : NULL;
        json_array_append_new(JD, json_pack("{s:s,s:s,s:s,s:s?}", "device", id, "name", devs.dev[i].name, "verdict",
                                            why ? "refused" : "ok", "reason", why));
        if (!json) printf("  %-8s %s: %s%s\n", id, devs.dev[i].name, lst ? "refused: " : "", why ? why : "ok");
    }
    if (!json && !devs.count) printf("  none probed: %s\n", de.msg);
    json_object_set_new(J, "devices", JD);

    /* memory math (seed quantized-checkpoints-basics.txt, "Memory math") */
    mem_math m;
    memory_math(c, &m);
    json_t *JM = json_pack("{s:i,s:I,s:I,s:I,s:I,s:f,s:[]}", "full_attention_layers", m.full_layers, "kv_bytes_per_token_bf16",
                           (json_int_t)m.kv_bf16, "kv_bytes_per_token_fp8", (json_int_t)m.kv_fp8,
                           "deltanet_state_bytes_per_sequence", (json_int_t)m.state_rec,
                           "deltanet_conv_bytes_per_sequence", (json_int_t)m.state_conv, "memory_share", share, "fits");
    if (!json) {
        printf("\nmemory math (1 GB = 10^9 bytes):\n");
        printf("  KV cache per token = %d full-attention layers x %d KV heads x %d x 2 (K and V) x 2 bytes = %s bytes "
               "in BF16, %s in FP8\n",
               m.full_layers, c->num_key_value_heads, c->head_dim, commas((long long)m.kv_bf16, a, sizeof a),
               commas((long long)m.kv_fp8, b, sizeof b));
        printf("  DeltaNet state per sequence = %d layers x %d value heads x %d x %d x 4 bytes = %s bytes, plus conv "
               "state %d x %lld x %d x 2 bytes = %s bytes\n",
               m.linear_layers, c->linear_num_value_heads, c->linear_key_head_dim, c->linear_value_head_dim,
               commas((long long)m.state_rec, a, sizeof a), m.linear_layers,
               (long long)(2 * vsr_text_linear_key_dim(c) + vsr_text_linear_value_dim(c)), c->linear_conv_kernel_dim - 1,
               commas((long long)m.state_conv, b, sizeof b));
    }
    int shown = 0;
    for (int i = 0; i < devs.count; i++) {
        if (devs.dev[i].kind == VSR_DEV_CPU || !devs.dev[i].mem_total) continue;
        char id[32], what[192];
        vsr_device_id(&devs.dev[i], id, sizeof id);
        snprintf(what, sizeof what, "%s (%s)", id, devs.dev[i].name);
        double mem = (double)devs.dev[i].mem_total;
        double left = mem * share - (double)p->device_weight_bytes;
        json_array_append_new(json_object_get(JM, "fits"),
                              json_pack("{s:s,s:f,s:I,s:I}", "device", id, "memory_gb", mem / GB, "tokens_bf16_kv",
                                        (json_int_t)(left > 0 && m.kv_bf16 ? left / m.kv_bf16 : 0), "tokens_fp8_kv",
                                        (json_int_t)(left > 0 && m.kv_fp8 ? left / m.kv_fp8 : 0)));
        if (!json) print_fit(what, mem, share, p->device_weight_bytes, &m);
        shown++;
    }
    if (gpu_gib > 0) {
        double mem = gpu_gib * 1073741824.0, left = mem * share - (double)p->device_weight_bytes;
        json_array_append_new(json_object_get(JM, "fits"),
                              json_pack("{s:s,s:f,s:I,s:I}", "device", "--gpu-memory-gib", "memory_gb", mem / GB,
                                        "tokens_bf16_kv", (json_int_t)(left > 0 && m.kv_bf16 ? left / m.kv_bf16 : 0),
                                        "tokens_fp8_kv", (json_int_t)(left > 0 && m.kv_fp8 ? left / m.kv_fp8 : 0)));
        snprintf(buf, sizeof buf, "a %.1f GB GPU", mem / GB);
        if (!json) print_fit(buf, mem, share, p->device_weight_bytes, &m);
        shown++;
    }
    if (!json && !shown) printf("  no GPU here: pass --gpu-memory-gib G to see the tokens that fit\n");
    json_object_set_new(J, "memory", JM);

    if (json) {
        char *s = json_dumps(J, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "{}");
        free(s);
    }
    json_decref(J);
    vsr_package_close(p);
    return vst || lst ? 1 : 0;
}
