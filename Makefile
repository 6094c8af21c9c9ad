# Anvil: bare-metal provisioning for Talos Linux.
#
#   make demo   the main job: the lab's machines PXE-boot, appear, are accepted and handed to Talos
#   make test   lint, the unit tests and the lab tests (installs what is missing first), then
#               a table of where the time went (_out/test-times.txt)
#   make unit   every package's fast tests, with the race detector
#   make lab    the lab tests alone
#   make e2e    the end-to-end flow on every machine kind (firmware, ports, DHCP mode)
#   make bench  the benchmarks, Anvil beside its peers
#   make chaos  the provider killed and the power cut at every step of real lab machines' lives
#   make fuzz   every fuzz target for FUZZTIME (2m) each, a table of executions and coverage
#
# Lab tests are the test files under the build tag "lab" (//go:build lab): they need root,
# QEMU, network namespaces, loop devices or Debian's daemons (make setup installs them).
# Their test functions are named TestLab... (the end-to-end flow's keep their names).

SHELL     := /bin/bash
GO        ?= go
OUT       := $(CURDIR)/_out
BIN       := $(OUT)/bin
TOOLS     := $(OUT)/tools
STATE_DIR ?= $(OUT)/state
ARGS      ?=

# Debian packages, by what needs them.
PKGS_BUILD := protobuf-compiler
PKGS_AGENT := linux-image-amd64
PKGS_TEST  := iproute2 ipxe dnsmasq-base util-linux qemu-system-x86 qemu-utils ipxe-qemu ovmf \
	syslinux syslinux-common mtools dosfstools systemd-boot-efi fdisk openipmi ipmitool nftables chromium fonts-liberation \
	atftp qemu-system-arm qemu-efi-aarch64 squashfs-tools swtpm swtpm-tools keepalived curl
PKGS_BENCH := kea-admin dnsmasq-base nginx-light wrk iproute2 util-linux atftpd
PKGS_IMAGE := ipxe ca-certificates

# Code generation plugins, at the versions of deps.md.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0

# golangci-lint, built from its module in hack/tools/golangci-lint (a tool there, apart from
# Anvil's go.mod). To move it: change the version here, then
#   go get -C hack/tools/golangci-lint -tool github.com/golangci/golangci-lint/v2/cmd/golangci-lint@<version>
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := $(TOOLS)/golangci-lint
GOLANGCI_LINT_MOD     := hack/tools/golangci-lint

COMMANDS := provider anvilctl

.PHONY: all release setup setup-bench tools build generate lint test unit lab lab-tools bench chaos fuzz run demo demo-omni e2e figures agent-initramfs agent-extension image omni talosctl talos-bins talos envtest-assets capi-tools clean agent-arm64

# Every binary built from a Go tools module (hack/tools/<module>, apart from Anvil's
# go.mod) goes through toolcache (hack/cmd/toolcache): a cache outside the clone,
# $ANVIL_CACHE_DIR, else $XDG_CACHE_HOME/anvil or ~/.cache/anvil, where each binary is
# kept under the SHA-256 of its tools module's files (go.mod, go.sum), go env (Go version,
# GOOS/GOARCH, CGO_ENABLED…), the package and the go build flags; the newest two keys per
# binary stay. A hit is a copy (a fresh clone of CI's on this machine links nothing
# again), a miss builds into the cache first. The targets below run it every time, so a
# binary in _out never outlives a change of its module. Each sets CGO_ENABLED=0 (static
# binaries, as their projects release them): a CGO_ENABLED in the caller's environment
# would otherwise make another key, and another build of minutes.
TOOLCACHE := $(TOOLS)/toolcache

$(TOOLCACHE): $(wildcard hack/cmd/toolcache/*.go hack/internal/toolcache/*.go)
	@mkdir -p $(TOOLS)
	@$(GO) build -o $@ ./hack/cmd/toolcache

all: build

setup:
	@hack/setup.sh $(PKGS_BUILD) $(PKGS_AGENT) $(PKGS_TEST)
	@# Seen here: dpkg lists ipxe-qemu while its ROMs are missing; put them back.
	@test -f /usr/lib/ipxe/qemu/efi-virtio.rom || apt-get install -y -qq --reinstall ipxe-qemu >/dev/null
	@hack/firmware.sh

setup-bench:
	@hack/setup.sh $(PKGS_BENCH)

tools: setup lint-tools
	@mkdir -p $(TOOLS)
	@test -x $(TOOLS)/protoc-gen-go || GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO)
	@test -x $(TOOLS)/protoc-gen-go-grpc || GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO_GRPC)

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/provider ./provider/cmd/provider
	$(GO) build -o $(BIN)/anvilctl ./provider/cmd/anvilctl
	$(GO) build -o $(BIN)/omni-adapter ./provider/cmd/omni-adapter
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/metal-agent ./agent/cmd/metal-agent

# The agent's boot assets: _out/agent/{vmlinuz,initramfs,cmdline}-amd64, from the agent,
# Debian's kernel and its modules, and the firmware tree.
agent-initramfs: setup build
	$(GO) run ./imager/cmd/imager --agent $(BIN)/metal-agent --out $(OUT)/agent --firmware-dir $(OUT)/firmware

# The agent as a Talos system extension (metal-agent): an OCI image layout in
# _out/agent-extension, its digest printed, the same on every rebuild of the same tree.
# PUSH=<registry/repo:tag> pushes it too (ANVIL_EXTENSION_INSECURE=true for plain HTTP).
agent-extension:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/metal-agent ./agent/cmd/metal-agent
	$(GO) run ./imager/cmd/imager extension --agent $(BIN)/metal-agent --extension-out $(OUT)/agent-extension \
		--extension-version $$(git describe --tags --always 2>/dev/null || echo dev) $(if $(PUSH),--extension-push $(PUSH))

# The provider as an OCI image, built with go-containerregistry (no Docker): the provider
# and its Omni adapter, static, the iPXE binaries of Debian's ipxe package, the agent's
# boot assets and Debian's CA bundle, run as uid 10000 (deploy/README.md). An OCI image
# layout in _out/image, its digest printed, the same on every rebuild of the same tree:
# every time in it is the last commit's ($SOURCE_DATE_EPOCH wins). PUSH=<registry/repo:tag>
# pushes it too (ANVIL_IMAGE_INSECURE=true for plain HTTP).
IMAGE_VERSION = $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

image: agent-initramfs
	@hack/setup.sh $(PKGS_IMAGE)
	@mkdir -p $(BIN)/image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w -X github.com/anvil-metal/anvil/provider/internal/service.Version=$(IMAGE_VERSION)" \
		-o $(BIN)/image/anvil-provider ./provider/cmd/provider
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w -X main.version=$(IMAGE_VERSION)" -o $(BIN)/image/omni-adapter ./provider/cmd/omni-adapter
	$(GO) run ./imager/cmd/imager image --provider-bin $(BIN)/image/anvil-provider --omni-adapter-bin $(BIN)/image/omni-adapter \
		--agent-assets $(OUT)/agent --image-out $(OUT)/image --image-version=$(IMAGE_VERSION) \
		--image-revision=$$(git rev-parse HEAD 2>/dev/null) --mtime=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}$(if $(PUSH), --image-push $(PUSH))

# The Cluster API provider's release (docs/capi.md): the manager's OCI image in
# _out/capi-image (go-containerregistry, as the provider's), and for clusterctl
# _out/infrastructure-components.yaml (CRDs, RBAC, the manager's Deployment naming the
# image CAPI_IMAGE_REPO:IMAGE_VERSION) and _out/metadata.yaml. PUSH=<ref> pushes the image.
CAPI_IMAGE_REPO ?= ghcr.io/anvil-metal/anvil-capi-manager

release:
	@mkdir -p $(BIN)/image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/image/capi-manager ./provider/cmd/capi-manager
	$(GO) run ./imager/cmd/imager capi-release --manager-bin $(BIN)/image/capi-manager --manifests deploy/capi \
		--release-out $(OUT) --image-out $(OUT)/capi-image --image-repository $(CAPI_IMAGE_REPO) \
		--image-version=$(IMAGE_VERSION) --image-revision=$$(git rev-parse HEAD 2>/dev/null) \
		--mtime=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}$(if $(PUSH), --image-push $(PUSH))

# Protobuf Go code from api/, the go:generate code (the resources' deep copies), and the
# Cluster API provider's Kubernetes code: its types' deep copies, CRDs (deploy/capi/crd)
# and RBAC (deploy/capi/rbac, from the controllers' markers).
generate: tools $(TOOLS)/deep-copy $(TOOLS)/controller-gen
	PATH="$(TOOLS):$$PATH" protoc -I api \
		--go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative \
		$$(find api -name '*.proto' -not -path 'api/infrastructure/*' | sort)
	PATH="$(TOOLS):$$PATH" $(GO) generate ./provider/...
	$(TOOLS)/controller-gen object paths=./api/infrastructure/...
	$(TOOLS)/controller-gen crd paths=./api/infrastructure/... output:crd:artifacts:config=deploy/capi/crd
	$(TOOLS)/controller-gen rbac:roleName=anvil-capi-manager paths=./provider/internal/capi/... output:rbac:artifacts:config=deploy/capi/rbac

# deep-copy, at the version its tools module pins (hack/tools/deep-copy), as Talos uses it.
.PHONY: $(TOOLS)/deep-copy $(TOOLS)/controller-gen
$(TOOLS)/deep-copy: $(TOOLCACHE)
	@$(TOOLCACHE) build --module hack/tools/deep-copy --env CGO_ENABLED=0 --pkg github.com/siderolabs/deep-copy --out $@

# controller-gen (CRDs, RBAC and deep copies of Kubernetes API types), at the version its
# tools module pins (hack/tools/controller-gen: controller-tools v0.21.0, the release on
# Kubernetes 1.36 libraries, as the main module's k8s.io/* v0.36). To move it:
#   go get -C hack/tools/controller-gen -tool sigs.k8s.io/controller-tools/cmd/controller-gen@<version>
$(TOOLS)/controller-gen: $(TOOLCACHE)
	@$(TOOLCACHE) build --module hack/tools/controller-gen --env CGO_ENABLED=0 --pkg sigs.k8s.io/controller-tools/cmd/controller-gen --out $@

# A real Omni for the lab and its tests (hack/internal/omnilab), and talosctl to check the
# agent's maintenance API against: each built from its Go module in a tools module, never
# in Anvil's go.mod (hack/tools/omni: omni and omnictl v1.9.3; hack/tools/talos: Talos
# v1.13.9, talosctl and the Talos binaries below), through toolcache. Long the first time
# on a machine (Omni ~10-15 min, talosctl ~8 min on 2 cores), a copy after.
OMNI_MOD  := hack/tools/omni
TALOS_MOD := hack/tools/talos

omni: $(BIN)/omni $(BIN)/omnictl

.PHONY: $(BIN)/omni $(BIN)/omnictl $(BIN)/talosctl
$(BIN)/omni $(BIN)/omnictl: $(BIN)/%: $(TOOLCACHE)
	@$(TOOLCACHE) build --module $(OMNI_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/omni/cmd/$* --out $@ -- -trimpath -ldflags='-s -w'

talosctl: $(BIN)/talosctl

$(BIN)/talosctl: $(TOOLCACHE)
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/talos/cmd/talosctl --out $@ \
		-- -trimpath -ldflags='-s -w'

# Talos' own binaries, from the same tools module and cache, into _out/talos/bin: machined
# and init, the installer, and containerd with its runc shim, built as Talos builds them
# (static; containerd without the CRI and the snapshotters Talos leaves out).
TALOS_BINS := $(OUT)/talos/bin

talos-bins: $(TOOLCACHE)
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/talos/internal/app/machined \
		--out $(TALOS_BINS)/machined -- -trimpath -ldflags='-s -w -X golang.zx2c4.com/wireguard/ipc.socketDirectory=/system/wireguard-sock'
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/talos/internal/app/init \
		--out $(TALOS_BINS)/init -- -trimpath -ldflags='-s -w'
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/talos/cmd/installer \
		--out $(TALOS_BINS)/installer -- -trimpath -ldflags='-s -w'
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/containerd/containerd/v2/cmd/containerd \
		--out $(TALOS_BINS)/containerd -- -trimpath -tags 'no_btrfs no_zfs no_cri no_devmapper'
	@$(TOOLCACHE) build --module $(TALOS_MOD) --env CGO_ENABLED=0 --pkg github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		--out $(TALOS_BINS)/containerd-shim-runc-v2 -- -trimpath

# Real Talos for the lab (imager talos, imager/README.md): Talos' binaries above, the
# preinit that loads what Talos' kernel has built in, and Debian's kernel and userland
# (hack/talos-debian.sh, unpacked under the cache), assembled into _out/talos/assets, a
# link into the cache ($(ANVIL_CACHE)/talos/assets/<key>): the key names every input (the
# imager itself, the binaries, the packages' versions), so a warm run builds nothing.
ANVIL_CACHE ?= $(or $(ANVIL_CACHE_DIR),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/anvil,$(HOME)/.cache/anvil))
TALOS_ASSETS := $(OUT)/talos/assets

talos: setup talos-bins
	@hack/talos-debian.sh $(ANVIL_CACHE)/talos/debian
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(OUT)/talos/bin/talos-preinit ./hack/cmd/talos-preinit
	@$(GO) build -o $(TOOLS)/imager ./imager/cmd/imager
	@$(TOOLS)/imager talos --talos-version $$($(GO) -C $(TALOS_MOD) list -m -f '{{.Version}}' github.com/siderolabs/talos) \
		--talos-bins $(TALOS_BINS) --talos-preinit $(OUT)/talos/bin/talos-preinit --talos-debian $(ANVIL_CACHE)/talos/debian \
		--talos-source $$($(GO) -C $(TALOS_MOD) list -m -f '{{.Dir}}' github.com/siderolabs/talos) \
		--machinery-source $$($(GO) -C $(TALOS_MOD) list -m -f '{{.Dir}}' github.com/siderolabs/talos/pkg/machinery) \
		--talos-cache $(ANVIL_CACHE)/talos/assets --talos-out $(TALOS_ASSETS) --mtime 0

# kube-apiserver and etcd for controller-runtime's envtest (the Cluster API tests), built
# from Go modules in their tools module (hack/tools/kube: k8s.io/kubernetes v1.36.3, its
# staging modules at v0.36.3, etcd v3.6.8), never in Anvil's go.mod: no prebuilt envtest
# binaries can be downloaded here; kube-apiserver is stamped with the module's version (its
# /version, else v0.0.0-master). Long the first time (~15 min on 2 cores), a copy after
# (toolcache). Tests find them with KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) (or
# BinaryAssetsDirectory).
KUBE_MOD       := hack/tools/kube
ENVTEST_ASSETS := $(TOOLS)/envtest

envtest-assets: $(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd

.PHONY: $(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd
$(ENVTEST_ASSETS)/kube-apiserver $(ENVTEST_ASSETS)/etcd: $(ENVTEST_ASSETS)/%: $(TOOLCACHE)
	@v=$$($(GO) -C $(KUBE_MOD) list -m -f '{{.Version}}' k8s.io/kubernetes) && \
		$(TOOLCACHE) build --module $(KUBE_MOD) --env CGO_ENABLED=0 --pkg ./cmd/$* --out $@ \
		-- -trimpath -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$$v"

# Cluster API's core manager and the Talos bootstrap provider (CABPT) for the Cluster API
# end-to-end test (hack/e2e/capi), each built from its Go module in a tools module of its
# own (hack/tools/cluster-api: sigs.k8s.io/cluster-api v1.14.0; hack/tools/cabpt: CABPT
# v0.6.11), never in Anvil's go.mod. ~6 min each the first time on two cores, a copy
# after (toolcache). The test builds them through make capi-tools when they are missing.
CAPI_MOD  := hack/tools/cluster-api
CABPT_MOD := hack/tools/cabpt

capi-tools: $(TOOLS)/capi-core-manager $(TOOLS)/cabpt-manager

.PHONY: $(TOOLS)/capi-core-manager $(TOOLS)/cabpt-manager
$(TOOLS)/capi-core-manager: $(TOOLCACHE)
	@v=$$($(GO) -C $(CAPI_MOD) list -m -f '{{.Version}}' sigs.k8s.io/cluster-api) && \
		$(TOOLCACHE) build --module $(CAPI_MOD) --env CGO_ENABLED=0 --pkg sigs.k8s.io/cluster-api/core --out $@ \
		-- -trimpath -ldflags="-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=$$v"

$(TOOLS)/cabpt-manager: $(TOOLCACHE)
	@$(TOOLCACHE) build --module $(CABPT_MOD) --env CGO_ENABLED=0 --pkg github.com/siderolabs/cluster-api-bootstrap-provider-talos \
		--out $@ -- -trimpath -ldflags="-s -w"

# What lint needs, nothing from apt: golangci-lint through toolcache, its version checked
# against the Makefile's once per version (the stamp names it).
.PHONY: lint-tools $(GOLANGCI_LINT)
lint-tools: $(GOLANGCI_LINT)

$(GOLANGCI_LINT): $(TOOLS)/golangci-lint.$(GOLANGCI_LINT_VERSION).stamp $(TOOLCACHE)
	@$(TOOLCACHE) build --module $(GOLANGCI_LINT_MOD) --env CGO_ENABLED=0 --pkg github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
		--out $@

$(TOOLS)/golangci-lint.$(GOLANGCI_LINT_VERSION).stamp:
	@v=$$($(GO) -C $(GOLANGCI_LINT_MOD) list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2); \
		if [ "$$v" != "$(GOLANGCI_LINT_VERSION)" ]; then \
		echo "$(GOLANGCI_LINT_MOD)/go.mod has golangci-lint $$v, the Makefile $(GOLANGCI_LINT_VERSION): run"; \
		echo "  go get -C $(GOLANGCI_LINT_MOD) -tool github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)"; \
		exit 1; fi
	@mkdir -p $(TOOLS)
	@rm -f $(TOOLS)/golangci-lint.*.stamp
	@touch $@

lint: lint-tools
	@bad=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
		if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags lab ./...
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags lab ./...

# The lab test files, their packages, and their test functions: the lab run runs those
# only, so that no unit test runs twice.
# The Cluster API end-to-end test (hack/e2e/capi) is make e2e's: Cluster API's manager and
# the Talos bootstrap provider it runs take ~15 min to build the first time; make lab runs
# the Cluster API scenarios on a real API server instead (provider/internal/capi/manager).
# So is the standalone flow on real Talos (hack/e2e/realtalos, ~25 min of TCG), and the
# agent as a Talos extension on real Talos (hack/e2e/agentmode, ~20 min).
LAB_FILES = $(shell grep -rl --include='*_test.go' '^//go:build lab' . | grep -v -e '^./_out/' -e '^./hack/e2e/capi/' -e '^./hack/e2e/realtalos/' -e '^./hack/e2e/agentmode/')
# The real-Talos Omni cluster (hack/e2e/omnicluster) runs alone, after the others (go
# test runs those two at a time): its two real Talos under TCG, beside another
# package's machines, were starved until the installed Talos' udevd missed its deadline
# and never counted its install (CI, 2026-12-06).
LAB_ALONE = ./hack/e2e/omnicluster/
LAB_PKGS  = $(filter-out $(LAB_ALONE),$(sort $(dir $(LAB_FILES))))
LAB_TESTS = $(shell sed -n 's/^func \(Test[A-Za-z0-9_]*\)([a-z]* \*testing\.T).*/\1/p' $(LAB_FILES) | sort -u | paste -sd'|')

# make test runs its phases one after another, as make would (stopping at the first that
# fails, unless make -k), stamping each one's start, end and exit status into
# _out/test-logs/phases; then, whether they passed or not, it prints the time table, each
# phase's wall time and go test's time per package of the unit and lab runs (from their
# output, which unit and lab tee into _out/test-logs/{unit,lab}.log), writes it to
# _out/test-times.txt as well, and exits with the failed phase's status.
TEST_PHASES := setup lint unit lab-tools lab
TEST_LOGS   := $(OUT)/test-logs
MODULE      := github.com/anvil-metal/anvil
KEEP_GOING   = $(findstring k,$(firstword -$(MAKEFLAGS)))

test:
	@mkdir -p $(TEST_LOGS) && rm -f $(TEST_LOGS)/phases $(TEST_LOGS)/unit.log $(TEST_LOGS)/lab.log
	@status=0; for phase in $(TEST_PHASES); do \
		start=$$(date +%s.%N); rc=0; \
		$(MAKE) --no-print-directory $$phase || rc=$$?; \
		echo "$$phase $$start $$(date +%s.%N) $$rc" >> $(TEST_LOGS)/phases; \
		if [ $$rc -ne 0 ]; then [ $$status -ne 0 ] || status=$$rc; [ -n "$(KEEP_GOING)" ] || break; fi; \
	done; \
	echo; $(GO) run ./hack/cmd/testtimes -phases $(TEST_LOGS)/phases -module $(MODULE) -out $(OUT)/test-times.txt \
		-run unit=$(TEST_LOGS)/unit.log -run lab=$(TEST_LOGS)/lab.log; \
	exit $$status

unit:
	@mkdir -p $(TEST_LOGS)
	set -o pipefail; $(GO) test -race -count=1 -timeout 15m ./... 2>&1 | tee $(TEST_LOGS)/unit.log

# What the lab tests run beside the lab: Omni, omnictl, talosctl, kube-apiserver and etcd,
# and real Talos (make talos).
lab-tools: omni talosctl envtest-assets talos

# Each run's bound: the other packages beside each other (~25 min), then
# hack/e2e/omnicluster alone (its adoption test, then the real-Talos cluster: two
# machines installing under TCG, ~30 min). Both run whether or not the first passed.
lab: setup lab-tools
	@mkdir -p $(TEST_LOGS)
	set -o pipefail; { rc=0; \
		$(GO) test -tags lab -count=1 -timeout 45m -run '^($(LAB_TESTS))$$' $(LAB_PKGS) 2>&1 || rc=$$?; \
		$(GO) test -tags lab -count=1 -timeout 60m -run '^($(LAB_TESTS))$$' $(LAB_ALONE) 2>&1 || rc=$$?; \
		exit $$rc; } | tee $(TEST_LOGS)/lab.log

# Every benchmark (bench/README.md), or those named: make bench BENCH="storm tftp".
BENCH ?= all

bench: setup-bench
	@for b in $(BENCH); do bench/run.sh $$b || exit 1; done

# The whole chaos grid on lab VMs (~30 min): for SIGKILL of the provider and for a power
# cut, one machine walks every step of its life with the fault at each (hack/e2e/chaos).
# make test runs the grid on simulated agents and three of these cases on one VM.
# Then the site of three replicas under faults (~40 min, hack/e2e/ha): takeover times,
# a leader or follower cut off from etcd, etcd's own faults, a deallocated machine
# rebooted beside a cut-off replica, each firmware through three ProxyDHCP offers, the
# leader killed mid-kexec; figures in _out/ha-chaos.txt. Both run whether or not the first passed.
chaos: setup agent-initramfs envtest-assets
	rc=0; \
	ANVIL_CHAOS_FULL=1 $(GO) test -tags lab -count=1 -timeout 90m -run '^TestChaosVMGrid$$' -v ./hack/e2e/chaos || rc=$$?; \
	ANVIL_CHAOS_FULL=1 $(GO) test -tags lab -count=1 -timeout 90m -run '^TestSiteChaos$$' -v ./hack/e2e/ha || rc=$$?; \
	exit $$rc

# Every fuzz target for FUZZTIME each, one after another; the seeds (testdata/fuzz) run in
# make unit as ordinary tests.
FUZZTIME ?= 2m

fuzz:
	$(GO) run ./hack/cmd/fuzz -fuzztime $(FUZZTIME)

# The main job until the lab exists: the provider on this host, state under _out/, with
# the agent's boot assets.
run: agent-initramfs
	$(BIN)/provider --state-dir $(STATE_DIR) --agent-assets-dir $(OUT)/agent $(ARGS)

# The end-to-end flow (hack/e2e) on every machine kind, a lab of its own each: the three
# firmware paths beside a site DHCP server (the run make test has too), then UEFI HTTP
# boot and a two-port machine booting from its second port beside it, then all four
# firmware kinds on a site without a DHCP server (the provider's full DHCP mode), then the
# UEFI kinds on an IPv6-only network (the provider's DHCPv6).
# Then an arm64 machine (AAVMF's HTTP boot of the UKI Anvil builds for it), alone: TCG
# emulating arm64 is slow. Timings in _out/e2e/report.txt, the last run's. Then the
# standalone flow on real Talos (make talos), by kexec and through the firmware
# (hack/e2e/realtalos; _out/e2e/real-talos-report.txt), and the agent as a Talos
# extension: a machine booting real Talos in agent mode (--agent-talos-version, make
# agent-extension's image) registers, is wiped and installed, beside Anvil's own agent
# initramfs for the boot time (hack/e2e/agentmode; _out/e2e/agent-mode-report.txt). Last, the Cluster API provider
# with Cluster API's own manager and the Talos bootstrap provider, on real Talos too
# (hack/e2e/capi, docs/capi.md).
E2E_MATRIX := \
	ANVIL_E2E_FIRMWARE=bios,uefi,uefi-pxe \
	ANVIL_E2E_FIRMWARE=uefi-http,bios+ANVIL_E2E_NICS=1,2 \
	ANVIL_E2E_FIRMWARE=bios,uefi,uefi-pxe,uefi-http+ANVIL_E2E_FULL_DHCP=1 \
	ANVIL_E2E_FIRMWARE=uefi,uefi-pxe,uefi-http+ANVIL_E2E_IPV6=1 \
	ANVIL_E2E_FIRMWARE=arm64

e2e: setup agent-initramfs agent-arm64 agent-extension envtest-assets capi-tools talos talosctl
	@for run in $(E2E_MATRIX); do \
		echo "== e2e: $$run"; \
		env $$(echo $$run | tr '+' ' ') $(GO) test -tags lab -count=1 -timeout 25m -run '^TestE2E$$' -v ./hack/e2e || exit 1; \
	done
	@echo "== e2e: real Talos, standalone (a BIOS machine by kexec, one through its firmware)"
	$(GO) test -tags lab -count=1 -timeout 90m -run '^TestE2ERealTalos$$' -v ./hack/e2e/realtalos
	@echo "== e2e: the agent as a Talos extension (a BIOS machine in agent-mode Talos, then Anvil's initramfs agent)"
	$(GO) test -tags lab -count=1 -timeout 60m -run '^TestE2EAgentModeTalos$$' -v ./hack/e2e/agentmode
	@echo "== e2e: Cluster API (a MachineDeployment of one on a BIOS machine, real Talos)"
	$(GO) test -tags lab -count=1 -timeout 60m -run '^TestE2EClusterAPI$$' -v ./hack/e2e/capi

# The e2e three times, each stage's median in _out/e2e/report.txt (~12 min); then the
# kexec handoff against the firmware path, per firmware kind, in _out/e2e/kexec.txt (~6 min).
figures: setup agent-initramfs
	ANVIL_E2E_RUNS=3 $(GO) test -tags lab -count=1 -timeout 60m -run '^TestE2E$$' -v ./hack/e2e
	$(GO) test -tags lab -count=1 -timeout 30m -run '^TestKexecHandoffE2E$$' -v ./hack/e2e/kexec

# The lab with three machines, shown live; it keeps running (go run ./hack/cmd/lab down).
demo: setup agent-initramfs
	$(GO) run ./hack/cmd/demo

# The same story beside a real Omni (built from its module): Omni accepts the machines and
# makes a cluster of one; Anvil wipes, powers and boots them. It keeps running.
demo-omni: setup agent-initramfs build omni
	$(GO) run ./hack/cmd/demo --omni

clean:
	rm -rf $(OUT)

# The agent's arm64 boot assets, built on this x86-64 host beside the amd64 ones in
# _out/agent: vmlinuz-arm64, initramfs-arm64.zst, cmdline-arm64 and agent-arm64.efi (a
# Unified Kernel Image that arm64 UEFI HTTP boot starts). hack/arm64-assets.sh fetches
# Debian's arm64 kernel and systemd-boot stub into _out/arm64 (not installed).
agent-arm64:
	@hack/arm64-assets.sh $(OUT)/arm64
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/metal-agent-arm64 ./agent/cmd/metal-agent
	$(GO) run ./imager/cmd/imager --arch arm64 --agent $(BIN)/metal-agent-arm64 --out $(OUT)/agent --firmware-dir $(OUT)/firmware \
		--kernel-root $(OUT)/arm64/root --uki-stub $(OUT)/arm64/root/usr/lib/systemd/boot/efi/linuxaa64.efi.stub
