# Ephemeral - build, test and set-up.
#
#   make                 build/ephemerald, build/ephemeral, build/ephemeral-init
#   make test            unit tests, then black-box tests against the real server and sandbox
#   make SANITIZE=address,undefined test
#   make demo            the seed example end to end on the embedded defaults
#   make install         the programs, man pages, systemd unit and config (PREFIX, DESTDIR)
#   make image           the sandbox image (cached outside the clone)
#   make bench           benchmarks side by side with bubblewrap and gVisor
#   make lint / format / fuzz

CC ?= cc
BUILD ?= build
SANITIZE ?=
Q ?= @

PKGS := libmicrohttpd jansson libcurl libsodium sqlite3 libpq zlib libbrotlidec libcrypto
# Only the build links libseccomp: seccomp-gen compiles the sandbox's filter into a header.
BUILD_PKGS := libseccomp
# GCC's check that a bounded snprintf whose result is ignored cannot cut its output: every such
# call checks the result or goes through eph_text_format (whole or an error) or eph_text_format_cut
# (a message, cut at a character). Level 2 would also flag the calls that do check. Clang has none.
FORMAT_TRUNCATION := $(shell $(CC) -Werror -Wformat-truncation=1 -E -x c /dev/null >/dev/null 2>&1 \
        && echo -Wformat-truncation=1)
WARN := -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wformat=2 \
        -Wvla -Wno-unused-parameter -Wno-missing-field-initializers $(FORMAT_TRUNCATION)
BASE_CFLAGS := -std=gnu11 -g -O2 -D_GNU_SOURCE -Isrc -fstack-protector-strong -fPIE \
        -D_FORTIFY_SOURCE=2 $(WARN)
ifneq ($(SANITIZE),)
BASE_CFLAGS := $(filter-out -O2 -D_FORTIFY_SOURCE=2,$(BASE_CFLAGS)) -O1 \
        -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_LDFLAGS := -fsanitize=$(SANITIZE)
endif
# pkg-config is asked only after the packages are installed: $(BUILD)/config.mk holds its answers,
# and its rule installs the build packages first. make builds an included makefile that is missing
# or out of date, then starts again and reads it. `make clean` and `make format` need neither.
CONFIG_MK := $(BUILD)/config.mk
ifneq ($(filter-out clean format,$(or $(MAKECMDGOALS),all)),)
include $(CONFIG_MK)
endif
CFLAGS_ALL := $(BASE_CFLAGS) $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL := -pie -Wl,-z,relro,-z,now $(SAN_LDFLAGS) $(LDFLAGS)
LIBS := $(PKG_LIBS) -lpthread -lm

# The guest agent is static and never sanitized: it runs alone inside the sandbox.
INIT_CFLAGS := -std=gnu11 -g -O2 -D_GNU_SOURCE -Isrc -static $(WARN) $(CFLAGS)

OBJ := $(BUILD)/obj
COMMON_SRC := $(wildcard src/common/*.c)
# The guest code the daemon links too: the protocol, the seccomp loader the jail shares, and the
# command splitter (for its unit tests).
SHARED_GUEST_SRC := src/guest/protocol.c src/guest/seccomp.c src/guest/argv.c
# The sandbox's seccomp program, compiled to BPF at build time and loaded by src/guest/seccomp.c
# (into the jail's child, and by the init of gvisor and microvm).
SECCOMP_GEN_SRC := src/guest/seccomp_gen.c
SECCOMP_BPF_H := $(OBJ)/gen/seccomp_bpf.h
DAEMON_LIB_SRC := $(COMMON_SRC) $(SHARED_GUEST_SRC) \
        $(filter-out $(SECCOMP_GEN_SRC), \
            $(wildcard src/store/*.c src/ledger/*.c src/run/*.c src/agent/*.c src/image/*.c \
                       src/sandbox/*.c src/sandbox/namespaces/*.c src/sandbox/gvisor/*.c \
                       src/sandbox/microvm/*.c src/broker/*.c src/api/*.c)) \
        $(filter-out src/daemon/main.c src/daemon/sandbox_main.c,$(wildcard src/daemon/*.c))
CLI_SRC := $(wildcard src/cli/*.c)
INIT_SRC := $(filter-out $(SECCOMP_GEN_SRC),$(wildcard src/guest/*.c))

# The web UI, built into ephemerald (src/api/static.c): web/ and the libraries of Debian's
# libjs-marked and node-dompurify, and the seed example that the playground starts from.
WEB_LIBS := /usr/share/javascript/marked/marked.min.js /usr/share/nodejs/dompurify/dist/purify.min.js
WEB_SRC := $(sort $(wildcard web/*)) examples/sandbox-proof/request.json $(WEB_LIBS)
WEB_OBJ := $(OBJ)/gen/web_files.o
DAEMON_LIB_OBJ := $(DAEMON_LIB_SRC:%.c=$(OBJ)/%.o) $(WEB_OBJ)
CLI_OBJ := $(CLI_SRC:%.c=$(OBJ)/%.o) $(COMMON_SRC:%.c=$(OBJ)/%.o)
INIT_OBJ := $(INIT_SRC:%.c=$(BUILD)/init-obj/%.o)

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

# Guest-side helper of the gvisor backend (src/guest/gvisor/): a tiny shared library preloaded
# inside gVisor sandboxes, unsanitized like the init (it runs in the image's programs).
GVISOR_COMPAT := $(BUILD)/ephemeral-gvisor-compat.so

# `ephemerald sandbox` alone, without the server's libraries (src/daemon/sandbox_main.c).
SANDBOX_CLI := $(BUILD)/ephemeral-sandbox
SANDBOX_CLI_OBJ := $(OBJ)/src/daemon/sandbox_main.o $(OBJ)/src/daemon/sandbox_cmd.o \
        $(OBJ)/src/daemon/image.o $(OBJ)/src/daemon/image_vm.o $(OBJ)/src/image/cache.o \
        $(SHARED_GUEST_SRC:%.c=$(OBJ)/%.o) \
        $(filter $(OBJ)/src/common/% $(OBJ)/src/sandbox/%,$(DAEMON_LIB_OBJ))

BINS := $(BUILD)/ephemerald $(BUILD)/ephemeral $(BUILD)/ephemeral-init $(GVISOR_COMPAT) $(SANDBOX_CLI)

.PHONY: all deps test unit unit-bins blackbox demo image bench lint format fuzz faults clean install
# A failed recipe leaves no half-written target that a later make would take as up to date.
.DELETE_ON_ERROR:
all: deps $(BINS)

# Installs missing Debian packages (quiet when everything is there): the groups the goals need, so
# that `make test` has them before the image is built (its microVM disk needs e2fsprogs).
DEPS_GROUPS := build $(if $(filter test blackbox faults,$(MAKECMDGOALS)),test) \
        $(filter demo bench lint fuzz,$(MAKECMDGOALS))
deps:
	$(Q)scripts/setup-deps.sh $(DEPS_GROUPS)

$(CONFIG_MK): scripts/setup-deps.sh Makefile
	$(Q)scripts/setup-deps.sh build
	$(Q)mkdir -p $(dir $@)
	$(Q)pkg-config --exists --print-errors $(PKGS) $(BUILD_PKGS)
	$(Q){ echo "PKG_CFLAGS := $$(pkg-config --cflags $(PKGS))"; \
	      echo "PKG_LIBS := $$(pkg-config --libs $(PKGS))"; \
	      echo "SECCOMP_LIBS := $$(pkg-config --libs $(BUILD_PKGS))"; \
	      echo "SANDBOX_STATIC_LIBS := $$(pkg-config --static --libs jansson libsodium)"; } > $@

# Relink and recompile when the flags change (SANITIZE=... and back).
$(BUILD)/.flags: FORCE
	$(Q)mkdir -p $(BUILD)
	$(Q)echo '$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL)' | cmp -s - $@ || echo '$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL)' > $@
FORCE:

$(OBJ)/%.o: %.c $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(OBJ)/gen/web_files.c: scripts/embed-web.sh $(WEB_SRC)
	$(Q)mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)scripts/embed-web.sh $@ $(WEB_SRC)

$(WEB_OBJ): $(OBJ)/gen/web_files.c $(BUILD)/.flags
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/seccomp-gen: $(SECCOMP_GEN_SRC) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -o $@ $< $(SECCOMP_LIBS)

$(SECCOMP_BPF_H): $(BUILD)/seccomp-gen
	$(Q)mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)$(BUILD)/seccomp-gen $@

$(OBJ)/src/guest/seccomp.o $(BUILD)/init-obj/src/guest/seccomp.o: $(SECCOMP_BPF_H)
$(OBJ)/src/guest/seccomp.o: CFLAGS_ALL += -I$(OBJ)/gen
$(BUILD)/init-obj/src/guest/seccomp.o: INIT_CFLAGS += -I$(OBJ)/gen

$(WEB_LIBS):
	$(Q)scripts/setup-deps.sh build

$(BUILD)/init-obj/%.o: %.c $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  CC init $<"
	$(Q)$(CC) $(INIT_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/ephemerald: $(OBJ)/src/daemon/main.o $(DAEMON_LIB_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS)

# Static (static-pie: still position-independent, so still randomised): no dynamic loader, no
# libraries to find and map at each start. Sanitizers need the shared runtime: linked like the rest.
ifeq ($(SANITIZE),)
$(SANDBOX_CLI): $(SANDBOX_CLI_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) -static-pie -Wl,-z,relro,-z,now $(LDFLAGS) -o $@ $^ $(SANDBOX_STATIC_LIBS) -lm
else
$(SANDBOX_CLI): $(SANDBOX_CLI_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) -Wl,--as-needed -o $@ $^ $(LIBS)
endif

$(BUILD)/ephemeral: $(CLI_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS)

$(BUILD)/ephemeral-init: $(INIT_OBJ)
	@echo "  LD      $@"
	$(Q)$(CC) $(INIT_CFLAGS) -o $@ $^

$(GVISOR_COMPAT): src/guest/gvisor/statx_compat.c $(BUILD)/.flags
	@echo "  CC so   $<"
	$(Q)$(CC) $(filter-out -static,$(INIT_CFLAGS)) -shared -fPIC -Wl,-z,relro,-z,now -o $@ $<

# What the server's unit tests share: the fake sandbox backend (tests/fake_sandbox.h).
TEST_LIB_OBJ := $(OBJ)/tests/fake_sandbox.o
# The client's unit tests link the client's objects instead of the server's.
CLI_LIB_OBJ := $(filter-out $(OBJ)/src/cli/main.o,$(CLI_OBJ))

# FAULTS=1 (make faults): the project's objects become one relocatable object whose calls to
# what can fail for lack of resources go to tests/faults/fault.c, which fails the Nth on request;
# the tests' own calls stay real.
FAULT_WRAPPED := malloc calloc realloc strdup strndup asprintf vasprintf pthread_create \
        json_object json_array json_string json_stringn json_integer json_real json_deep_copy \
        json_object_set_new json_object_update json_array_append_new json_array_extend json_pack \
        json_dumps json_dumpb json_dump_file json_loads json_loadb json_load_file curl_slist_append
ifneq ($(FAULTS),)
UNIT_DAEMON_OBJ := $(OBJ)/faults/daemon.o $(OBJ)/tests/faults/fault.o
UNIT_CLI_OBJ := $(OBJ)/faults/cli.o $(OBJ)/tests/faults/fault.o
UNIT_LDFLAGS := -Wl,--wrap=_cmocka_run_group_tests,--wrap=_skip -ldl
$(OBJ)/faults/daemon.o: $(DAEMON_LIB_OBJ)
$(OBJ)/faults/cli.o: $(CLI_LIB_OBJ)
$(OBJ)/faults/daemon.o $(OBJ)/faults/cli.o:
	$(Q)mkdir -p $(dir $@)
	@echo "  LD -r   $@"
	$(Q)$(LD) -r $(addprefix --wrap=,$(FAULT_WRAPPED)) -o $@ $^
else
UNIT_DAEMON_OBJ := $(DAEMON_LIB_OBJ)
UNIT_CLI_OBJ := $(CLI_LIB_OBJ)
UNIT_LDFLAGS :=
endif

$(BUILD)/tests/%: tests/unit/%.c $(UNIT_DAEMON_OBJ) $(TEST_LIB_OBJ) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(CC) $(CFLAGS_ALL) -Itests $(LDFLAGS_ALL) -o $@ $< $(UNIT_DAEMON_OBJ) $(TEST_LIB_OBJ) \
		$(LIBS) -lcmocka $(UNIT_LDFLAGS)

$(BUILD)/tests/test_cli_%: tests/unit/test_cli_%.c $(UNIT_CLI_OBJ) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(CC) $(CFLAGS_ALL) -Itests $(LDFLAGS_ALL) -o $@ $< $(UNIT_CLI_OBJ) $(LIBS) -lcmocka \
		$(UNIT_LDFLAGS)

test: all image $(UNIT_BIN)
	$(Q)tests/run.sh $(BUILD)

unit: all $(UNIT_BIN)
	$(Q)tests/run.sh --unit-only $(BUILD)

blackbox: all image
	$(Q)tests/run.sh --blackbox-only $(BUILD)

image: all
	$(Q)$(BUILD)/ephemerald image build

demo: all image
	$(Q)scripts/demo.sh $(BUILD)

# The benchmark driver: the sandbox API without the server (bench/bench_exec.c).
BENCH_BIN := $(BUILD)/bench/bench_exec
$(BENCH_BIN): bench/bench_exec.c $(DAEMON_LIB_OBJ) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  BENCH   $@"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -o $@ $< $(DAEMON_LIB_OBJ) $(LIBS)

# The broker's benchmark (bench/bench_broker.c): latency and tunnel throughput through the proxy.
BENCH_BROKER := $(BUILD)/bench/bench_broker
$(BENCH_BROKER): bench/bench_broker.c $(DAEMON_LIB_OBJ) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  BENCH   $@"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -o $@ $< $(DAEMON_LIB_OBJ) $(LIBS)

# The model client's benchmark (bench/bench_model.c): a call with the connection kept or new.
BENCH_MODEL := $(BUILD)/bench/bench_model
$(BENCH_MODEL): bench/bench_model.c $(DAEMON_LIB_OBJ) $(BUILD)/.flags
	$(Q)mkdir -p $(dir $@)
	@echo "  BENCH   $@"
	$(Q)$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -o $@ $< $(DAEMON_LIB_OBJ) $(LIBS)

bench: all image $(BENCH_BIN) $(BENCH_BROKER) $(BENCH_MODEL)
	$(Q)bench/run.sh $(BUILD)

lint: deps
	$(Q)scripts/lint.sh

format:
	$(Q)clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c' 'tests/*.h' 'bench/*.c')

# The whole-library drivers compile the seccomp filter's source: it includes the generated header.
fuzz: deps $(SECCOMP_BPF_H)
	$(Q)FUZZ_GEN_DIR=$(OBJ)/gen FUZZ_DAEMON_SRC="$(filter-out $(COMMON_SRC),$(DAEMON_LIB_SRC))" \
	    tests/fuzz/run.sh

clean:
	rm -rf $(BUILD)

# Installation (docs/DEPLOY.md). The programs in $(BINDIR); the guest agent and the gVisor shim
# beside each other in $(LIBEXECDIR), where ephemerald looks for them; the recorded examples the
# replay model answers from in $(DATADIR)/examples; the configuration, made from the example with
# those paths, in $(SYSCONFDIR)/ephemeral (an existing one is kept); the man pages and the systemd
# unit (ExecStart in $(BINDIR)); bash completion. DESTDIR stages everything under another root.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/lib/ephemeral
DATADIR ?= $(PREFIX)/share/ephemeral
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
COMPLETIONDIR ?= $(PREFIX)/share/bash-completion/completions
install: all
	$(Q)scripts/install.sh "$(BUILD)" "$(DESTDIR)" "$(BINDIR)" "$(LIBEXECDIR)" "$(DATADIR)" \
		"$(MANDIR)" "$(SYSCONFDIR)" "$(UNITDIR)" "$(COMPLETIONDIR)"

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# One short run against each real model provider whose key is in the environment
# (OPENAI_API_KEY, ANTHROPIC_API_KEY); skipped without keys. Not part of `make test`.
.PHONY: check-providers
check-providers: all
	$(Q)BUILD=$(BUILD) tests/providers/check_providers.sh

# Allocation-failure injection (tests/faults/, docs/HACKING.md): every unit test binary, built
# with the sanitizers and the injector, each test with its Nth call failed, N = 1, 2, ... until
# it completes. FAULTS_ONLY=PATTERN picks binaries.
faults: deps
	$(Q)$(MAKE) --no-print-directory BUILD=$(BUILD)/faults SANITIZE=address,undefined FAULTS=1 \
		unit-bins
	$(Q)tests/faults/run.sh $(BUILD)/faults $(FAULTS_ONLY)

unit-bins: $(UNIT_BIN)
