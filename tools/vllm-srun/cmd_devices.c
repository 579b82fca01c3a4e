/* vllm-srun devices [--json]: what this host has and what each device can run, one column
 * per format (the hardware table of docs/devices.md), and which device `auto` picks first. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "vsr/device.h"

#define GIB 1073741824.0

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllm-srun devices [--json]\n\n"
            "Lists the CPU and every NVIDIA (libcuda) and AMD (KFD, HIP) GPU this host has, with\n"
            "what each can run: BF16, FP8 (E4M3 or E4M3 FNUZ), int4 (fused, unpacked or\n"
            "unverified) and NVFP4, and the device --device auto tries first.\n\n"
            "  --json   print {\"auto\":..., \"devices\":[...], \"notes\":[...], \"build\":{...}}\n");
}

/* auto's first device: ROCm, then CUDA, then the CPU (reference-runtime.md 9). Which one
 * serves a given package also depends on its format and size: `inspect` says that. */
static int auto_first(const vsr_device_list *l) {
    static const vsr_device_kind order[] = {VSR_DEV_ROCM, VSR_DEV_CUDA, VSR_DEV_CPU};
    for (size_t o = 0; o < sizeof order / sizeof order[0]; o++)
        for (int i = 0; i < l->count; i++)
            if (l->dev[i].kind == order[o]) return i;
    return -1;
}

static const char *bf16_cell(const vsr_device *d, const vsr_device_caps *c) {
    if (c->bf16 == VSR_SUPPORT_NO) return "no";
    if (d->kind != VSR_DEV_CPU) return "yes";
    return (d->cpu_features & VSR_CPU_AVX512BF16) ? "yes (AVX512_BF16)" : "yes (software)";
}
static const char *fp8_cell(const vsr_device_caps *c, bool json) {
    if (c->fp8 == VSR_SUPPORT_NO) return "no";
    if (json) return c->fp8_fnuz ? "e4m3fnuz" : "e4m3";
    return c->fp8_fnuz ? "E4M3 FNUZ" : "E4M3";
}
static const char *int4_cell(const vsr_device_caps *c) {
    if (c->int4 == VSR_SUPPORT_NO) return "no";
    if (c->int4 == VSR_SUPPORT_UNVERIFIED) return "unverified";
    return c->int4_fused ? "fused" : "unpacked";
}
static const char *nvfp4_cell(const vsr_device_caps *c) { return c->nvfp4 == VSR_SUPPORT_YES ? "yes" : "no"; }

static void arch_cell(const vsr_device *d, char *buf, size_t n) {
    if (d->kind == VSR_DEV_CUDA) snprintf(buf, n, "cc %d.%d", d->cc_major, d->cc_minor);
    else if (d->kind == VSR_DEV_ROCM) snprintf(buf, n, "%s", d->gfx);
    else snprintf(buf, n, "%d cores", d->cores);
}

static const struct {
    uint32_t bit;
    const char *name;
} cpu_feature_names[] = {
    {VSR_CPU_SSE42, "sse4_2"},        {VSR_CPU_AVX, "avx"},           {VSR_CPU_AVX2, "avx2"},
    {VSR_CPU_FMA, "fma"},             {VSR_CPU_F16C, "f16c"},         {VSR_CPU_AVX512F, "avx512f"},
    {VSR_CPU_AVX512BW, "avx512bw"},   {VSR_CPU_AVX512VL, "avx512vl"}, {VSR_CPU_AVX512BF16, "avx512_bf16"},
    {VSR_CPU_AVX512VNNI, "avx512_vnni"}, {VSR_CPU_AMX_BF16, "amx_bf16"}, {VSR_CPU_NEON, "neon"},
};

static json_t *notes_json(const char *notes) {
    json_t *a = json_array();
    const char *p = notes;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        json_array_append_new(a, json_stringn(p, n));
        p += n + (e ? 1 : 0);
    }
    return a;
}

static int print_json(const vsr_device_list *l, int autoi) {
    char id[32], why[256];
    json_t *root = json_object();
    json_object_set_new(root, "auto", autoi >= 0 ? json_string(vsr_device_id(&l->dev[autoi], id, sizeof id)) : json_null());
    json_t *devs = json_array();
    for (int i = 0; i < l->count; i++) {
        const vsr_device *d = &l->dev[i];
        vsr_device_caps c;
        vsr_device_caps_of(d, &c);
        json_t *o = json_object();
        json_object_set_new(o, "id", json_string(vsr_device_id(d, id, sizeof id)));
        json_object_set_new(o, "kind", json_string(vsr_device_kind_name(d->kind)));
        json_object_set_new(o, "index", json_integer(d->index));
        json_object_set_new(o, "name", json_string(d->name));
        json_object_set_new(o, "class", json_string(vsr_device_class(d)));
        if (d->kind == VSR_DEV_CUDA) {
            char cc[16];
            snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
            json_object_set_new(o, "cc", json_string(cc));
        }
        if (d->kind == VSR_DEV_ROCM) json_object_set_new(o, "gfx", json_string(d->gfx));
        json_object_set_new(o, "mem_total_bytes", json_integer((json_int_t)d->mem_total));
        json_object_set_new(o, "mem_free_bytes", json_integer((json_int_t)d->mem_free));
        if (d->kind == VSR_DEV_CPU) {
            json_object_set_new(o, "cores", json_integer(d->cores));
            json_t *f = json_array();
            for (size_t k = 0; k < sizeof cpu_feature_names / sizeof cpu_feature_names[0]; k++)
                if (d->cpu_features & cpu_feature_names[k].bit) json_array_append_new(f, json_string(cpu_feature_names[k].name));
            json_object_set_new(o, "cpu_features", f);
        }
        json_object_set_new(o, "bf16", json_boolean(c.bf16 == VSR_SUPPORT_YES));
        json_object_set_new(o, "fp8", json_string(fp8_cell(&c, true)));
        json_object_set_new(o, "int4", json_string(int4_cell(&c)));
        json_object_set_new(o, "nvfp4", json_string(nvfp4_cell(&c)));
        const char *missing = vsr_device_nvfp4_missing(d, why, sizeof why);
        json_object_set_new(o, "nvfp4_missing", missing[0] ? json_string(missing) : json_null());
        if (d->kind == VSR_DEV_CUDA) {
            json_object_set_new(o, "fp4_toolkit", json_boolean(d->fp4_toolkit));
            json_object_set_new(o, "fp4_act_kernel", json_boolean(d->fp4_act_kernel));
        }
        json_array_append_new(devs, o);
    }
    json_object_set_new(root, "devices", devs);
    json_object_set_new(root, "notes", notes_json(l->notes));
    const vsr_device_build *b = vsr_device_build_caps();
    json_t *bj = json_object();
    json_object_set_new(bj, "cuda", json_boolean(b->cuda));
    if (b->cuda) {
        char v[16];
        snprintf(v, sizeof v, "%d.%d", b->cuda_version / 1000, (b->cuda_version % 1000) / 10);
        json_object_set_new(bj, "cuda_version", json_string(v));
    } else {
        json_object_set_new(bj, "cuda_version", json_null());
    }
    json_object_set_new(bj, "fp4_toolkit", json_boolean(b->fp4_toolkit));
    json_object_set_new(bj, "fp4_act_kernel", json_boolean(b->fp4_act_kernel));
    json_object_set_new(root, "build", bj);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!s) {
        fprintf(stderr, "vllm-srun devices: out of memory\n");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

static int print_table(const vsr_device_list *l, int autoi) {
    char id[32], arch[32], mem[48], why[256];
    int wname = 4;
    for (int i = 0; i < l->count; i++) {
        int n = (int)strlen(l->dev[i].name);
        if (n > wname) wname = n < 40 ? n : 40;
    }
    printf("%-7s  %-*s  %-10s  %-21s  %-17s  %-9s  %-10s  %s\n", "ID", wname, "NAME", "ARCH", "MEMORY GiB free/total",
           "BF16", "FP8", "int4", "NVFP4");
    for (int i = 0; i < l->count; i++) {
        const vsr_device *d = &l->dev[i];
        vsr_device_caps c;
        vsr_device_caps_of(d, &c);
        arch_cell(d, arch, sizeof arch);
        snprintf(mem, sizeof mem, "%.1f / %.1f", (double)d->mem_free / GIB, (double)d->mem_total / GIB);
        printf("%-7s  %-*.*s  %-10s  %-21s  %-17s  %-9s  %-10s  %s\n", vsr_device_id(d, id, sizeof id), wname, wname,
               d->name, arch, mem, bf16_cell(d, &c), fp8_cell(&c, false), int4_cell(&c), nvfp4_cell(&c));
    }
    printf("\nauto: %s (first of ROCm, CUDA, CPU; a package's format and size can skip devices)\n",
           autoi >= 0 ? vsr_device_id(&l->dev[autoi], id, sizeof id) : "none");
    printf("\n");
    for (int i = 0; i < l->count; i++) {
        const vsr_device *d = &l->dev[i];
        const char *missing = vsr_device_nvfp4_missing(d, why, sizeof why);
        printf("%-7s  %s%s%s\n", vsr_device_id(d, id, sizeof id), vsr_device_class(d), missing[0] ? "; NVFP4: " : "",
               missing);
    }
    if (l->notes[0]) {
        printf("\nnotes:\n");
        for (const char *p = l->notes; *p;) {
            size_t n = strcspn(p, "\n");
            printf("  %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    }
    return 0;
}

int cmd_devices(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "vllm-srun devices: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    vsr_device_list l;
    vsr_err err = {0};
    if (vsr_devices_probe(&l, &err)) {
        fprintf(stderr, "vllm-srun devices: %s\n", err.msg);
        return 1;
    }
    int autoi = auto_first(&l);
    return json ? print_json(&l, autoi) : print_table(&l, autoi);
}
