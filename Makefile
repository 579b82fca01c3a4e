# vllm-sr-c build. `make` builds the library and programs; `make test` runs every test;
# `make asan` builds and runs the tests under AddressSanitizer + UBSan; `make fuzz`
# builds the libFuzzer targets (clang). CUDA code builds only where nvcc is found.

CC      ?= cc
BUILD   ?= build
CSTD    := -std=c17
WARN    := -Wall -Wextra -Wshadow -Wpointer-arith -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
OPT     ?= -O2 -g
ARCHFLAGS ?= -march=x86-64-v2 -mtune=native
CPPFLAGS += -Iinclude -Isrc -Itools -D_GNU_SOURCE -DVSR_DATA_DIR=\"$(abspath data)\"
CFLAGS  += $(CSTD) $(WARN) $(OPT) $(ARCHFLAGS) -pthread -fPIC
LDLIBS  += -ljansson -lcrypto -lpcre2-8 -lutf8proc -lmicrohttpd -lyaml -lpng -lcurl -ldl -lm -pthread

NVCC    ?= $(shell command -v nvcc 2>/dev/null)
ifneq ($(NVCC),)
ifneq ($(VSR_NO_CUDA),1)
HAVE_CUDA := 1
endif
endif

LIB_SRC   := $(shell find src -name '*.c' | sort)
CUDA_SRC  := $(shell find src -name '*.cu' | sort)
CLI_SRC   := $(shell find tools/common -name '*.c' | sort)
TOOL_SRC  := $(shell find tools/vllm-srun -name '*.c' | sort) $(CLI_SRC)
SR_SRC    := $(shell find tools/vllm-sr -name '*.c' | sort) $(CLI_SRC)
TEST_SRC  := $(shell find tests -maxdepth 1 -name 'test_*.c' | sort)
TEST_LIB  := $(filter-out $(TEST_SRC),$(shell find tests -maxdepth 1 -name '*.c' | sort))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/%.o)
SR_OBJ    := $(SR_SRC:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIB_OBJ := $(TEST_LIB:%.c=$(BUILD)/%.o)

ifeq ($(HAVE_CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CPPFLAGS  += -DVSR_HAVE_CUDA=1 -I$(CUDA_HOME)/include
NVCCFLAGS ?= -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 -Xcompiler -fPIC -Iinclude -Isrc -DVSR_HAVE_CUDA=1 -MMD -MP
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
endif

.PHONY: all test asan tsan fuzz fuzz-run clean format
all: $(BUILD)/vllm-srun $(BUILD)/vllm-sr $(TEST_BINS)

$(BUILD)/libvsr.a: $(LIB_OBJ) $(CUDA_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/vllm-srun: $(TOOL_OBJ) $(BUILD)/libvsr.a
	$(CC) $(CFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libvsr.a $(LDFLAGS) $(LDLIBS)

# the router front end (issue #21), on the same library
$(BUILD)/vllm-sr: $(SR_OBJ) $(BUILD)/libvsr.a
	$(CC) $(CFLAGS) -o $@ $(SR_OBJ) $(BUILD)/libvsr.a $(LDFLAGS) $(LDLIBS)

# the OpenAI-compatible upstream of the router's tests and bench (issue #21): a program, not a suite
all: $(BUILD)/tests/openai_upstream
$(BUILD)/tests/openai_upstream: $(BUILD)/tests/tools/openai_upstream.o
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_LIB_OBJ) $(BUILD)/libvsr.a
	$(CC) $(CFLAGS) -o $@ $< $(TEST_LIB_OBJ) $(BUILD)/libvsr.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# the OpenAPI document is embedded with .incbin
$(BUILD)/src/server/openapi.o: data/openapi.yaml

test: all
	@BUILD=$(BUILD) tests/run.sh

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" VSR_NO_CUDA=1 all
	BUILD=build-asan VSR_TEST_SANITIZER=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh

# Each fuzz target builds with clang from src/core plus only the sources its FUZZ_SRC_<target>
# line names (no CUDA, nothing else of the library); a new target adds its own line.
# ThreadSanitizer build of the worker, driven under load (scripts/test.sh runs it after asan).
tsan:
	$(MAKE) BUILD=build-tsan OPT="-O1 -g -fsanitize=thread" LDFLAGS="-fsanitize=thread" VSR_NO_CUDA=1 build-tsan/vllm-srun
	$(MAKE) $(BUILD)/vllm-srun
	VSR_BIN=$(CURDIR)/$(BUILD)/vllm-srun VSR_TSAN_BIN=$(CURDIR)/build-tsan/vllm-srun bash tests/tsan_server.sh

FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CORE_SRC := $(sort $(wildcard src/core/*.c))
FUZZ_SRC_fuzz_safetensors := src/format/dtype.c src/package/safetensors.c
FUZZ_SRC_fuzz_decisions := src/decision/request.c src/decision/render.c src/decision/answer.c \
  src/fixture/d3_codes.c $(sort $(wildcard src/tokenizer/*.c))
FUZZ_SRC_fuzz_json := src/package/model_config.c src/package/decision_config.c src/package/manifest.c \
  src/package/identity.c src/format/quant_config.c
# clang 14 lacks __builtin_roundevenf (used by src/format/dtype.c); under the default
# round-to-nearest-even mode __builtin_nearbyintf gives the same result.
FUZZ_CFLAGS := $(CSTD) -Iinclude -Isrc -D_GNU_SOURCE -DVSR_DATA_DIR=\"$(abspath data)\" -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer -pthread \
  -D__builtin_roundevenf=__builtin_nearbyintf
FUZZ_LDLIBS := -ljansson -lcrypto -lpcre2-8 -lutf8proc -lm -pthread
fuzz: $(FUZZ_TARGETS)
# Each target for FUZZ_SECONDS (20) on a scratch copy of its committed seed corpus (CI runs this).
fuzz-run: fuzz
	FUZZ_BUILD=$(FUZZ_BUILD) bash tests/fuzz/run.sh
.SECONDEXPANSION:
$(FUZZ_BUILD)/%: tests/fuzz/%.c $(FUZZ_CORE_SRC) $$(FUZZ_SRC_$$*)
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_CORE_SRC) $(FUZZ_SRC_$*) $(FUZZ_LDLIBS)

clean:
	rm -rf build build-asan build-fuzz

format:
	clang-format -i $(LIB_SRC) $(sort $(TOOL_SRC) $(SR_SRC)) $(TEST_SRC) $(shell find include -name '*.h')

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(SR_OBJ:.o=.d) $(TEST_BINS:=.d)
-include $(CUDA_OBJ:.o=.d)
