/* Tests for the safetensors reader/writer (src/package/safetensors.c) and the sharded
 * weights loader (src/package/weights.c). Malformed files are crafted byte by byte so that
 * each validation rule is hit on its own; the reference fixture (written by Python's
 * safetensors, tools/make_safetensors_ref.py) checks that we read what the library writes. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vsr/safetensors.h"

#define LABEL "lbl.safetensors"

/* ---------------------------------------------------------------- helpers */

/* 8-byte LE length + header + data, in a malloc'd buffer. */
static uint8_t *image(const char *hdr, size_t hlen, const void *data, size_t dlen, size_t *len) {
    uint8_t *b = malloc(8 + hlen + dlen + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, hdr, hlen);
    if (dlen) memcpy(b + 8 + hlen, data, dlen);
    *len = 8 + hlen + dlen;
    return b;
}

/* Parses header `hdr` with `dlen` zero bytes of data behind it. */
static vsr_status parse_hdr(const char *hdr, size_t dlen, vsr_st_file **out, vsr_err *err) {
    uint8_t *zeros = calloc(1, dlen + 1);
    size_t len;
    uint8_t *b = image(hdr, strlen(hdr), zeros, dlen, &len);
    vsr_status st = vsr_st_parse(LABEL, b, len, out, err);
    /* The image must outlive the file object only if the caller reads data; these callers do not. */
    free(zeros);
    free(b);
    return st;
}

/* The header is refused with FORMAT and a message naming the file and containing `needle`
 * (and `tensor` when given). */
static void expect_refused(const char *hdr, size_t dlen, const char *needle, const char *tensor) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    vsr_status st = parse_hdr(hdr, dlen, &f, &err);
    CHECK_ERR(st, err, VSR_E_FORMAT, needle);
    CHECK_MSG(strstr(err.msg, LABEL) != NULL, "message does not name the file: %s", err.msg);
    if (tensor) {
        char q[256];
        snprintf(q, sizeof q, "\"%s\"", tensor);
        CHECK_MSG(strstr(err.msg, q) != NULL, "message does not name tensor %s: %s", tensor, err.msg);
    }
    CHECK(f == NULL);
    vsr_st_close(f);
}

static void expect_ok(const char *hdr, size_t dlen) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    vsr_status st = parse_hdr(hdr, dlen, &f, &err);
    CHECK_OK(st, err);
    vsr_st_close(f);
}

static char *path_in(const char *rel) {
    static char buf[8][PATH_MAX];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", test_tmpdir(), rel);
    return p;
}

/* Writes a small valid safetensors file with the given tensors (F32 [2] each, values i, i+0.5). */
static void write_shard(const char *path, const char *const *names) {
    vsr_st_writer *w = vsr_st_writer_new();
    vsr_err err = {0};
    int64_t shape[1] = {2};
    for (int i = 0; names[i]; i++) {
        float v[2] = {(float)i, (float)i + 0.5f};
        CHECK_OK(vsr_st_writer_add(w, names[i], VSR_DT_F32, 1, shape, v, sizeof v, &err), err);
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_OK(vsr_st_writer_save(w, path, &err), err);
    vsr_st_writer_free(w);
}

static void write_text(const char *path, const char *s) { CHECK(test_write_file(path, s, strlen(s)) == 0); }

/* ---------------------------------------------------------------- writer round trip */

TEST(writer_round_trip) {
    vsr_err err = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    uint16_t bf[6];
    for (int i = 0; i < 6; i++) bf[i] = vsr_f32_to_bf16((float)i * 0.25f - 1.0f);
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s0[2] = {0, 5}, s3[1] = {3};
    int32_t ints[4] = {-1, 0, 7, INT32_MAX};
    uint8_t u8[3] = {1, 2, 250};
    double f64 = 3.25;
    CHECK_OK(vsr_st_writer_add(w, "b.weight", VSR_DT_BF16, 2, s23, bf, sizeof bf, &err), err);
    CHECK_OK(vsr_st_writer_add(w, "a.ids", VSR_DT_I32, 1, s4, ints, sizeof ints, &err), err);
    CHECK_OK(vsr_st_writer_add(w, "c.u8", VSR_DT_U8, 1, s3, u8, sizeof u8, &err), err);
    CHECK_OK(vsr_st_writer_add(w, "scalar", VSR_DT_F64, 0, NULL, &f64, sizeof f64, &err), err);
    CHECK_OK(vsr_st_writer_add(w, "empty", VSR_DT_F16, 2, s0, NULL, 0, &err), err);
    CHECK_OK(vsr_st_writer_set_metadata(w, "format", "pt", &err), err);
    CHECK_OK(vsr_st_writer_set_metadata(w, "note", "quote\" back\\ nl\n é", &err), err);
    const char *path = path_in("rt.safetensors");
    CHECK_OK(vsr_st_writer_save(w, path, &err), err);
    vsr_st_writer_free(w);

    /* Layout: descending dtype rank then name: F64 scalar, I32, BF16, F16 (empty), U8. */
    static const char *const order[] = {"scalar", "a.ids", "b.weight", "empty", "c.u8"};
    for (int mode = 0; mode < 3; mode++) {
        vsr_st_file *f = NULL;
        size_t flen = 0;
        char *bytes = NULL;
        vsr_status st;
        if (mode == 0) st = vsr_st_open(path, NULL, &f, &err);
        else if (mode == 1) st = vsr_st_open_header(path, "hdr", &f, &err);
        else {
            bytes = test_read_file(path, &flen);
            st = vsr_st_parse("mem", (const uint8_t *)bytes, flen, &f, &err);
        }
        CHECK_OK(st, err);
        if (st) continue;
        CHECK(vsr_st_count(f) == 5);
        for (size_t i = 0; i < 5 && i < vsr_st_count(f); i++)
            CHECK_MSG(!strcmp(vsr_st_at(f, i)->name, order[i]), "at %zu: %s", i, vsr_st_at(f, i)->name);
        const vsr_tensor *t = vsr_st_find(f, "b.weight");
        CHECK(t && t->dtype == VSR_DT_BF16 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              t->numel == 6 && t->nbytes == 12);
        CHECK(vsr_st_find(f, "nope") == NULL);
        CHECK(!strcmp(vsr_st_metadata(f, "format"), "pt"));
        CHECK(!strcmp(vsr_st_metadata(f, "note"), "quote\" back\\ nl\n é"));
        CHECK(vsr_st_metadata(f, "absent") == NULL);
        const vsr_tensor *sc = vsr_st_find(f, "scalar");
        CHECK(sc && sc->ndim == 0 && sc->numel == 1 && sc->nbytes == 8);
        const vsr_tensor *em = vsr_st_find(f, "empty");
        CHECK(em && em->numel == 0 && em->nbytes == 0 && em->ndim == 2);
        if (mode == 1) {
            CHECK(t && t->data == NULL);
            CHECK(!strcmp(vsr_st_label(f), "hdr") && t && !strcmp(t->file, "hdr"));
        } else if (t && sc) {
            CHECK(memcmp(t->data, bf, sizeof bf) == 0);
            double d;
            memcpy(&d, sc->data, 8);
            CHECK(d == 3.25);
            const vsr_tensor *ids = vsr_st_find(f, "a.ids");
            CHECK(ids && memcmp(ids->data, ints, sizeof ints) == 0);
        }
        if (mode == 0) CHECK(!strcmp(vsr_st_label(f), path));
        /* Absolute offset = 8 + N + begin; the first tensor starts right after the header. */
        size_t hl = 0;
        char *raw = test_read_file(path, &hl);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | (uint8_t)raw[i];
        CHECK(n % 8 == 0 && raw[8] == '{');
        CHECK(vsr_st_at(f, 0)->offset == 8 + n);
        CHECK(vsr_st_file_bytes(f) == hl);
        if (t) CHECK(memcmp(raw + t->offset, bf, sizeof bf) == 0);
        free(raw);
        vsr_st_close(f);
        free(bytes);
    }
}

TEST(writer_is_deterministic_and_header_exact) {
    vsr_err err = {0};
    int64_t s1[1] = {1};
    uint16_t h = 0x3c00;
    float fv = 1.0f;
    uint8_t b = 1;
    char *bytes[2];
    size_t lens[2];
    for (int k = 0; k < 2; k++) {
        vsr_st_writer *w = vsr_st_writer_new();
        /* Same tensors and metadata, inserted in opposite orders. */
        if (k == 0) {
            CHECK_OK(vsr_st_writer_add(w, "z", VSR_DT_U8, 1, s1, &b, 1, &err), err);
            CHECK_OK(vsr_st_writer_add(w, "a", VSR_DT_F16, 1, s1, &h, 2, &err), err);
            CHECK_OK(vsr_st_writer_add(w, "m", VSR_DT_F32, 1, s1, &fv, 4, &err), err);
            CHECK_OK(vsr_st_writer_set_metadata(w, "b", "2", &err), err);
            CHECK_OK(vsr_st_writer_set_metadata(w, "a", "x", &err), err);
            CHECK_OK(vsr_st_writer_set_metadata(w, "a", "1", &err), err); /* replaces */
        } else {
            CHECK_OK(vsr_st_writer_set_metadata(w, "a", "1", &err), err);
            CHECK_OK(vsr_st_writer_set_metadata(w, "b", "2", &err), err);
            CHECK_OK(vsr_st_writer_add(w, "m", VSR_DT_F32, 1, s1, &fv, 4, &err), err);
            CHECK_OK(vsr_st_writer_add(w, "a", VSR_DT_F16, 1, s1, &h, 2, &err), err);
            CHECK_OK(vsr_st_writer_add(w, "z", VSR_DT_U8, 1, s1, &b, 1, &err), err);
        }
        const char *p = path_in(k ? "det1.safetensors" : "det0.safetensors");
        CHECK_OK(vsr_st_writer_save(w, p, &err), err);
        vsr_st_writer_free(w);
        bytes[k] = test_read_file(p, &lens[k]);
    }
    CHECK(lens[0] == lens[1] && memcmp(bytes[0], bytes[1], lens[0]) == 0);
    const char *want = "{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\"},"
                       "\"m\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[4,6]},"
                       "\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[6,7]}}";
    size_t wl = strlen(want), padded = (wl + 7) / 8 * 8;
    CHECK(lens[0] == 8 + padded + 7);
    CHECK(memcmp(bytes[0] + 8, want, wl) == 0);
    for (size_t i = wl; i < padded; i++) CHECK(bytes[0][8 + i] == ' ');
    CHECK((uint8_t)bytes[0][0] == padded && bytes[0][1] == 0);
    free(bytes[0]);
    free(bytes[1]);
}

TEST(writer_same_size_dtypes_follow_reference_rank) {
    /* Within one element size the reference orders by its dtype enum, not by name:
     * BF16 > F16 > U16 > I16 and F8_E4M3 > F8_E5M2 > I8 > U8 > F4 > BOOL. */
    vsr_err err = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    int64_t s2[1] = {2};
    uint8_t z[4] = {0};
    static const struct {
        const char *name;
        vsr_dtype dt;
        size_t nb;
    } add[] = {{"a_i16", VSR_DT_I16, 4}, {"b_u16", VSR_DT_U16, 4}, {"c_f16", VSR_DT_F16, 4},
               {"d_bf16", VSR_DT_BF16, 4}, {"e_bool", VSR_DT_BOOL, 2}, {"f_f4", VSR_DT_F4, 1},
               {"g_u8", VSR_DT_U8, 2},     {"h_i8", VSR_DT_I8, 2},     {"i_e5m2", VSR_DT_F8_E5M2, 2},
               {"j_e4m3", VSR_DT_F8_E4M3, 2}};
    for (size_t i = 0; i < sizeof add / sizeof add[0]; i++)
        CHECK_OK(vsr_st_writer_add(w, add[i].name, add[i].dt, 1, s2, z, add[i].nb, &err), err);
    const char *p = path_in("rank.safetensors");
    CHECK_OK(vsr_st_writer_save(w, p, &err), err);
    vsr_st_writer_free(w);
    vsr_st_file *f = NULL;
    CHECK_OK(vsr_st_open(p, NULL, &f, &err), err);
    static const char *const want[] = {"d_bf16", "c_f16", "b_u16", "a_i16", "j_e4m3",
                                       "i_e5m2", "h_i8",  "g_u8",  "f_f4",  "e_bool"};
    for (size_t i = 0; f && i < 10; i++) CHECK_MSG(!strcmp(vsr_st_at(f, i)->name, want[i]), "%zu: %s", i, vsr_st_at(f, i)->name);
    vsr_st_close(f);
}

TEST(writer_refusals) {
    vsr_err err = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    int64_t s2[1] = {2}, neg[1] = {-1}, s3[1] = {3};
    float v[2] = {0};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_ERR(vsr_st_writer_add(w, "x", VSR_DT_F32, 1, s2, v, 4, &err), err, VSR_E_INVALID, "needs 8");
    CHECK_ERR(vsr_st_writer_add(w, "x", VSR_DT_F32, 1, neg, v, 0, &err), err, VSR_E_INVALID, "negative");
    CHECK_ERR(vsr_st_writer_add(w, "x", VSR_DT_F32, 9, nine, v, 4, &err), err, VSR_E_INVALID, "ndim 9");
    CHECK_ERR(vsr_st_writer_add(w, "x", VSR_DT_F4, 1, s3, v, 2, &err), err, VSR_E_INVALID,
              "whole number of bytes");
    CHECK_ERR(vsr_st_writer_add(w, "__metadata__", VSR_DT_F32, 1, s2, v, 8, &err), err, VSR_E_INVALID,
              "reserved");
    CHECK_ERR(vsr_st_writer_add(w, "bad\xff", VSR_DT_F32, 1, s2, v, 8, &err), err, VSR_E_INVALID, "UTF-8");
    CHECK_ERR(vsr_st_writer_add(w, "x", (vsr_dtype)99, 1, s2, v, 8, &err), err, VSR_E_INVALID,
              "unknown dtype");
    CHECK_OK(vsr_st_writer_add(w, "x", VSR_DT_F32, 1, s2, v, 8, &err), err);
    CHECK_ERR(vsr_st_writer_add(w, "x", VSR_DT_F32, 1, s2, v, 8, &err), err, VSR_E_INVALID, "added twice");
    CHECK_ERR(vsr_st_writer_set_metadata(w, "k", "\xc3", &err), err, VSR_E_INVALID, "UTF-8");
    /* A save into a missing folder fails and leaves nothing behind. */
    CHECK_ERR(vsr_st_writer_save(w, path_in("no/such/dir/x.safetensors"), &err), err, VSR_E_IO,
              "no/such/dir/x.safetensors");
    /* A save over an existing file replaces it whole. */
    const char *p = path_in("replace.safetensors");
    write_text(p, "old contents");
    CHECK_OK(vsr_st_writer_save(w, p, &err), err);
    vsr_st_file *f = NULL;
    CHECK_OK(vsr_st_open(p, NULL, &f, &err), err);
    CHECK(vsr_st_count(f) == 1);
    vsr_st_close(f);
    vsr_st_writer_free(w);
    vsr_st_writer_free(NULL);
    vsr_st_close(NULL);
    vsr_weights_close(NULL);
}

TEST(writer_empty_file) {
    vsr_err err = {0};
    vsr_st_writer *w = vsr_st_writer_new();
    const char *p = path_in("empty.safetensors");
    CHECK_OK(vsr_st_writer_save(w, p, &err), err);
    vsr_st_writer_free(w);
    size_t n;
    char *b = test_read_file(p, &n);
    CHECK(n == 16 && b[0] == 8 && memcmp(b + 8, "{}      ", 8) == 0);
    free(b);
    vsr_st_file *f = NULL;
    CHECK_OK(vsr_st_open(p, NULL, &f, &err), err);
    CHECK(vsr_st_count(f) == 0 && vsr_st_at(f, 0) == NULL);
    vsr_st_close(f);
}

/* ---------------------------------------------------------------- one test per rule */

TEST(rule_file_shorter_than_8) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    uint8_t b[5] = {1, 0, 0, 0, 0};
    CHECK_ERR(vsr_st_parse(LABEL, b, sizeof b, &f, &err), err, VSR_E_FORMAT,
              LABEL ": file is 5 bytes, shorter than the 8-byte header length");
    CHECK_ERR(vsr_st_parse(LABEL, b, 0, &f, &err), err, VSR_E_FORMAT, "file is 0 bytes");
    /* Same on disk, through both open paths. */
    const char *p = path_in("short.safetensors");
    CHECK(test_write_file(p, b, sizeof b) == 0);
    CHECK_ERR(vsr_st_open(p, "short", &f, &err), err, VSR_E_FORMAT, "short: file is 5 bytes");
    CHECK_ERR(vsr_st_open_header(p, "short", &f, &err), err, VSR_E_FORMAT, "short: file is 5 bytes");
    CHECK(test_write_file(p, b, 0) == 0);
    CHECK_ERR(vsr_st_open(p, "short", &f, &err), err, VSR_E_FORMAT, "file is 0 bytes");
    CHECK(f == NULL);
}

TEST(rule_header_length_zero) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    uint8_t b[16] = {0};
    CHECK_ERR(vsr_st_parse(LABEL, b, sizeof b, &f, &err), err, VSR_E_FORMAT, LABEL ": header length is 0");
}

TEST(rule_header_length_over_limit) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    uint64_t n = VSR_ST_MAX_HEADER_BYTES + 1;
    uint8_t b[16] = {0};
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    CHECK_ERR(vsr_st_parse(LABEL, b, sizeof b, &f, &err), err, VSR_E_FORMAT,
              "header length 100000001 is over the limit of 100000000 bytes");
    memset(b, 0xff, 8); /* 2^64-1: must not wrap around the end check */
    CHECK_ERR(vsr_st_parse(LABEL, b, sizeof b, &f, &err), err, VSR_E_FORMAT, "over the limit");
    /* Exactly at the limit is not refused for its size (it runs past this small file instead). */
    n = VSR_ST_MAX_HEADER_BYTES;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    CHECK_ERR(vsr_st_parse(LABEL, b, sizeof b, &f, &err), err, VSR_E_FORMAT, "runs past the end");
}

TEST(rule_header_past_end_of_file) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    size_t len;
    uint8_t *b = image("{}      ", 8, NULL, 0, &len);
    b[0] = 9; /* one byte more than there is */
    CHECK_ERR(vsr_st_parse(LABEL, b, len, &f, &err), err, VSR_E_FORMAT,
              LABEL ": header length 9 runs past the end of the 16-byte file");
    /* The header-only reader checks against the file size before reading. */
    const char *p = path_in("pastend.safetensors");
    CHECK(test_write_file(p, b, len) == 0);
    CHECK_ERR(vsr_st_open_header(p, NULL, &f, &err), err, VSR_E_FORMAT, "runs past the end");
    CHECK_ERR(vsr_st_open(p, NULL, &f, &err), err, VSR_E_FORMAT, "runs past the end");
    free(b);
}

TEST(rule_header_not_utf8) {
    expect_refused("{\"a\xff\":{}}", 0, "header is not valid UTF-8 (byte 3", NULL);
    expect_refused("{\"\xc0\xaf\":1}", 0, "not valid UTF-8", NULL);         /* overlong '/' */
    expect_refused("{\"\xed\xa0\x80\":1}", 0, "not valid UTF-8", NULL);     /* surrogate */
    expect_refused("{\"\xe2\x82\":1}  ", 0, "not valid UTF-8", NULL);       /* truncated */
}

TEST(rule_header_not_json) {
    expect_refused("{\"a\":", 0, "header is not valid JSON", NULL);
    expect_refused("{} x", 0, "header is not valid JSON", NULL);   /* garbage after the object */
    expect_refused("{\"a\\u0000b\":{}}", 0, "not valid JSON", NULL); /* NUL in a name */
    /* NUL padding is not spaces. */
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    size_t len;
    uint8_t *b = image("{}\0\0\0\0\0\0", 8, NULL, 0, &len);
    CHECK_ERR(vsr_st_parse(LABEL, b, len, &f, &err), err, VSR_E_FORMAT, LABEL ": header is not valid JSON");
    free(b);
}

TEST(rule_header_must_start_with_brace) {
    expect_refused(" {}", 0, "header must start with '{'", NULL);
    expect_refused("\n{}", 0, "header must start with '{'", NULL);
}

TEST(rule_trailing_spaces_allowed) {
    expect_ok("{}", 0);
    expect_ok("{}      ", 0);
    expect_ok("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}   ", 2);
}

TEST(rule_header_not_object) {
    expect_refused("[]", 0, "header must be a JSON object", NULL);
    expect_refused("[{\"w\":{}}]", 0, "header must be a JSON object", NULL);
    expect_refused("1", 0, "not valid JSON", NULL); /* jansson wants an object or array on top */
}

TEST(rule_entry_not_object) {
    expect_refused("{\"w\":[1,2]}", 0, "entry must be an object", "w");
    expect_refused("{\"w\":\"F32\"}", 0, "entry must be an object", "w");
}

TEST(rule_entry_keys) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "missing key \"data_offsets\"", "w");
    expect_refused("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "missing key \"dtype\"", "w");
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "missing key \"shape\"", "w");
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1,
                   "unexpected key \"extra\"", "w");
}

TEST(rule_unknown_dtype) {
    expect_refused("{\"w\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "unknown dtype \"F7\"", "w");
    expect_refused("{\"w\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
                   "unknown dtype \"bf16\"", "w"); /* case matters */
    expect_refused("{\"w\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "dtype must be a string", "w");
}

TEST(rule_shape_values) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":3,\"data_offsets\":[0,3]}}", 3,
                   "shape must be an array", "w");
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
                   "shape[0] must be a non-negative integer", "w");
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,2.0],\"data_offsets\":[0,2]}}", 2,
                   "shape[1] must be a non-negative integer", "w");
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}}", 2,
                   "shape[0] must be a non-negative integer", "w");
}

TEST(rule_too_many_dims) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
                   "shape has 9 dims, more than 8", "w");
    expect_ok("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
}

TEST(rule_element_count_overflow) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
                   0, "element count of the shape overflows", "w");
    /* An overflowing prefix is refused even if a later dim is 0 (as the reference does). */
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}",
                   0, "element count of the shape overflows", "w");
    /* numel fits but numel x 64 bits does not. */
    expect_refused("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
                   "byte size of the shape overflows", "w");
    /* Beyond int64: jansson refuses the number itself. */
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]}}", 0,
                   "not valid JSON", NULL);
}

TEST(rule_data_offsets_shape) {
    static const char *const bad[] = {"[0]", "[0,1,2]", "[\"0\",1]", "[-1,1]", "[0.0,1]", "{}", "1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":%s}}", bad[i]);
        expect_refused(h, 1, "data_offsets must be two non-negative integers", "w");
    }
}

TEST(rule_begin_after_end) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 4,
                   "data_offsets begin 4 is after end 2", "w");
}

TEST(rule_span_matches_shape) {
    expect_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                   "data_offsets span 4 bytes but shape x dtype F32 needs 8 bytes", "w");
    expect_refused("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,14]}}", 14,
                   "needs 12 bytes", "w");
    expect_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
                   "needs 4 bytes", "w"); /* a scalar has one element */
}

TEST(rule_sub_byte_whole_bytes) {
    expect_refused("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
                   "3 elements of F4 (4 bits) are not a whole number of bytes", "w");
    expect_refused("{\"w\":{\"dtype\":\"F6_E2M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
                   "not a whole number of bytes", "w");
    expect_ok("{\"w\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}", 2);
    expect_ok("{\"w\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3);
}

TEST(rule_offsets_start_at_zero) {
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4,
                   "data_offsets begin 2 leaves a hole after byte 0", "w");
}

TEST(rule_offsets_no_holes) {
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
                   5, "begin 3 leaves a hole after byte 2", "b");
}

TEST(rule_offsets_no_overlaps) {
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
                   4, "begin 2 overlaps the previous tensor ending at 4", "b");
    /* Two tensors on the same bytes. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                   4, "overlaps", NULL);
}

TEST(rule_last_end_is_buffer_end) {
    /* Trailing bytes nobody owns. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 8,
                   "tensors cover 4 bytes but the data buffer holds 8 bytes", NULL);
    expect_refused("{}", 3, "tensors cover 0 bytes but the data buffer holds 3 bytes", NULL);
    /* A truncated file: the tensor runs past the buffer. */
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3,
                   "data_offsets end 4 is past the end of the 3-byte data buffer", "a");
}

TEST(rule_duplicate_names) {
    expect_refused("{\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                   "\"dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                   2, "duplicate name", "dup");
    /* Tricky names: quotes and braces inside the duplicated key. */
    expect_refused("{\"a\\\"{b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                   "\"a\\\"{b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                   2, "duplicate name", "a\\\"{b");
    /* A duplicate key inside an entry or the metadata is not a duplicate tensor. */
    expect_refused("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "duplicate key \"dtype\" inside a header entry", NULL);
    expect_refused("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate key \"k\" inside", NULL);
}

TEST(rule_metadata_string_map) {
    expect_refused("{\"__metadata__\":[\"pt\"]}", 0, "__metadata__ must be an object of strings", NULL);
    expect_refused("{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0,
                   "__metadata__ value of \"n\" must be a string", NULL);
    expect_refused("{\"__metadata__\":{\"x\":{}}}", 0, "value of \"x\" must be a string", NULL);
    expect_ok("{\"__metadata__\":{}}", 0);
}

TEST(empty_tensors_and_scalars) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    /* Several empty tensors share an offset with a real one; a scalar sits at an odd offset. */
    const char *h = "{\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[1,1]},"
                    "\"e2\":{\"dtype\":\"BF16\",\"shape\":[3,0,2],\"data_offsets\":[1,1]},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[1,5]}}";
    float val = -7.5f;
    uint8_t data[5] = {42};
    memcpy(data + 1, &val, 4);
    size_t len;
    uint8_t *b = image(h, strlen(h), data, 5, &len);
    CHECK_OK(vsr_st_parse(LABEL, b, len, &f, &err), err);
    if (f) {
        CHECK(vsr_st_count(f) == 4);
        const vsr_tensor *s = vsr_st_find(f, "s");
        CHECK(s && s->ndim == 0 && s->numel == 1 && s->nbytes == 4);
        float got;
        if (s) memcpy(&got, s->data, 4); /* unaligned: data is at file offset 8+N+1 */
        CHECK(s && got == -7.5f);
        const vsr_tensor *e2 = vsr_st_find(f, "e2");
        CHECK(e2 && e2->numel == 0 && e2->nbytes == 0 && e2->ndim == 3 && e2->shape[1] == 0);
        CHECK(!strcmp(vsr_st_at(f, 0)->name, "b"));
        CHECK(vsr_st_at(f, 0)->offset == 8 + strlen(h));
    }
    vsr_st_close(f);
    free(b);
}

TEST(open_errors_name_the_file) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    CHECK_ERR(vsr_st_open(path_in("absent.safetensors"), "absent.st", &f, &err), err, VSR_E_NOT_FOUND,
              "absent.st: file is missing");
    CHECK_ERR(vsr_st_open_header(path_in("absent.safetensors"), NULL, &f, &err), err, VSR_E_NOT_FOUND,
              "absent.safetensors: file is missing");
    CHECK_ERR(vsr_st_open(test_tmpdir(), "dir", &f, &err), err, VSR_E_IO, "dir: not a regular file");
    /* A file whose header is fine but whose data was cut short, through both readers. */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t len;
    uint8_t z[16] = {0};
    uint8_t *b = image(h, strlen(h), z, 10, &len);
    const char *p = path_in("trunc.safetensors");
    CHECK(test_write_file(p, b, len) == 0);
    CHECK_ERR(vsr_st_open(p, "trunc", &f, &err), err, VSR_E_FORMAT,
              "trunc: tensor \"a\": data_offsets end 16 is past the end of the 10-byte data buffer");
    CHECK_ERR(vsr_st_open_header(p, "trunc", &f, &err), err, VSR_E_FORMAT, "past the end of the 10-byte");
    free(b);
}

/* ---------------------------------------------------------------- reference fixture */

/* OCP/torch float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN. Reference decode for the test. */
static double e4m3fn_to_double(uint8_t v) {
    int sign = v >> 7, e = (v >> 3) & 15, m = v & 7;
    double x;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) x = ldexp(m / 8.0, -6);
    else x = ldexp(1.0 + m / 8.0, e - 7);
    return sign ? -x : x;
}

static double element(const vsr_tensor *t, int64_t i) {
    const uint8_t *p = (const uint8_t *)t->data;
    switch (t->dtype) {
    case VSR_DT_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return vsr_bf16_to_f32(h); }
    case VSR_DT_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return vsr_f16_to_f32(h); }
    case VSR_DT_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case VSR_DT_F8_E4M3: return e4m3fn_to_double(p[i]);
    case VSR_DT_U8: return p[i];
    case VSR_DT_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); return x; }
    default: return NAN;
    }
}

TEST(reads_python_reference_file) {
    const char *repo = getenv("VSR_REPO");
    char stp[PATH_MAX], jsp[PATH_MAX];
    snprintf(stp, sizeof stp, "%s/tests/data/safetensors/ref_small.safetensors", repo ? repo : ".");
    snprintf(jsp, sizeof jsp, "%s/tests/data/safetensors/ref_small.json", repo ? repo : ".");
    json_error_t je;
    json_t *ref = json_load_file(jsp, 0, &je);
    CHECK_MSG(ref != NULL, "cannot read %s: %s", jsp, je.text);
    if (!ref) return;
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    CHECK_OK(vsr_st_open(stp, "ref_small.safetensors", &f, &err), err);
    if (!f) {
        json_decref(ref);
        return;
    }
    CHECK(vsr_st_file_bytes(f) == (uint64_t)json_integer_value(json_object_get(ref, "file_bytes")));
    CHECK(!strcmp(vsr_st_metadata(f, "format"), "pt"));
    json_t *tensors = json_object_get(ref, "tensors");
    CHECK(vsr_st_count(f) == json_object_size(tensors) && vsr_st_count(f) == 9);
    uint64_t data_base = 8 + (uint64_t)json_integer_value(json_object_get(ref, "header_bytes"));
    const char *name;
    json_t *e;
    int compared = 0;
    json_object_foreach(tensors, name, e) {
        const vsr_tensor *t = vsr_st_find(f, name);
        CHECK_MSG(t != NULL, "tensor %s missing", name);
        if (!t) continue;
        CHECK_MSG(!strcmp(vsr_dtype_info(t->dtype)->name, json_string_value(json_object_get(e, "dtype"))),
                  "%s dtype", name);
        json_t *shape = json_object_get(e, "shape");
        CHECK((size_t)t->ndim == json_array_size(shape));
        for (int d = 0; d < t->ndim; d++)
            CHECK(t->shape[d] == json_integer_value(json_array_get(shape, (size_t)d)));
        json_t *offs = json_object_get(e, "data_offsets");
        CHECK(t->offset == data_base + (uint64_t)json_integer_value(json_array_get(offs, 0)));
        const char *hex = json_string_value(json_object_get(e, "hex"));
        CHECK(strlen(hex) == 2 * t->nbytes);
        for (size_t i = 0; i < t->nbytes; i++) {
            unsigned byte;
            sscanf(hex + 2 * i, "%2x", &byte);
            CHECK_MSG(((const uint8_t *)t->data)[i] == byte, "%s byte %zu", name, i);
        }
        json_t *vals = json_object_get(e, "values");
        CHECK((int64_t)json_array_size(vals) == t->numel);
        for (int64_t i = 0; i < t->numel; i++) {
            json_t *v = json_array_get(vals, (size_t)i);
            if (t->dtype == VSR_DT_I64) {
                int64_t x;
                memcpy(&x, (const uint8_t *)t->data + 8 * i, 8);
                CHECK_MSG(x == json_integer_value(v), "%s[%lld]", name, (long long)i);
            } else {
                double want = json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
                CHECK_MSG(element(t, i) == want, "%s[%lld] = %g, want %g", name, (long long)i,
                          element(t, i), want);
            }
            compared++;
        }
    }
    CHECK(compared == 6 + 6 + 2 + 3 + 5 + 3 + 3 + 1 + 0);
    vsr_st_close(f);
    json_decref(ref);
}

/* ---------------------------------------------------------------- sharded weights */

static const char *const S1[] = {"a.weight", "b.weight", NULL};
static const char *const S2[] = {"c.weight", NULL};

/* A folder with an index naming a,b -> shard 1 and c -> shard 2. */
static const char *make_sharded(const char *name, const char *index_json) {
    const char *dir = path_in(name);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_shard(p, S1);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_shard(p, S2);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, index_json);
    return dir;
}

#define GOOD_INDEX                                                                                 \
    "{\"metadata\":{\"total_size\":24},\"weight_map\":{"                                            \
    "\"c.weight\":\"model-00002-of-00002.safetensors\","                                            \
    "\"a.weight\":\"model-00001-of-00002.safetensors\","                                            \
    "\"b.weight\":\"model-00001-of-00002.safetensors\"}}"

static void expect_weights_refused(const char *dir, vsr_status code, const char *needle) {
    vsr_err err = {0};
    vsr_weights *w = NULL;
    for (int mode = 0; mode < 2; mode++) {
        vsr_status st = vsr_weights_open(dir, mode ? VSR_WEIGHTS_MAP : VSR_WEIGHTS_HEADERS, &w, &err);
        CHECK_ERR(st, err, code, needle);
        CHECK(w == NULL);
    }
}

TEST(weights_single_file) {
    const char *dir = path_in("single");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_shard(p, S1);
    vsr_err err = {0};
    for (int mode = 0; mode < 2; mode++) {
        vsr_weights *w = NULL;
        CHECK_OK(vsr_weights_open(dir, mode ? VSR_WEIGHTS_MAP : VSR_WEIGHTS_HEADERS, &w, &err), err);
        if (!w) continue;
        CHECK(vsr_weights_count(w) == 2 && vsr_weights_total_bytes(w) == 16);
        CHECK(vsr_weights_file_count(w) == 1 && !strcmp(vsr_weights_file_name(w, 0), "model.safetensors"));
        CHECK(vsr_weights_file_name(w, 1) == NULL);
        const vsr_tensor *t = vsr_weights_find(w, "b.weight");
        CHECK(t && !strcmp(t->file, "model.safetensors"));
        CHECK(vsr_weights_find(w, "zzz") == NULL);
        if (mode == 0) CHECK(t && t->data == NULL);
        else {
            float v[2];
            if (t) memcpy(v, t->data, 8);
            CHECK(t && v[0] == 1.0f && v[1] == 1.5f);
        }
        vsr_weights_close(w);
    }
}

TEST(weights_sharded) {
    const char *dir = make_sharded("sharded", GOOD_INDEX);
    /* A stray shard the index does not name, and garbage: never opened, so no error. */
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/model-00003-of-00002.safetensors", dir);
    write_text(p, "garbage");
    vsr_err err = {0};
    vsr_weights *w = NULL;
    CHECK_OK(vsr_weights_open(dir, VSR_WEIGHTS_MAP, &w, &err), err);
    if (!w) return;
    CHECK(vsr_weights_count(w) == 3 && vsr_weights_total_bytes(w) == 24);
    CHECK(vsr_weights_file_count(w) == 3);
    CHECK(!strcmp(vsr_weights_file_name(w, 0), "model.safetensors.index.json"));
    CHECK(!strcmp(vsr_weights_file_name(w, 1), "model-00001-of-00002.safetensors"));
    CHECK(!strcmp(vsr_weights_file_name(w, 2), "model-00002-of-00002.safetensors"));
    const vsr_tensor *c = vsr_weights_find(w, "c.weight");
    CHECK(c && !strcmp(c->file, "model-00002-of-00002.safetensors"));
    float v[2];
    if (c) memcpy(v, c->data, 8);
    CHECK(c && v[0] == 0.0f && v[1] == 0.5f);
    CHECK(!strcmp(vsr_weights_at(w, 0)->file, "model-00001-of-00002.safetensors"));
    CHECK(!strcmp(vsr_weights_at(w, 2)->name, "c.weight") && vsr_weights_at(w, 3) == NULL);
    vsr_weights_close(w);
}

TEST(weights_sharded_in_subfolder_and_hub_symlinks) {
    /* Hub cache layout: snapshots/<commit>/<file> -> ../../blobs/<etag>. */
    const char *repo = path_in("hub/models--o--m");
    char p[PATH_MAX], q[PATH_MAX];
    snprintf(p, sizeof p, "%s/blobs/aaaa", repo);
    write_shard(p, S1);
    snprintf(p, sizeof p, "%s/blobs/bbbb", repo);
    write_shard(p, S2);
    snprintf(p, sizeof p, "%s/blobs/cccc", repo);
    write_text(p, "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"a.weight\":\"model-1.safetensors\","
                  "\"b.weight\":\"model-1.safetensors\",\"c.weight\":\"sub/model-2.safetensors\"}}");
    const char *snap = path_in("hub/models--o--m/snapshots/0123456789abcdef0123456789abcdef01234567");
    snprintf(p, sizeof p, "%s/sub/x", snap);
    write_text(p, "");
    snprintf(p, sizeof p, "%s/model-1.safetensors", snap);
    CHECK(symlink("../../blobs/aaaa", p) == 0);
    snprintf(p, sizeof p, "%s/sub/model-2.safetensors", snap);
    CHECK(symlink("../../../blobs/bbbb", p) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", snap);
    CHECK(symlink("../../blobs/cccc", p) == 0);
    vsr_err err = {0};
    vsr_weights *w = NULL;
    CHECK_OK(vsr_weights_open(snap, VSR_WEIGHTS_HEADERS, &w, &err), err);
    CHECK(w && vsr_weights_count(w) == 3);
    CHECK(w && !strcmp(vsr_weights_file_name(w, 2), "sub/model-2.safetensors"));
    vsr_weights_close(w);
    /* The same links from a folder that is not a snapshot escape it. */
    const char *plain = path_in("hub/models--o--m/plain");
    snprintf(p, sizeof p, "%s/model.safetensors", plain);
    snprintf(q, sizeof q, "%s/blobs/aaaa", repo);
    write_text(path_in("hub/models--o--m/plain/keep"), "");
    CHECK(symlink(q, p) == 0);
    expect_weights_refused(plain, VSR_E_INVALID, "outside the package folder");
}

TEST(weights_index_malformed) {
    expect_weights_refused(make_sharded("bad_json", "{\"weight_map\":"), VSR_E_FORMAT,
                           "model.safetensors.index.json: not valid JSON");
    expect_weights_refused(make_sharded("bad_array", "[]"), VSR_E_FORMAT, "must be a JSON object");
    expect_weights_refused(make_sharded("bad_nomap", "{\"metadata\":{}}"), VSR_E_FORMAT,
                           "\"weight_map\" must be a non-empty object");
    expect_weights_refused(make_sharded("bad_emptymap", "{\"weight_map\":{}}"), VSR_E_FORMAT,
                           "\"weight_map\" must be a non-empty object");
    expect_weights_refused(make_sharded("bad_val", "{\"weight_map\":{\"a.weight\":1}}"), VSR_E_FORMAT,
                           "weight_map[\"a.weight\"] must be a file name string");
    expect_weights_refused(make_sharded("bad_meta", "{\"metadata\":[],\"weight_map\":{\"a\":\"x\"}}"),
                           VSR_E_FORMAT, "\"metadata\" must be an object");
    expect_weights_refused(
        make_sharded("bad_total", "{\"metadata\":{\"total_size\":-1},\"weight_map\":{\"a\":\"x\"}}"),
        VSR_E_FORMAT, "total_size must be a non-negative integer");
    expect_weights_refused(
        make_sharded("bad_dup", "{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}"), VSR_E_FORMAT,
        "duplicate object key");
}

TEST(weights_shard_paths_stay_inside) {
    write_shard(path_in("outside.safetensors"), S1);
    expect_weights_refused(
        make_sharded("abs", "{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}"), VSR_E_INVALID,
        "weight_map[\"a.weight\"] = \"/etc/passwd\": shard names must be relative");
    expect_weights_refused(
        make_sharded("dotdot", "{\"weight_map\":{\"a.weight\":\"../outside.safetensors\"}}"),
        VSR_E_INVALID, "no '..'");
    expect_weights_refused(
        make_sharded("dotdot2", "{\"weight_map\":{\"a.weight\":\"sub/../../outside.safetensors\"}}"),
        VSR_E_INVALID, "no '..'");
    expect_weights_refused(make_sharded("emptyname", "{\"weight_map\":{\"a.weight\":\"\"}}"),
                           VSR_E_INVALID, "must be relative");
    /* A symlink inside the folder that points out of it. */
    const char *dir = make_sharded("symesc", "{\"weight_map\":{\"a.weight\":\"link.safetensors\","
                                             "\"b.weight\":\"link.safetensors\"}}");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/link.safetensors", dir);
    CHECK(symlink(path_in("outside.safetensors"), p) == 0);
    expect_weights_refused(dir, VSR_E_INVALID,
                           "shard \"link.safetensors\" resolves to");
    /* A symlinked folder component that leaves the package. */
    const char *dir2 = make_sharded("dirlink", "{\"weight_map\":{\"a.weight\":\"up/outside.safetensors\","
                                               "\"b.weight\":\"up/outside.safetensors\"}}");
    snprintf(p, sizeof p, "%s/up", dir2);
    CHECK(symlink("..", p) == 0);
    expect_weights_refused(dir2, VSR_E_INVALID, "outside the package folder");
    /* A symlink that stays inside is fine. */
    const char *dir3 = make_sharded("symok", "{\"weight_map\":{\"a.weight\":\"l1.safetensors\","
                                             "\"b.weight\":\"l1.safetensors\","
                                             "\"c.weight\":\"model-00002-of-00002.safetensors\"}}");
    snprintf(p, sizeof p, "%s/l1.safetensors", dir3);
    CHECK(symlink("model-00001-of-00002.safetensors", p) == 0);
    vsr_err err = {0};
    vsr_weights *w = NULL;
    CHECK_OK(vsr_weights_open(dir3, VSR_WEIGHTS_HEADERS, &w, &err), err);
    vsr_weights_close(w);
}

TEST(weights_index_vs_shards) {
    /* A shard the index names but that is not there. */
    expect_weights_refused(
        make_sharded("missing", "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                                "\"b.weight\":\"model-00001-of-00002.safetensors\","
                                "\"c.weight\":\"model-00009-of-00009.safetensors\"}}"),
        VSR_E_NOT_FOUND, "shard \"model-00009-of-00009.safetensors\" is missing");
    /* The index names a tensor its shard lacks. */
    expect_weights_refused(
        make_sharded("lacks", "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                              "\"b.weight\":\"model-00001-of-00002.safetensors\","
                              "\"c.weight\":\"model-00002-of-00002.safetensors\","
                              "\"d.weight\":\"model-00002-of-00002.safetensors\"}}"),
        VSR_E_FORMAT,
        "names tensor \"d.weight\" in model-00002-of-00002.safetensors, but that shard does not hold it");
    /* A shard holds a tensor the index does not name. */
    expect_weights_refused(
        make_sharded("unnamed", "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                                "\"c.weight\":\"model-00002-of-00002.safetensors\"}}"),
        VSR_E_FORMAT,
        "model-00001-of-00002.safetensors: tensor \"b.weight\" is not named in model.safetensors.index.json");
    /* The index names another shard for a tensor. */
    expect_weights_refused(
        make_sharded("other", "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                              "\"b.weight\":\"model-00002-of-00002.safetensors\","
                              "\"c.weight\":\"model-00002-of-00002.safetensors\"}}"),
        VSR_E_FORMAT, "tensor \"b.weight\" is here but model.safetensors.index.json names shard "
                      "model-00002-of-00002.safetensors");
    /* The same tensor in two shards. */
    const char *dir = make_sharded("twice", GOOD_INDEX);
    char p[PATH_MAX];
    static const char *const S2b[] = {"b.weight", "c.weight", NULL};
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_shard(p, S2b);
    expect_weights_refused(dir, VSR_E_FORMAT,
                           "tensor \"b.weight\" is in two shards: model-00001-of-00002.safetensors and "
                           "model-00002-of-00002.safetensors");
    /* A broken shard is refused with its name. */
    const char *dir2 = make_sharded("broken", GOOD_INDEX);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir2);
    write_text(p, "1234");
    expect_weights_refused(dir2, VSR_E_FORMAT, "model-00002-of-00002.safetensors: file is 4 bytes");
}

TEST(weights_absent) {
    const char *dir = path_in("nothing");
    write_text(path_in("nothing/config.json"), "{}");
    expect_weights_refused(dir, VSR_E_NOT_FOUND,
                           "neither model.safetensors nor model.safetensors.index.json is present");
    expect_weights_refused(path_in("no_such_folder"), VSR_E_NOT_FOUND, "package folder is missing");
    /* A dangling model.safetensors link (hub blob not downloaded). */
    const char *dir2 = path_in("dangling");
    write_text(path_in("dangling/config.json"), "{}");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/model.safetensors", dir2);
    CHECK(symlink("../blobs/none", p) == 0);
    expect_weights_refused(dir2, VSR_E_NOT_FOUND, "weights file \"model.safetensors\" is missing");
}

/* A header whose __metadata__ holds 80,000 keys in scrambled order (the hostile case of issue 20:
 * sorted insertion made this quadratic, 18 s): every key is found with its value, and a key that
 * is not there is not. */
TEST(many_metadata_keys) {
    enum { N = 80000 };
    size_t cap = (size_t)N * 40 + 256, len = 8;
    uint8_t *b = malloc(cap);
    len += (size_t)snprintf((char *)b + len, cap - len, "{\"__metadata__\":{");
    for (int i = 0; i < N; i++) {
        int k = (int)(((long long)i * 48271) % N); /* a permutation of 0..N-1 (N and 48271 coprime) */
        len += (size_t)snprintf((char *)b + len, cap - len, "%s\"key%06d\":\"v%d\"", i ? "," : "", k, k);
    }
    len += (size_t)snprintf((char *)b + len, cap - len, "}}");
    uint64_t hl = len - 8;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    vsr_st_file *f = NULL;
    vsr_err err = {0};
    vsr_status st = vsr_st_parse("many", b, len, &f, &err);
    CHECK_OK(st, err);
    if (st == VSR_OK) {
        int found = 0;
        for (int k = 0; k < N; k++) {
            char key[16], want[16];
            snprintf(key, sizeof key, "key%06d", k);
            snprintf(want, sizeof want, "v%d", k);
            const char *v = vsr_st_metadata(f, key);
            found += v && !strcmp(v, want);
        }
        CHECK_MSG(found == N, "%d of %d keys found", found, N);
        CHECK(vsr_st_metadata(f, "key080000") == NULL && vsr_st_metadata(f, "") == NULL);
    }
    vsr_st_close(f);
    free(b);
}

int main(void) {
    RUN(writer_round_trip);
    RUN(many_metadata_keys);
    RUN(writer_is_deterministic_and_header_exact);
    RUN(writer_same_size_dtypes_follow_reference_rank);
    RUN(writer_refusals);
    RUN(writer_empty_file);
    RUN(rule_file_shorter_than_8);
    RUN(rule_header_length_zero);
    RUN(rule_header_length_over_limit);
    RUN(rule_header_past_end_of_file);
    RUN(rule_header_not_utf8);
    RUN(rule_header_not_json);
    RUN(rule_header_must_start_with_brace);
    RUN(rule_trailing_spaces_allowed);
    RUN(rule_header_not_object);
    RUN(rule_entry_not_object);
    RUN(rule_entry_keys);
    RUN(rule_unknown_dtype);
    RUN(rule_shape_values);
    RUN(rule_too_many_dims);
    RUN(rule_element_count_overflow);
    RUN(rule_data_offsets_shape);
    RUN(rule_begin_after_end);
    RUN(rule_span_matches_shape);
    RUN(rule_sub_byte_whole_bytes);
    RUN(rule_offsets_start_at_zero);
    RUN(rule_offsets_no_holes);
    RUN(rule_offsets_no_overlaps);
    RUN(rule_last_end_is_buffer_end);
    RUN(rule_duplicate_names);
    RUN(rule_metadata_string_map);
    RUN(empty_tensors_and_scalars);
    RUN(open_errors_name_the_file);
    RUN(reads_python_reference_file);
    RUN(weights_single_file);
    RUN(weights_sharded);
    RUN(weights_sharded_in_subfolder_and_hub_symlinks);
    RUN(weights_index_malformed);
    RUN(weights_shard_paths_stay_inside);
    RUN(weights_index_vs_shards);
    RUN(weights_absent);
    return test_summary();
}
