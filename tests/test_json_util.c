/* src/core/json_util: Python-compatible dumps (used for identities and prompts). The expected
 * strings are what CPython 3.11 prints for json.dumps of the same values. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"
#include "test.h"

TEST(float_repr) {
    struct {
        double v;
        const char *py;
    } cases[] = {{0.75, "0.75"}, {1.0, "1.0"}, {1e7, "10000000.0"}, {10000000.5, "10000000.5"},
                 {1e16, "1e+16"}, {1.5e-5, "1.5e-05"}, {0.0001, "0.0001"},
                 {123456789012345678.0, "1.2345678901234568e+17"}, {-2.5e-300, "-2.5e-300"},
                 {3.14159, "3.14159"}, {9007199254740993.0, "9007199254740992.0"}, {0.1, "0.1"},
                 {100.0, "100.0"}, {-0.0, "-0.0"}, {1e-7, "1e-07"}, {5e-324, "5e-324"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_real(cases[i].v);
        char *s = vsr_json_dumps_python(j, true, true, true);
        CHECK_MSG(s && !strcmp(s, cases[i].py), "%.17g: got %s want %s", cases[i].v, s, cases[i].py);
        free(s);
        json_decref(j);
    }
}

TEST(separators_and_ascii) {
    json_t *o = json_loads("{\"b\":[1,2.5,\"x\\\"y\\\\z\\n\"],\"a\":\"\\u00e9\\u6771\\ud83d\\ude80\",\"c\":null}", 0, NULL);
    char *s = vsr_json_dumps_python(o, false, false, false);
    CHECK_MSG(!strcmp(s, "{\"b\": [1, 2.5, \"x\\\"y\\\\z\\n\"], \"a\": \"\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x9a\x80\", \"c\": null}"), "%s", s);
    free(s);
    s = vsr_json_dumps_python_compact(o);
    CHECK_MSG(!strcmp(s, "{\"a\":\"\\u00e9\\u6771\\ud83d\\ude80\",\"b\":[1,2.5,\"x\\\"y\\\\z\\n\"],\"c\":null}"), "%s", s);
    free(s);
    json_decref(o);
}

TEST(only_keys) {
    json_t *o = json_loads("{\"a\":1,\"zz\":2}", 0, NULL);
    const char *allowed[] = {"a", "b", NULL};
    vsr_err err = {0};
    vsr_status st = vsr_json_only_keys(o, allowed, "config.json", &err);
    CHECK_ERR(st, err, VSR_E_FORMAT, "config.json: unknown key \"zz\" (expected one of a, b)");
    json_decref(o);
}

int main(void) {
    RUN(float_repr);
    RUN(separators_and_ascii);
    RUN(only_keys);
    return test_summary();
}
