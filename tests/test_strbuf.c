/* src/core/strbuf: the growable text buffer every JSON/prompt/metrics writer builds into. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "core/strbuf.h"
#include "test.h"

TEST(appends_and_takes) {
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "ab");
    vsr_strbuf_put(&b, "c\0d", 3); /* embedded NUL kept */
    vsr_strbuf_printf(&b, "[%d|%s]", 42, "x");
    size_t n = 0;
    char *s = vsr_strbuf_take(&b, &n);
    CHECK(s && n == 11 && !memcmp(s, "abc\0d[42|x]", 12));
    CHECK(!b.p && !b.n && !b.cap && !b.oom); /* emptied: ownership moved to s */
    free(s);
}

TEST(grows_past_any_capacity) {
    /* Pieces of every size around the growth steps, put and printf alike: the text is exact. */
    vsr_strbuf b = {0};
    char *want = malloc(1 << 20), piece[5000];
    size_t w = 0;
    for (int i = 0; i < 400; i++) {
        size_t k = (size_t)(i * 37 % 4999);
        memset(piece, 'a' + i % 26, k);
        piece[k] = 0;
        if (i % 2) vsr_strbuf_printf(&b, "%s", piece);
        else vsr_strbuf_put(&b, piece, k);
        memcpy(want + w, piece, k);
        w += k;
        CHECK(b.n == w && b.p[b.n] == 0 && b.cap > b.n);
    }
    size_t n;
    char *s = vsr_strbuf_take(&b, &n);
    CHECK(s && n == w && !memcmp(s, want, w));
    free(s);
    free(want);
}

TEST(empty_take_is_an_empty_string) {
    vsr_strbuf b = {0};
    size_t n = 99;
    char *s = vsr_strbuf_take(&b, &n);
    CHECK(s && !s[0] && n == 0);
    free(s);
    vsr_strbuf_free(NULL); /* no-op */
    vsr_strbuf_free(&b);
}

TEST(failure_sticks_and_take_refuses) {
    /* A size past what can be addressed fails without allocating; every later append is
     * dropped and take hands back NULL, not a partial text. */
    vsr_strbuf b = {0};
    vsr_strbuf_puts(&b, "ab");
    vsr_strbuf_put(&b, "x", SIZE_MAX - 2);
    CHECK(b.oom && b.n == 2);
    vsr_strbuf_puts(&b, "more");
    vsr_strbuf_printf(&b, "%d", 7);
    CHECK(b.n == 2);
    size_t n = 99;
    CHECK(vsr_strbuf_take(&b, &n) == NULL && n == 0);
    CHECK(!b.p && !b.oom); /* the partial text was freed; b is reusable */

    /* A printf that cannot format (a wide character the C locale cannot encode) fails too. */
    vsr_strbuf_puts(&b, "ok");
    vsr_strbuf_printf(&b, "%ls", L"\u00e9");
    CHECK(b.oom);
    CHECK(vsr_strbuf_take(&b, NULL) == NULL);
}

int main(void) {
    RUN(appends_and_takes);
    RUN(grows_past_any_capacity);
    RUN(empty_take_is_an_empty_string);
    RUN(failure_sticks_and_take_refuses);
    return test_summary();
}
