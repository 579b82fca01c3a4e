/* tests/test.h: a tiny test harness. Each tests/test_*.c is one program:
 *   TEST(name) { CHECK(...); CHECK_ERR(st, err, VSR_E_FORMAT, "substring"); }
 *   int main(void) { RUN(name); ...; return test_summary(); }
 * A failing CHECK prints file:line and the expression and fails the test. */
#ifndef VSR_TEST_H
#define VSR_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vsr/error.h"

extern int test_failures, test_checks;
extern const char *test_current;

#define TEST(name) static void name(void)
#define RUN(name)                                                                                  \
    do {                                                                                           \
        int before_ = test_failures;                                                               \
        test_current = #name;                                                                      \
        name();                                                                                    \
        printf("%s %s\n", test_failures == before_ ? "ok  " : "FAIL", #name);                      \
    } while (0)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__, test_current,     \
                    #cond);                                                                        \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s: CHECK(%s) failed: ", __FILE__, __LINE__, test_current,     \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* The call returned `code` and the message contains `needle`. */
#define CHECK_ERR(st, err, code, needle)                                                           \
    CHECK_MSG((st) == (code) && strstr((err).msg, (needle)) != NULL,                               \
              "got status %s message \"%s\", want status %s containing \"%s\"",                    \
              vsr_status_name(st), (err).msg, vsr_status_name(code), (needle))

#define CHECK_OK(st, err)                                                                          \
    CHECK_MSG((st) == VSR_OK, "got status %s: %s", vsr_status_name(st), (err).msg)

int test_summary(void);
/* A seeded xorshift64 stream shared by the tests (same seed, same data on every machine). */
void test_rng_seed(uint64_t seed);
uint64_t test_rnd(void);
float test_rndf(void); /* uniform in [-1, 1), 53 random bits rounded to float */
/* Normalised error max|a - ref| / max|ref| (max|a - ref| when ref is all zero); INFINITY when
 * either side holds a NaN, so a NaN anywhere fails every bound. */
double test_nerr(const float *a, const float *ref, int64_t n);
/* A fresh empty directory under $TMPDIR for this test program; removed at exit. */
const char *test_tmpdir(void);
/* Writes a file (creating parent dirs). Returns 0 on success. */
int test_write_file(const char *path, const void *data, size_t n);
/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *test_read_file(const char *path, size_t *n);

/* Opens the package folder `dir`, verifies its manifest (2 threads) and maps its weights; a failure
 * is a failed CHECK (NULL returned). */
struct vsr_package;
struct vsr_package *test_open_package(const char *dir);
/* The device an environment variable names for a test that can also run on a GPU machine
 * ("cuda:0"; unset, empty or "cpu": the CPU, *have = 0). -1, with the reason on stderr, when this
 * host has no such device or the name is not a device. */
struct vsr_device;
int test_device_from_env(const char *var, struct vsr_device *dev, int *have);

#ifdef VSR_HAVE_CUDA
struct vsr_backend;
/* The first NVIDIA GPU the device probe finds, and a CUDA backend on it. 0 with the reason in
 * `why` when there is none (the CUDA tests then print SKIP). */
int test_find_cuda(struct vsr_device *dev, struct vsr_backend *be, char *why, size_t n);
#endif

#endif
