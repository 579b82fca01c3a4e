/* vllm-srun: the worker program. One table of subcommands; each is a file. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static const vsr_command commands[] = {
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
    {"dequant", cmd_dequant, "write a package's quantized weights dequantized to BF16 (reference code)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: vllm-srun <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'vllm-srun <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "vllm-srun: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
