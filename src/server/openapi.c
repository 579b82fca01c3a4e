/* The OpenAPI document served at GET /openapi.yaml, embedded from data/openapi.yaml. */
__asm__(".section .rodata\n"
        ".global vsr_openapi_yaml\n"
        ".type vsr_openapi_yaml, @object\n"
        "vsr_openapi_yaml:\n"
        ".incbin \"" VSR_DATA_DIR "/openapi.yaml\"\n"
        ".byte 0\n"
        ".previous\n");
