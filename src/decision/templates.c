/* sha256 of the chat_template.jinja files a Decision 3.0 package may carry
 * (reference-runtime.md 2.4: load fails on any other template). */
#include <stddef.h>

extern const char *const vsr_d3_known_templates[];
const char *const vsr_d3_known_templates[] = {
    NULL, /* filled below by the fixture template's hash */
};
