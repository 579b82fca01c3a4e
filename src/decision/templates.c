/* sha256 of the chat_template.jinja files a Decision 3.0 package may carry
 * (reference-runtime.md 2.4: load fails on any other template). The published
 * vllm-sr/d3-* templates are not available here (no network, no copy in the
 * specs), so only the template `vllm-srun fixture` writes is known; add a
 * published template's hash here once its file is at hand. The prompt we render
 * (src/decision/render.c) is exactly what this template produces for a system
 * and a user message with add_generation_prompt. */
#include <stddef.h>

extern const char *const vsr_d3_known_templates[];
const char *const vsr_d3_known_templates[] = {
    /* src/fixture/fixture.c vsr_fixture_chat_template */
    "90fe4ebf04737041a41ce422bdaa6e24f12ad8128a001f60c678f162794e0ea7",
    NULL,
};
