/* vllm-srun: the worker program. One table of subcommands; each is a file. */
#include "commands.h"

static const cli_command commands[] = {
    {"serve", cmd_serve, "serve a package over HTTP (/v1/decisions, /v1/models, /health, /metrics)"},
    {"decide", cmd_decide, "answer one /v1/decisions request body from the command line"},
    {"bench", cmd_bench, "drive a running worker: requests/s, latency percentiles, Server-Timing phases"},
    {"compare", cmd_compare, "answer the same requests with two packages and compare (the quantization gate)"},
    {"golden", cmd_golden, "run the golden self-check (or --record its answers)"},
    {"devices", cmd_devices, "list devices and what each can run"},
    {"inspect", cmd_inspect, "describe a package: format, schemes, bytes, identity, device verdicts"},
    {"verify", cmd_verify, "check a package's manifest, hashes and identity"},
    {"models", cmd_models, "list known packages (built-in and published)"},
    {"fixture", cmd_fixture, "write a deterministic test package"},
    {"tokenize", cmd_tokenize, "print the token ids of a text (or of each stdin line)"},
    {"render", cmd_render, "print the prompt and token ids of each question of a request (no weights)"},
    {"quantize", cmd_quantize, "write a compressed-tensors package (FP8, W4A16 GPTQ/AWQ, NVFP4) from a BF16 one"},
    {"dequant", cmd_dequant, "write a package's quantized weights dequantized to BF16 (reference code)"},
};

int main(int argc, char **argv) {
    return cli_main("vllm-srun", commands, sizeof commands / sizeof commands[0], argc, argv);
}
