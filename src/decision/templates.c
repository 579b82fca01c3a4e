/* sha256 of the chat_template.jinja files a Decision 3.0 package may carry
 * (published-d3.md "Chat templates"). The runtime never executes a template: for each
 * of these it renders the one prompt format of src/decision/render.c. Any other
 * template is refused at load (src/decision/decider.c). */
#include <stddef.h>

extern const char *const vsr_d3_known_templates[];
const char *const vsr_d3_known_templates[] = {
    /* the published packages (reference vllm_srun/families/decision3/prompt.py) */
    "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80", /* d3-nano, d3-lite */
    "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715", /* d3-flash, d3-mini */
    "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041", /* d3 */
    /* src/fixture/fixture.c vsr_fixture_chat_template: renders the same format for a
     * system and a user message with add_generation_prompt (tests/test_decision.c checks
     * it against the hash here) */
    "90fe4ebf04737041a41ce422bdaa6e24f12ad8128a001f60c678f162794e0ea7",
    NULL,
};
