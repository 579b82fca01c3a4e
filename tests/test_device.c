/* Devices: every row of the hardware table through injected devices, each scheme's verdict
 * and exact message, memory refusals, placement (auto order, skipping, explicit devices
 * never replaced), --device parsing, the JSON reader's refusals, the KFD sysfs reader on a
 * written tree, and a real probe of this host checked against the kernel's own CPU flags. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "device/probe.h"
#include "test.h"
#include "vsr/device.h"

#define GIB (1ull << 30)
#define FP8_MSG VSR_REFUSAL_FP8
#define NVFP4_MSG VSR_REFUSAL_NVFP4
#define NO_BF16 "Decision 3.0 keeps its weights in BF16 on a GPU; "

static vsr_device dev_json(const char *j) {
    vsr_device d;
    vsr_err e = {0};
    vsr_status st = vsr_device_from_json(j, &d, &e);
    CHECK_MSG(st == VSR_OK, "device JSON %s refused: %s", j, e.msg);
    return d;
}

/* A Decision 3.0 request: quantized weights allowed, BF16 needed, 10 GiB of weights. */
static vsr_gate_request d3(vsr_scheme s, uint64_t weights) {
    vsr_gate_request r = {.quantized_family_ok = true, .needs_bf16 = true, .scheme = s, .weight_bytes = weights,
                          .reserve_bytes = vsr_gate_reserve_bytes(weights)};
    return r;
}

/* Device JSONs for the table. Blackwell rows set both NVFP4 prerequisites explicitly so the
 * test does not depend on how this copy was built. */
#define MI300X "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI300X\",\"gfx\":\"gfx942\",\"mem_total_gib\":192,\"mem_free_gib\":190}"
#define MI325X "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI325X\",\"gfx\":\"gfx942\",\"mem_total_gib\":256,\"mem_free_gib\":250}"
#define MI350 "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI355X\",\"gfx\":\"gfx950\",\"mem_total_gib\":288,\"mem_free_gib\":280}"
#define W7900 "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Radeon PRO W7900\",\"gfx\":\"gfx1100\",\"mem_total_gib\":48,\"mem_free_gib\":46}"
#define MI50 "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI50\",\"gfx\":\"gfx906\",\"mem_total_gib\":32,\"mem_free_gib\":31}"
#define A100 "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA A100-SXM4-80GB\",\"cc\":\"8.0\",\"mem_total_gib\":80,\"mem_free_gib\":79}"
#define A10 "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA A10\",\"cc\":\"8.6\",\"mem_total_gib\":24,\"mem_free_gib\":23}"
#define L40S "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA L40S\",\"cc\":\"8.9\",\"mem_total_gib\":48,\"mem_free_gib\":47}"
#define H200 "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":140,\"mem_free_gib\":139}"
#define B200_FULL "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA B200\",\"cc\":\"10.0\",\"mem_total_gib\":180,\"mem_free_gib\":178,\"fp4_toolkit\":true,\"fp4_act_kernel\":true}"
#define B200_NOKERNEL "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA B200\",\"cc\":\"10.0\",\"mem_total_gib\":180,\"mem_free_gib\":178,\"fp4_toolkit\":true,\"fp4_act_kernel\":false}"
#define B200_NOTOOLKIT "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA B200\",\"cc\":\"10.0\",\"mem_total_gib\":180,\"mem_free_gib\":178,\"fp4_toolkit\":false,\"fp4_act_kernel\":true}"
#define RTX5090_FULL "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA GeForce RTX 5090\",\"cc\":\"12.0\",\"mem_total_gib\":32,\"mem_free_gib\":31,\"fp4_toolkit\":true,\"fp4_act_kernel\":true}"
#define RTX5090_NONE "{\"kind\":\"cuda\",\"index\":0,\"name\":\"NVIDIA GeForce RTX 5090\",\"cc\":\"12.0\",\"mem_total_gib\":32,\"mem_free_gib\":31,\"fp4_toolkit\":false,\"fp4_act_kernel\":false}"
#define T4 "{\"kind\":\"cuda\",\"index\":0,\"name\":\"Tesla T4\",\"cc\":\"7.5\",\"mem_total_gib\":16,\"mem_free_gib\":15}"
#define CPU "{\"kind\":\"cpu\",\"name\":\"AMD EPYC\",\"mem_total_gib\":512,\"mem_free_gib\":400,\"cores\":64}"

#define OK NULL
#define NV4(id, why) id ": " NVFP4_MSG ": " why
#define NV_NOFP4(cc) "the device is an NVIDIA GPU without FP4 tensor cores (compute capability " cc ")"

/* One row per device of the hardware table and scheme: the verdict and exact message. */
static const struct {
    const char *dev;
    const char *msg[VSR_SCHEME_COUNT]; /* bf16, fp8, int4, nvfp4: NULL = accepted */
} table[] = {
    {MI300X, {OK, OK, OK, NV4("rocm:0", "the device is a ROCm GPU")}},
    {MI325X, {OK, OK, OK, NV4("rocm:0", "the device is a ROCm GPU")}},
    {MI350, {OK, OK, OK, NV4("rocm:0", "the device is a ROCm GPU")}},
    {W7900,
     {OK, "rocm:0: " FP8_MSG ": the device is AMD Radeon PRO W7900 (gfx1100)", OK,
      NV4("rocm:0", "the device is a ROCm GPU")}},
    {MI50,
     {"rocm:0: " NO_BF16 "rocm:0 (AMD Instinct MI50) has no BF16 support",
      "rocm:0: " NO_BF16 "rocm:0 (AMD Instinct MI50) has no BF16 support",
      "rocm:0: " NO_BF16 "rocm:0 (AMD Instinct MI50) has no BF16 support",
      "rocm:0: " NO_BF16 "rocm:0 (AMD Instinct MI50) has no BF16 support"}},
    {A100,
     {OK, "cuda:0: " FP8_MSG ": the device is NVIDIA A100-SXM4-80GB (compute capability 8.0)", OK,
      NV4("cuda:0", NV_NOFP4("8.0"))}},
    {A10, {OK, "cuda:0: " FP8_MSG ": the device is NVIDIA A10 (compute capability 8.6)", OK, NV4("cuda:0", NV_NOFP4("8.6"))}},
    {L40S, {OK, OK, OK, NV4("cuda:0", NV_NOFP4("8.9"))}},
    {H200, {OK, OK, OK, NV4("cuda:0", NV_NOFP4("9.0"))}},
    {B200_FULL, {OK, OK, OK, OK}},
    {B200_NOKERNEL, {OK, OK, OK, NV4("cuda:0", "the FP4 activation-quantization kernel is unavailable")}},
    {B200_NOTOOLKIT, {OK, OK, OK, NV4("cuda:0", "the CUDA toolkit this runtime was built with lacks FP4 support")}},
    {RTX5090_FULL, {OK, OK, OK, OK}},
    {RTX5090_NONE,
     {OK, OK, OK,
      NV4("cuda:0", "the CUDA toolkit this runtime was built with lacks FP4 support, and the FP4 "
                    "activation-quantization kernel is unavailable")}},
    {T4,
     {"cuda:0: " NO_BF16 "cuda:0 (Tesla T4) has no BF16 support", "cuda:0: " NO_BF16 "cuda:0 (Tesla T4) has no BF16 support",
      "cuda:0: " NO_BF16 "cuda:0 (Tesla T4) has no BF16 support", "cuda:0: " NO_BF16 "cuda:0 (Tesla T4) has no BF16 support"}},
    {CPU, {OK, "cpu: " FP8_MSG ": the device is a CPU", OK, NV4("cpu", "the device is a CPU")}},
};

TEST(hardware_table_verdicts) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        vsr_device d = dev_json(table[i].dev);
        for (int s = 0; s < VSR_SCHEME_COUNT; s++) {
            vsr_gate_request r = d3((vsr_scheme)s, 10 * GIB);
            vsr_err e = {0};
            vsr_status st = vsr_gate_device(&d, &r, &e);
            if (!table[i].msg[s]) {
                CHECK_MSG(st == VSR_OK, "%s scheme %d: refused: %s", d.name, s, e.msg);
            } else {
                CHECK_MSG(st == VSR_E_DEVICE && !strcmp(e.msg, table[i].msg[s]),
                          "%s scheme %d:\n  got  %s (%s)\n  want %s", d.name, s, e.msg, vsr_status_name(st),
                          table[i].msg[s]);
            }
        }
    }
}

TEST(caps_cells) {
    vsr_device_caps c;
    vsr_device d = dev_json(MI300X);
    vsr_device_caps_of(&d, &c);
    CHECK(c.bf16 == VSR_SUPPORT_YES && c.fp8 == VSR_SUPPORT_YES && c.fp8_fnuz && c.int4 == VSR_SUPPORT_YES &&
          !c.int4_fused && c.nvfp4 == VSR_SUPPORT_NO);
    CHECK(!strcmp(vsr_device_class(&d), "AMD Instinct MI300X, MI325X (gfx942)"));
    d = dev_json(MI350);
    vsr_device_caps_of(&d, &c);
    CHECK(c.fp8 == VSR_SUPPORT_YES && !c.fp8_fnuz && c.int4 == VSR_SUPPORT_YES && c.nvfp4 == VSR_SUPPORT_NO);
    CHECK(!strcmp(vsr_device_class(&d), "AMD Instinct MI350 series (gfx950)"));
    d = dev_json(W7900);
    vsr_device_caps_of(&d, &c);
    CHECK(c.bf16 == VSR_SUPPORT_YES && c.fp8 == VSR_SUPPORT_NO && c.int4 == VSR_SUPPORT_UNVERIFIED);
    CHECK(!strcmp(vsr_device_class(&d), "other BF16-capable AMD GPU"));
    d = dev_json(MI50);
    vsr_device_caps_of(&d, &c);
    CHECK(c.bf16 == VSR_SUPPORT_NO && c.int4 == VSR_SUPPORT_NO && c.fp8 == VSR_SUPPORT_NO);
    CHECK(!strcmp(vsr_device_class(&d), "AMD GPU without BF16"));
    d = dev_json(A10);
    vsr_device_caps_of(&d, &c);
    CHECK(c.fp8 == VSR_SUPPORT_NO && c.int4 == VSR_SUPPORT_YES && c.int4_fused);
    CHECK(!strcmp(vsr_device_class(&d), "NVIDIA Ampere (8.0, 8.6, 8.7)"));
    d = dev_json(H200);
    vsr_device_caps_of(&d, &c);
    CHECK(c.fp8 == VSR_SUPPORT_YES && !c.fp8_fnuz && c.int4_fused && c.nvfp4 == VSR_SUPPORT_NO);
    CHECK(!strcmp(vsr_device_class(&d), "NVIDIA Ada, Hopper (8.9, 9.0)"));
    d = dev_json(B200_FULL);
    vsr_device_caps_of(&d, &c);
    CHECK(c.nvfp4 == VSR_SUPPORT_YES);
    CHECK(!strcmp(vsr_device_class(&d), "NVIDIA Blackwell (10.x, 12.x)"));
    d = dev_json(B200_NOKERNEL);
    vsr_device_caps_of(&d, &c);
    CHECK(c.nvfp4 == VSR_SUPPORT_NO);
    d = dev_json(T4);
    vsr_device_caps_of(&d, &c);
    CHECK(c.bf16 == VSR_SUPPORT_NO && c.int4 == VSR_SUPPORT_NO && c.fp8 == VSR_SUPPORT_NO);
    d = dev_json(CPU);
    vsr_device_caps_of(&d, &c);
    CHECK(c.bf16 == VSR_SUPPORT_YES && c.fp8 == VSR_SUPPORT_NO && c.int4 == VSR_SUPPORT_UNVERIFIED &&
          c.nvfp4 == VSR_SUPPORT_NO && !c.int4_fused);
    /* A struct literal works as well as JSON: Ada 8.9 has FP8. */
    vsr_device lit = {.kind = VSR_DEV_CUDA, .cc_major = 8, .cc_minor = 9, .bf16 = true, .name = "NVIDIA L4"};
    vsr_device_caps_of(&lit, &c);
    CHECK(c.fp8 == VSR_SUPPORT_YES);
    lit.cc_minor = 7; /* Orin: Ampere */
    vsr_device_caps_of(&lit, &c);
    CHECK(c.fp8 == VSR_SUPPORT_NO && c.int4_fused);
}

TEST(bf16_by_arch) {
    CHECK(vsr_device_bf16_by_arch(VSR_DEV_CUDA, 8, 0, NULL));
    CHECK(!vsr_device_bf16_by_arch(VSR_DEV_CUDA, 7, 5, NULL));
    CHECK(vsr_device_bf16_by_arch(VSR_DEV_CPU, 0, 0, NULL));
    static const char *const yes[] = {"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1151", "gfx1200", "gfx1201"};
    static const char *const no[] = {"gfx906", "gfx908", "gfx900", "gfx1030", "gfx803", "gfx9420", "gfx11", ""};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        CHECK_MSG(vsr_device_bf16_by_arch(VSR_DEV_ROCM, 0, 0, yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK_MSG(!vsr_device_bf16_by_arch(VSR_DEV_ROCM, 0, 0, no[i]), "%s", no[i]);
    /* The JSON "bf16" key overrides the architecture's answer. */
    vsr_device d = dev_json("{\"kind\":\"rocm\",\"name\":\"x\",\"gfx\":\"gfx1100\",\"mem_total_gib\":8,\"mem_free_gib\":8,\"bf16\":false}");
    vsr_gate_request r = d3(VSR_SCHEME_BF16, GIB);
    vsr_err e = {0};
    CHECK_ERR(vsr_gate_device(&d, &r, &e), e, VSR_E_DEVICE, "rocm:0: " NO_BF16 "rocm:0 (x) has no BF16 support");
}

TEST(int4_without_bf16_when_family_does_not_need_it) {
    vsr_device d = dev_json(T4);
    vsr_gate_request r = d3(VSR_SCHEME_INT4, GIB);
    r.needs_bf16 = false;
    vsr_err e = {0};
    vsr_status st = vsr_gate_device(&d, &r, &e);
    CHECK(st == VSR_E_DEVICE &&
          !strcmp(e.msg, "cuda:0: int4 weights are unpacked to BF16 and multiplied in BF16; cuda:0 (Tesla T4) has no BF16 support"));
    r.scheme = VSR_SCHEME_BF16;
    CHECK(vsr_gate_device(&d, &r, &e) == VSR_OK); /* nothing asked for BF16 */
}

TEST(memory_refusals) {
    CHECK(vsr_gate_reserve_bytes(0) == GIB);
    CHECK(vsr_gate_reserve_bytes(10 * GIB) == 2 * GIB);
    CHECK(vsr_gate_reserve_bytes(30 * GIB) == 4 * GIB);

    vsr_device d = dev_json("{\"kind\":\"cuda\",\"index\":1,\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":140,\"mem_free_gib\":20}");
    vsr_gate_request r = d3(VSR_SCHEME_FP8, 30 * GIB);
    vsr_err e = {0};
    vsr_status st = vsr_gate_device(&d, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE && !strcmp(e.msg, "cuda:1: needs about 34.0 GiB, 20.0 GiB free (weights 30.0 GiB + reserve 4.0 GiB)"),
              "%s", e.msg);

    /* Exactly enough passes; one byte more is refused, and the printed need is above the free. */
    d.mem_free = 40 * GIB;
    r.weight_bytes = 36 * GIB;
    r.reserve_bytes = 4 * GIB;
    CHECK(vsr_gate_device(&d, &r, &e) == VSR_OK);
    r.reserve_bytes++;
    st = vsr_gate_device(&d, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE && !strncmp(e.msg, "cuda:1: needs about 40.1 GiB, 40.0 GiB free", 43), "%s", e.msg);
    /* Free memory is rounded down: 40.99 GiB free shows 40.9, a 41.0x need shows 41.1. */
    d.mem_free = 41 * GIB - GIB / 100;
    r.weight_bytes = 41 * GIB;
    r.reserve_bytes = 1;
    st = vsr_gate_device(&d, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE && !strncmp(e.msg, "cuda:1: needs about 41.1 GiB, 40.9 GiB free", 43), "%s", e.msg);
    /* Overflowing sizes saturate rather than wrap into a pass. */
    r.weight_bytes = UINT64_MAX - 5;
    r.reserve_bytes = 100;
    CHECK(vsr_gate_device(&d, &r, &e) == VSR_E_DEVICE);

    /* ROCm is checked on free memory too. */
    vsr_device m = dev_json("{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI300X\",\"gfx\":\"gfx942\",\"mem_total_gib\":192,\"mem_free_gib\":2.5}");
    r = d3(VSR_SCHEME_INT4, 5 * GIB);
    st = vsr_gate_device(&m, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE && !strcmp(e.msg, "rocm:0: needs about 6.5 GiB, 2.5 GiB free (weights 5.0 GiB + reserve 1.5 GiB)"),
              "%s", e.msg);

    /* The CPU: checked against total memory, not free (weights are mapped). */
    vsr_device c = dev_json("{\"kind\":\"cpu\",\"name\":\"x\",\"mem_total_gib\":16,\"mem_free_gib\":1}");
    r = d3(VSR_SCHEME_BF16, 12 * GIB);
    CHECK(vsr_gate_device(&c, &r, &e) == VSR_OK); /* 14.2 GiB <= 16 total, though only 1 GiB is free */
    r = d3(VSR_SCHEME_BF16, 20 * GIB);
    st = vsr_gate_device(&c, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE &&
                  !strcmp(e.msg, "cpu: needs about 23.0 GiB, 16.0 GiB of memory in all on this host (weights 20.0 GiB + "
                                 "reserve 3.0 GiB; the CPU maps weights from the files, so page cache counts as free and "
                                 "the check is against total memory)"),
              "%s", e.msg);
}

TEST(family_rule) {
    vsr_device d = dev_json(H200);
    vsr_gate_request r = d3(VSR_SCHEME_FP8, GIB);
    r.quantized_family_ok = false; /* a span-capable package */
    vsr_err e = {0};
    vsr_status st = vsr_gate_device(&d, &r, &e);
    CHECK(st == VSR_E_UNSUPPORTED &&
          !strcmp(e.msg, "cuda:0: only Decision 3.0 packages may carry quantized weights; this package's weights are FP8 (float-quantized)"));
    vsr_device_list l = {.count = 1};
    l.dev[0] = d;
    int chosen = -1;
    r.scheme = VSR_SCHEME_NVFP4;
    st = vsr_place(&l, "auto", &r, &chosen, &e);
    CHECK(st == VSR_E_UNSUPPORTED &&
          !strcmp(e.msg, "only Decision 3.0 packages may carry quantized weights; this package's weights are NVFP4 (nvfp4-pack-quantized)"));
    r.scheme = VSR_SCHEME_INT4;
    st = vsr_place(&l, "cuda:0", &r, &chosen, &e);
    CHECK(st == VSR_E_UNSUPPORTED && strstr(e.msg, "this package's weights are int4 (pack-quantized)") == e.msg + strlen(e.msg) - 48);
    r.scheme = VSR_SCHEME_BF16; /* BF16 span package: fine */
    CHECK(vsr_place(&l, "auto", &r, &chosen, &e) == VSR_OK && chosen == 0);
}

static void add(vsr_device_list *l, const char *json) { l->dev[l->count++] = dev_json(json); }

TEST(auto_placement) {
    vsr_device_list l = {0};
    add(&l, CPU);
    add(&l, A100);
    add(&l, "{\"kind\":\"cuda\",\"index\":1,\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":140,\"mem_free_gib\":139}");
    add(&l, W7900);
    int chosen = -1;
    vsr_err e = {0};
    /* FP8: rocm:0 (no FP8 units) and cuda:0 (Ampere) skipped; cuda:1 taken. */
    vsr_gate_request r = d3(VSR_SCHEME_FP8, 10 * GIB);
    CHECK_OK(vsr_place(&l, "auto", &r, &chosen, &e), e);
    CHECK(chosen == 2);
    /* BF16: ROCm comes first even though it is listed last. */
    r = d3(VSR_SCHEME_BF16, 10 * GIB);
    CHECK_OK(vsr_place(&l, "AUTO", &r, &chosen, &e), e);
    CHECK(chosen == 3);
    /* int4 too big for every GPU's free memory: the CPU takes it. */
    r = d3(VSR_SCHEME_INT4, 150 * GIB);
    CHECK_OK(vsr_place(&l, "auto", &r, &chosen, &e), e);
    CHECK(chosen == 0);
    /* NVFP4: nobody; every reason, in auto order, joined with "; ". */
    r = d3(VSR_SCHEME_NVFP4, 10 * GIB);
    chosen = -1;
    vsr_status st = vsr_place(&l, "auto", &r, &chosen, &e);
    const char *want = "no device can serve this package: rocm:0: " NVFP4_MSG ": the device is a ROCm GPU; cuda:0: " NVFP4_MSG
                       ": " NV_NOFP4("8.0") "; cuda:1: " NVFP4_MSG ": " NV_NOFP4("9.0") "; cpu: " NVFP4_MSG ": the device is a CPU";
    CHECK_MSG(st == VSR_E_DEVICE && !strcmp(e.msg, want), "\n got  %s\n want %s", e.msg, want);
    CHECK(chosen == -1);

    /* Memory: MI300X with 2 GiB free is skipped for the H200. */
    vsr_device_list m = {0};
    add(&m, "{\"kind\":\"rocm\",\"index\":0,\"name\":\"AMD Instinct MI300X\",\"gfx\":\"gfx942\",\"mem_total_gib\":192,\"mem_free_gib\":2}");
    add(&m, H200);
    r = d3(VSR_SCHEME_FP8, 10 * GIB);
    CHECK_OK(vsr_place(&m, "auto", &r, &chosen, &e), e);
    CHECK(chosen == 1);
    CHECK_OK(vsr_place(&m, "rocm", &r, &chosen, &e) == VSR_E_DEVICE ? VSR_OK : VSR_E_INTERNAL, e);
    CHECK(!strcmp(e.msg, "no device can serve this package: rocm:0: needs about 12.0 GiB, 2.0 GiB free (weights 10.0 GiB + reserve 2.0 GiB)"));

    /* Alike reasons of several devices are said once. */
    vsr_device_list h = {0};
    add(&h, H200);
    add(&h, "{\"kind\":\"cuda\",\"index\":1,\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":140,\"mem_free_gib\":139}");
    add(&h, CPU);
    r = d3(VSR_SCHEME_NVFP4, GIB);
    st = vsr_place(&h, "auto", &r, &chosen, &e);
    want = "no device can serve this package: cuda:0, cuda:1: " NVFP4_MSG ": " NV_NOFP4("9.0") "; cpu: " NVFP4_MSG ": the device is a CPU";
    CHECK_MSG(st == VSR_E_DEVICE && !strcmp(e.msg, want), "\n got  %s\n want %s", e.msg, want);

    /* Sixteen devices with long reasons still make one bounded message. */
    vsr_device_list big = {0};
    for (int i = 0; i < VSR_MAX_DEVICES; i++) {
        big.dev[big.count] = dev_json(T4);
        big.dev[big.count].index = i;
        big.count++;
    }
    r = d3(VSR_SCHEME_BF16, GIB);
    st = vsr_place(&big, "auto", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE && strlen(e.msg) < VSR_ERR_MSG_MAX && !strncmp(e.msg, "no device can serve this package: cuda:0: ", 42));
}

TEST(explicit_placement) {
    vsr_device_list l = {0};
    add(&l, CPU);
    add(&l, A100);
    add(&l, "{\"kind\":\"cuda\",\"index\":1,\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":140,\"mem_free_gib\":139}");
    int chosen = -1;
    vsr_err e = {0};
    vsr_gate_request r = d3(VSR_SCHEME_FP8, 10 * GIB);
    /* cuda:0 cannot; cuda:1 could, but an explicit device is never replaced. */
    vsr_status st = vsr_place(&l, "cuda:0", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE &&
          !strcmp(e.msg, "no device can serve this package: cuda:0: " FP8_MSG ": the device is NVIDIA A100-SXM4-80GB (compute capability 8.0)"));
    CHECK(chosen == -1);
    st = vsr_place(&l, "cuda", &r, &chosen, &e); /* "cuda" is cuda:0 */
    CHECK(st == VSR_E_DEVICE && strstr(e.msg, "cuda:0: " FP8_MSG));
    st = vsr_place(&l, "cpu", &r, &chosen, &e); /* no fallback from the CPU either */
    CHECK(st == VSR_E_DEVICE && !strcmp(e.msg, "no device can serve this package: cpu: " FP8_MSG ": the device is a CPU"));
    CHECK_OK(vsr_place(&l, "CUDA:1", &r, &chosen, &e), e);
    CHECK(chosen == 2);
    st = vsr_place(&l, "rocm:0", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE && !strcmp(e.msg, "no device can serve this package: rocm: not available on this host"));
    st = vsr_place(&l, "rocm", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE && !strcmp(e.msg, "no device can serve this package: rocm: not available on this host"));
    st = vsr_place(&l, "cuda:3", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE && !strcmp(e.msg, "no device can serve this package: cuda: no device 3"));
    st = vsr_place(&l, "cpu:1", &r, &chosen, &e);
    CHECK(st == VSR_E_DEVICE && !strcmp(e.msg, "no device can serve this package: cpu: no device 1"));
    r = d3(VSR_SCHEME_BF16, GIB);
    CHECK_OK(vsr_place(&l, "cpu:0", &r, &chosen, &e), e);
    CHECK(chosen == 0);
}

TEST(device_spec_parse) {
    bool is_auto = false;
    vsr_device_kind k = VSR_DEV_CPU;
    int idx = -1;
    vsr_err e = {0};
    CHECK_OK(vsr_device_spec_parse("auto", &is_auto, &k, &idx, &e), e);
    CHECK(is_auto);
    CHECK_OK(vsr_device_spec_parse("rocm:12", &is_auto, &k, &idx, &e), e);
    CHECK(!is_auto && k == VSR_DEV_ROCM && idx == 12);
    CHECK_OK(vsr_device_spec_parse("Cuda", &is_auto, &k, &idx, &e), e);
    CHECK(k == VSR_DEV_CUDA && idx == 0);
    CHECK_OK(vsr_device_spec_parse("cpu", &is_auto, &k, &idx, &e), e);
    CHECK(k == VSR_DEV_CPU && idx == 0);
    static const char *const bad[] = {"gpu", "cuda:", "cuda:x", ":0", "auto:1", "", "cuda:0:1", "cuda:99999999999",
                                      "npu:0", "1cuda", "cu da", "cuda:-1", "xpu", "mps", "rocm0:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[200];
        snprintf(want, sizeof want, "--device must be auto or one of cpu, cuda, rocm, optionally with :N; got '%s'", bad[i]);
        vsr_status st = vsr_device_spec_parse(bad[i], &is_auto, &k, &idx, &e);
        CHECK_MSG(st == VSR_E_INVALID && !strcmp(e.msg, want), "'%s': %s", bad[i], e.msg);
    }
    vsr_status st = vsr_device_spec_parse("cu\x01\n", NULL, NULL, NULL, &e);
    CHECK(st == VSR_E_INVALID && strstr(e.msg, "got 'cu?" "?'"));
    char longspec[300];
    memset(longspec, 'a', sizeof longspec - 1);
    longspec[sizeof longspec - 1] = '\0';
    st = vsr_device_spec_parse(longspec, NULL, NULL, NULL, &e);
    CHECK(st == VSR_E_INVALID && strstr(e.msg, "aaa...'"));
    st = vsr_device_spec_parse(NULL, NULL, NULL, NULL, &e);
    CHECK(st == VSR_E_INVALID);
    /* vsr_place refuses the spec before looking at devices. */
    vsr_device_list l = {0};
    add(&l, CPU);
    vsr_gate_request r = d3(VSR_SCHEME_BF16, GIB);
    st = vsr_place(&l, "tpu:0", &r, NULL, &e);
    CHECK(st == VSR_E_INVALID && !strcmp(e.msg, "--device must be auto or one of cpu, cuda, rocm, optionally with :N; got 'tpu:0'"));
}

TEST(ids_and_names) {
    char b[32];
    vsr_device d = dev_json(A100);
    d.index = 3;
    CHECK(!strcmp(vsr_device_id(&d, b, sizeof b), "cuda:3"));
    d = dev_json(CPU);
    CHECK(!strcmp(vsr_device_id(&d, b, sizeof b), "cpu"));
    CHECK(!strcmp(vsr_device_kind_name(VSR_DEV_ROCM), "rocm"));
    CHECK(!strcmp(vsr_device_kind_name(VSR_DEV_KIND_COUNT), "unknown"));
}

TEST(json_reader) {
    vsr_device d;
    vsr_err e = {0};
    /* Defaults and conversions. */
    d = dev_json("{\"kind\":\"cuda\",\"name\":\"NVIDIA H200\",\"cc\":\"9.0\",\"mem_total_gib\":139.8,\"mem_free_gib\":0.5}");
    CHECK(d.index == 0 && d.cc_major == 9 && d.cc_minor == 0 && d.bf16);
    CHECK(d.mem_total == (uint64_t)(139.8 * GIB + 0.5) && d.mem_free == GIB / 2);
    CHECK(d.fp4_toolkit == vsr_device_build_caps()->fp4_toolkit && d.fp4_act_kernel == vsr_device_build_caps()->fp4_act_kernel);
    d = dev_json("{\"kind\":\"cuda\",\"name\":\"B\",\"cc\":\"12.1\",\"mem_total_gib\":1,\"mem_free_gib\":1}");
    CHECK(d.cc_major == 12 && d.cc_minor == 1);
    d = dev_json("{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1,\"mem_free_gib\":1}");
    CHECK(d.cores == 1 && d.bf16 && !d.fp4_toolkit);

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{", "device JSON: not valid JSON at line 1"},
        {"[]", "device JSON: expected an object"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"foo\":1}",
         "device JSON: unknown key \"foo\" (expected one of kind, index, name, cc, gfx, mem_total_gib, mem_free_gib, bf16, cores, fp4_toolkit, fp4_act_kernel)"},
        {"{\"kind\":\"cpu\",\"kind\":\"cuda\"}", "device JSON: not valid JSON"},
        {"{\"name\":\"c\"}", "device JSON: \"kind\" must be \"cpu\", \"cuda\" or \"rocm\""},
        {"{\"kind\":\"tpu\",\"name\":\"c\"}", "device JSON: \"kind\" must be \"cpu\", \"cuda\" or \"rocm\", got \"tpu\""},
        {"{\"kind\":\"cuda\",\"index\":-1,\"name\":\"c\"}", "device JSON: \"index\" must be an integer from 0 to 15"},
        {"{\"kind\":\"cuda\",\"index\":16,\"name\":\"c\"}", "device JSON: \"index\" must be an integer from 0 to 15"},
        {"{\"kind\":\"cpu\",\"index\":1,\"name\":\"c\"}", "device JSON: a cpu device has index 0, got 1"},
        {"{\"kind\":\"cpu\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "device JSON: \"name\" must be a string of 1 to 127 characters"},
        {"{\"kind\":\"cpu\",\"name\":\"\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "\"name\" must be a string"},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"mem_total_gib\":1,\"mem_free_gib\":1}",
         "device JSON: a cuda device needs \"cc\", its compute capability as \"MAJOR.MINOR\" (e.g. \"9.0\")"},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "a cuda device needs \"cc\""},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9.0x\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "a cuda device needs \"cc\""},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"-9.0\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "a cuda device needs \"cc\""},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":9.0,\"mem_total_gib\":1,\"mem_free_gib\":1}", "a cuda device needs \"cc\""},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"cc\":\"9.0\",\"mem_total_gib\":1,\"mem_free_gib\":1}",
         "device JSON: \"cc\" is for cuda devices only, this one is cpu"},
        {"{\"kind\":\"rocm\",\"name\":\"g\",\"mem_total_gib\":1,\"mem_free_gib\":1}",
         "device JSON: a rocm device needs \"gfx\", its target as \"gfx\" plus hex digits (e.g. \"gfx942\")"},
        {"{\"kind\":\"rocm\",\"name\":\"g\",\"gfx\":\"942\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "a rocm device needs \"gfx\""},
        {"{\"kind\":\"rocm\",\"name\":\"g\",\"gfx\":\"gfx94z\",\"mem_total_gib\":1,\"mem_free_gib\":1}", "a rocm device needs \"gfx\""},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9.0\",\"gfx\":\"gfx942\",\"mem_total_gib\":1,\"mem_free_gib\":1}",
         "device JSON: \"gfx\" is for rocm devices only, this one is cuda"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_free_gib\":1}", "device JSON: \"mem_total_gib\" is missing (a number of GiB)"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":\"8\",\"mem_free_gib\":1}", "device JSON: \"mem_total_gib\" must be a number of GiB"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":-1,\"mem_free_gib\":1}",
         "device JSON: \"mem_total_gib\" must be between 0 and 1048576 GiB, got -1"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1e9,\"mem_free_gib\":1}", "must be between 0 and 1048576 GiB"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1,\"mem_free_gib\":2}",
         "device JSON: \"mem_free_gib\" is larger than \"mem_total_gib\""},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"bf16\":\"yes\"}", "device JSON: \"bf16\" must be true or false"},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9.0\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"cores\":4}",
         "device JSON: \"cores\" is for the cpu device only"},
        {"{\"kind\":\"cpu\",\"name\":\"c\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"cores\":0}", "device JSON: \"cores\" must be an integer from 1 to 65536"},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9.0\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"fp4_toolkit\":1}",
         "device JSON: \"fp4_toolkit\" must be true or false"},
        {"{\"kind\":\"cuda\",\"name\":\"g\",\"cc\":\"9.0\",\"mem_total_gib\":1,\"mem_free_gib\":1,\"fp4_act_kernel\":null}",
         "device JSON: \"fp4_act_kernel\" must be true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vsr_status st = vsr_device_from_json(bad[i].json, &d, &e);
        CHECK_MSG(st == VSR_E_FORMAT && strstr(e.msg, bad[i].msg), "%s\n  got  %s (%s)\n  want %s", bad[i].json, e.msg,
                  vsr_status_name(st), bad[i].msg);
    }
    CHECK(vsr_device_from_json(NULL, &d, &e) == VSR_E_INVALID);
}

TEST(build_caps) {
    const vsr_device_build *b = vsr_device_build_caps();
    /* We have no FP4 activation-quantization kernel yet: NVFP4 stays refused everywhere. */
    CHECK(!b->fp4_act_kernel);
    CHECK(!b->fp4_toolkit || (b->cuda && b->cuda_version >= 12080));
    CHECK(b->cuda || b->cuda_version == 0);
    vsr_device d = dev_json("{\"kind\":\"cuda\",\"name\":\"NVIDIA B200\",\"cc\":\"10.0\",\"mem_total_gib\":180,\"mem_free_gib\":178}");
    vsr_gate_request r = d3(VSR_SCHEME_NVFP4, GIB);
    vsr_err e = {0};
    vsr_status st = vsr_gate_device(&d, &r, &e);
    CHECK_MSG(st == VSR_E_DEVICE && strstr(e.msg, "the FP4 activation-quantization kernel is unavailable"), "%s", e.msg);
}

TEST(gfx_names) {
    char b[32];
    CHECK(!strcmp(vsr_gfx_from_target_version(90402, b, sizeof b), "gfx942"));
    CHECK(!strcmp(vsr_gfx_from_target_version(90010, b, sizeof b), "gfx90a"));
    CHECK(!strcmp(vsr_gfx_from_target_version(90500, b, sizeof b), "gfx950"));
    CHECK(!strcmp(vsr_gfx_from_target_version(110000, b, sizeof b), "gfx1100"));
    CHECK(!strcmp(vsr_gfx_from_target_version(120001, b, sizeof b), "gfx1201"));
    CHECK(!strcmp(vsr_gfx_from_target_version(90006, b, sizeof b), "gfx906"));
    CHECK(vsr_gfx_from_target_version(0, b, sizeof b) == NULL);
    CHECK(vsr_gfx_from_target_version(91600, b, sizeof b) == NULL);
}

static void wr(const char *root, const char *rel, const char *text) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    CHECK_MSG(test_write_file(p, text, strlen(text)) == 0, "write %s", p);
}

TEST(kfd_sysfs_tree) {
    char root[512], kfd[600], drm[600];
    snprintf(root, sizeof root, "%s/sys", test_tmpdir());
    snprintf(kfd, sizeof kfd, "%s/kfd", root);
    snprintf(drm, sizeof drm, "%s/drm", root);
    /* Node 0: the CPU. Node 1: an MI300X (192 GiB VRAM bank, 10 GiB used). Node 2: a W7900
     * with no VRAM bank listed (size from DRM) and a product name. Node 3: a GPU node whose
     * target version is garbage. */
    wr(kfd, "0/properties", "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n");
    wr(kfd, "0/mem_banks/0/properties", "heap_type 0\nsize_in_bytes 549755813888\n");
    wr(kfd, "1/properties", "simd_count 1216\ngfx_target_version 90402\ndrm_render_minor 128\ndomain 0\nlocation_id 49408\n");
    wr(kfd, "1/mem_banks/0/properties", "heap_type 1\nsize_in_bytes 206158430208\nwidth 8192\n");
    wr(drm, "renderD128/device/mem_info_vram_total", "206158430208\n");
    wr(drm, "renderD128/device/mem_info_vram_used", "10737418240\n");
    wr(kfd, "2/properties", "simd_count 192\ngfx_target_version 110000\ndrm_render_minor 136\n");
    wr(drm, "renderD136/device/mem_info_vram_total", "51539607552\n");
    wr(drm, "renderD136/device/mem_info_vram_used", "8589934592\n");
    wr(drm, "renderD136/device/product_name", "AMD Radeon PRO W7900\n");
    wr(kfd, "3/properties", "simd_count 4\ngfx_target_version 7\n");
    vsr_device_list l = {0};
    vsr_probe_rocm(&l, kfd, drm, 0);
    CHECK(l.count == 3);
    if (l.count < 3) return;
    CHECK(l.dev[0].kind == VSR_DEV_ROCM && l.dev[0].index == 0 && !strcmp(l.dev[0].gfx, "gfx942"));
    CHECK(!strcmp(l.dev[0].name, "AMD GPU gfx942"));
    CHECK(l.dev[0].mem_total == 192 * GIB && l.dev[0].mem_free == 182 * GIB && l.dev[0].bf16);
    CHECK(l.dev[1].index == 1 && !strcmp(l.dev[1].gfx, "gfx1100") && !strcmp(l.dev[1].name, "AMD Radeon PRO W7900"));
    CHECK(l.dev[1].mem_total == 48 * GIB && l.dev[1].mem_free == 40 * GIB);
    CHECK(l.dev[2].index == 2 && !strcmp(l.dev[2].gfx, "gfx0") && !l.dev[2].bf16);
    /* The injected MI300X runs FP8 through the gate like a described one. */
    vsr_gate_request r = d3(VSR_SCHEME_FP8, 30 * GIB);
    int chosen = -1;
    vsr_err e = {0};
    CHECK_OK(vsr_place(&l, "auto", &r, &chosen, &e), e);
    CHECK(chosen == 0);

    vsr_device_list none = {0};
    char missing[700];
    snprintf(missing, sizeof missing, "%s/none", root);
    vsr_probe_rocm(&none, missing, drm, 1);
    CHECK(none.count == 0 && strstr(none.notes, "rocm: no AMD GPU in"));
}

TEST(meminfo_parse) {
    uint64_t t = 0, a = 0;
    CHECK(vsr_probe_meminfo_parse("MemTotal:       263855532 kB\nMemFree:  1000 kB\nMemAvailable:   200000000 kB\n", &t, &a) == 0);
    CHECK(t == 263855532ull * 1024 && a == 200000000ull * 1024);
    CHECK(vsr_probe_meminfo_parse("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 5 kB\nCached: 300 kB\n", &t, &a) == 0);
    CHECK(t == 1000 * 1024 && a == 400 * 1024);
    CHECK(vsr_probe_meminfo_parse("SwapTotal: 5 kB\n", &t, &a) == -1);
}

/* The kernel's /proc/cpuinfo flags are an oracle for our cpuid decoding: 1 has, 0 lacks,
 * -1 no flags line to ask. */
static int cpuinfo_has_flag(const char *flag) {
    size_t n = 0;
    char *info = test_read_file("/proc/cpuinfo", &n);
    if (!info) return -1;
    int found = -1;
    char *line = strstr(info, "\nflags");
    if (line) {
        char *eol = strchr(line + 1, '\n');
        if (eol) *eol = '\0';
        char *colon = strchr(line, ':');
        found = 0;
        for (char *tok = colon ? strtok(colon + 1, " \t") : NULL; tok; tok = strtok(NULL, " \t"))
            if (!strcmp(tok, flag)) found = 1;
    }
    free(info);
    return found;
}

TEST(real_probe) {
    vsr_device_list l;
    vsr_err e = {0};
    CHECK_OK(vsr_devices_probe(&l, &e), e);
    CHECK(l.count >= 1);
    const vsr_device *c = &l.dev[0];
    CHECK(c->kind == VSR_DEV_CPU && c->index == 0 && c->name[0] && c->cores >= 1 && c->bf16);
    CHECK(c->mem_total > 0 && c->mem_free <= c->mem_total);
    int cpus = 0;
    for (int i = 0; i < l.count; i++) cpus += l.dev[i].kind == VSR_DEV_CPU;
    CHECK(cpus == 1);
#if defined(__x86_64__)
    static const struct {
        const char *flag;
        uint32_t bit;
    } flags[] = {{"sse4_2", VSR_CPU_SSE42},       {"avx", VSR_CPU_AVX},           {"avx2", VSR_CPU_AVX2},
                 {"fma", VSR_CPU_FMA},            {"f16c", VSR_CPU_F16C},         {"avx512f", VSR_CPU_AVX512F},
                 {"avx512bw", VSR_CPU_AVX512BW},  {"avx512vl", VSR_CPU_AVX512VL}, {"avx512_bf16", VSR_CPU_AVX512BF16},
                 {"avx512_vnni", VSR_CPU_AVX512VNNI}, {"amx_bf16", VSR_CPU_AMX_BF16}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        int has = cpuinfo_has_flag(flags[i].flag);
        if (has < 0) continue;
        CHECK_MSG(has == !!(c->cpu_features & flags[i].bit), "%s: /proc/cpuinfo says %d, cpuid decoding says %d",
                  flags[i].flag, has, !!(c->cpu_features & flags[i].bit));
    }
#endif
    for (int i = 1; i < l.count; i++) {
        const vsr_device *d = &l.dev[i];
        CHECK(d->kind != VSR_DEV_CPU && d->name[0] && d->mem_total > 0 && d->mem_free <= d->mem_total);
        if (d->kind == VSR_DEV_CUDA) CHECK(d->cc_major >= 1);
        if (d->kind == VSR_DEV_ROCM) CHECK(!strncmp(d->gfx, "gfx", 3));
    }
    /* Every real device's verdicts agree with its table row; on our H200 (9.0) that is FP8
     * and int4 served, NVFP4 refused for want of FP4 tensor cores. */
    for (int i = 0; i < l.count; i++) {
        vsr_device_caps dc;
        vsr_device_caps_of(&l.dev[i], &dc);
        const vsr_support want[VSR_SCHEME_COUNT] = {dc.bf16, dc.fp8, dc.int4, dc.nvfp4};
        for (int s = 0; s < VSR_SCHEME_COUNT; s++) {
            vsr_gate_request r = d3((vsr_scheme)s, 1 << 20);
            vsr_status st = vsr_gate_device(&l.dev[i], &r, &e);
            CHECK_MSG((st == VSR_OK) == (want[s] != VSR_SUPPORT_NO || (s == 0 && l.dev[i].kind == VSR_DEV_CPU)),
                      "%s scheme %d: %s", l.dev[i].name, s, st ? e.msg : "accepted");
        }
        if (l.dev[i].kind == VSR_DEV_CUDA && l.dev[i].cc_major == 9) {
            vsr_gate_request r = d3(VSR_SCHEME_NVFP4, 1 << 20);
            vsr_status st = vsr_gate_device(&l.dev[i], &r, &e);
            CHECK_MSG(st == VSR_E_DEVICE && strstr(e.msg, NVFP4_MSG ": " NV_NOFP4("9.0")), "%s", e.msg);
            r = d3(VSR_SCHEME_FP8, 1 << 20);
            CHECK(vsr_gate_device(&l.dev[i], &r, &e) == VSR_OK);
        }
    }
    /* A tiny BF16 package finds a device on any host. */
    vsr_gate_request r = d3(VSR_SCHEME_BF16, 1 << 20);
    int chosen = -1;
    CHECK_OK(vsr_place(&l, "auto", &r, &chosen, &e), e);
    CHECK(chosen >= 0 && chosen < l.count);
    char id[32];
    printf("probe: %d device(s); auto for a 1 MiB BF16 package: %s\n", l.count, vsr_device_id(&l.dev[chosen], id, sizeof id));
    for (int i = 0; i < l.count; i++)
        printf("  %s  %s  cc %d.%d %s  %.1f/%.1f GiB\n", vsr_device_id(&l.dev[i], id, sizeof id), l.dev[i].name,
               l.dev[i].cc_major, l.dev[i].cc_minor, l.dev[i].gfx, (double)l.dev[i].mem_free / GIB,
               (double)l.dev[i].mem_total / GIB);
    if (l.notes[0]) printf("notes:\n%s\n", l.notes);
}

int main(void) {
    RUN(hardware_table_verdicts);
    RUN(caps_cells);
    RUN(bf16_by_arch);
    RUN(int4_without_bf16_when_family_does_not_need_it);
    RUN(memory_refusals);
    RUN(family_rule);
    RUN(auto_placement);
    RUN(explicit_placement);
    RUN(device_spec_parse);
    RUN(ids_and_names);
    RUN(json_reader);
    RUN(build_caps);
    RUN(gfx_names);
    RUN(kfd_sysfs_tree);
    RUN(meminfo_parse);
    RUN(real_probe);
    return test_summary();
}
