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

TEST(indent_style) {
    /* json.dumps(doc, indent=2, sort_keys=True): the fixture writer's form (CPython 3.11). */
    json_t *o = json_loads("{\"b\":[1,2.5,{},[],{\"z\":null,\"y\":[true,false]}],"
                           "\"a\":\"\\u00e9\\u6771\\ud83d\\ude80 \\u007f\\u0001\\\"\\\\\\n\","
                           "\"e\":{},\"c\":1e-06,\"d\":10000000.0}",
                           0, NULL);
    const vsr_json_style st = {.sort_keys = true, .ensure_ascii = true, .indent = 2};
    vsr_strbuf b = {0};
    vsr_json_dump_python(&b, o, &st);
    char *s = vsr_strbuf_take(&b, NULL);
    CHECK_MSG(s && !strcmp(s, "{\n  \"a\": \"\\u00e9\\u6771\\ud83d\\ude80 \\u007f\\u0001\\\"\\\\\\n\",\n"
                              "  \"b\": [\n    1,\n    2.5,\n    {},\n    [],\n    {\n      \"y\": [\n"
                              "        true,\n        false\n      ],\n      \"z\": null\n    }\n  ],\n"
                              "  \"c\": 1e-06,\n  \"d\": 10000000.0,\n  \"e\": {}\n}"),
              "%s", s);
    free(s);
    json_decref(o);
}

TEST(string_without_ensure_ascii) {
    /* json.dumps(s, ensure_ascii=False), which is also serde_json's (safetensors') escaping:
     * controls escaped, DEL and non-ASCII as they are. */
    const char *in = "\xc3\xa9\x7f\x01\x1f\"\\\n\t\b\f\r \xf0\x9f\x9a\x80";
    vsr_strbuf b = {0};
    vsr_json_put_string(&b, in, strlen(in), false);
    char *s = vsr_strbuf_take(&b, NULL);
    CHECK_MSG(s && !strcmp(s, "\"\xc3\xa9\x7f\\u0001\\u001f\\\"\\\\\\n\\t\\b\\f\\r \xf0\x9f\x9a\x80\""), "%s", s);
    free(s);
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
    RUN(indent_style);
    RUN(string_without_ensure_ascii);
    RUN(only_keys);
    return test_summary();
}
