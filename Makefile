# dra-exporter: the one entry point. `make help` lists the targets.
#
# Heavy builds (the Kubernetes control plane, Prometheus and promtool) are
# built from the Go module proxy at pinned versions into .cache/, keyed by
# version, and skipped when present.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO            ?= go
K8S_VERSION   := v1.37.2
PROM_VERSION  := v0.316.0
CACHE         := $(CURDIR)/.cache
CP_BIN        := $(CACHE)/controlplane/$(K8S_VERSION)/bin
TOOLS_BIN     := $(CACHE)/tools/$(PROM_VERSION)/bin
PROMTOOL      := $(TOOLS_BIN)/promtool
PROMETHEUS    := $(TOOLS_BIN)/prometheus
BIN           := $(CURDIR)/bin/dra-exporter
HELM_VERSION  := v4.3.2
HELM          := $(CACHE)/tools/helm-$(HELM_VERSION)/helm
KSM_VERSION   := v2.20.0
KSM           := $(CACHE)/tools/ksm-$(KSM_VERSION)/kube-state-metrics
# The real node (test/node): the kubelet is in the control-plane build;
# containerd and the DRA driver are built from their own modules, runc and
# the CNI plugins come from Debian's packages.
CONTAINERD_VERSION := v2.4.2
CONTAINERD_BIN     := $(CACHE)/containerd/$(CONTAINERD_VERSION)/bin
DRAEX_VERSION      := v0.4.0
DRA_DRIVER         := $(CACHE)/dra-example-driver/$(DRAEX_VERSION)/dra-example-kubeletplugin

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w \
	-X github.com/prometheus/common/version.Version=$(VERSION) \
	-X github.com/prometheus/common/version.Revision=$(REVISION) \
	-X github.com/prometheus/common/version.Branch=main

# The e2e tests find the binaries through these.
export DRA_E2E_CONTROLPLANE_BIN := $(CP_BIN)
export DRA_E2E_EXPORTER := $(BIN)
export DRA_PROMTOOL := $(PROMTOOL)
export DRA_PROMETHEUS := $(PROMETHEUS)
export DRA_HELM := $(HELM)
export DRA_E2E_CONTAINERD_BIN := $(CONTAINERD_BIN)
export DRA_E2E_DRA_DRIVER := $(DRA_DRIVER)
export DRA_E2E_IMAGE_DIR := $(CURDIR)/bin/image

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/dra-exporter.
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dra-exporter

IMAGE_DIR := $(CURDIR)/bin/image
IMAGE_REF ?= ghcr.io/dra-exporter/dra-exporter:$(VERSION)
AGENT_IMAGE_REF ?= ghcr.io/dra-exporter/dra-exporter-node-agent:$(VERSION)
# The node agent's image stands on Debian's own packages: the cgo binary needs glibc (libc6, which
# depends on libgcc-s1), fetched with apt-get download into a cache keyed by version and extracted
# with dpkg-deb. By default each at this host's apt candidate version (at least the glibc the binary
# was just built against); AGENT_DEBS pins them (e.g. libc6=2.36-9+deb12u14 libgcc-s1=12.2.0-14+deb12u1).
# AGENT_BASE=image.tar builds the agent on that image instead (the DCGM variant: NVIDIA's DCGM image,
# e.g. `crane pull nvcr.io/nvidia/cloud-native/dcgm:<tag> dcgm.tar`).
AGENT_DEBS ?=
DEB_CACHE ?= $(CACHE)/debian
AGENT_BASE ?=

.PHONY: image
image: ## Build the OCI images without Docker (go-containerregistry): the exporter (static) and the node agent (cgo, on Debian's libc6) in bin/image.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/dra-exporter ./cmd/dra-exporter
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/agent/dra-exporter ./cmd/dra-exporter
	@rm -rf $(IMAGE_DIR)/agent-rootfs $(IMAGE_DIR)/agent-packages; \
	if [ -z "$(AGENT_BASE)" ]; then \
		command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || { echo "make image: the agent's base needs apt-get and dpkg-deb (Debian), or AGENT_BASE=image.tar"; exit 2; }; \
		pkgs="$(AGENT_DEBS)"; \
		if [ -z "$$pkgs" ]; then for n in libc6 libgcc-s1; do \
			v=$$(apt-cache policy $$n | awk '/Candidate:/ {print $$2}'); \
			[ -n "$$v" ] && [ "$$v" != "(none)" ] || { echo "make image: apt knows no $$n (apt-get update)"; exit 2; }; \
			pkgs="$$pkgs $$n=$$v"; done; fi; \
		arch=$$(dpkg --print-architecture); mkdir -p $(DEB_CACHE) $(IMAGE_DIR)/agent-rootfs; \
		for p in $$pkgs; do \
			deb=$(DEB_CACHE)/$${p%%=*}_$$(echo "$${p#*=}" | sed 's/:/%3a/')_$$arch.deb; \
			[ -f "$$deb" ] || (cd $(DEB_CACHE) && apt-get download -q -o APT::Sandbox::User=root "$$p") || { echo "make image: apt-get download $$p failed (apt-get update; or AGENT_DEBS)"; exit 2; }; \
			dpkg-deb -x "$$deb" $(IMAGE_DIR)/agent-rootfs; \
		done; \
		find $(IMAGE_DIR)/agent-rootfs/usr/share/doc -name 'changelog*' -delete; \
		echo $$pkgs | tr ' ' ',' > $(IMAGE_DIR)/agent-packages; \
	fi
	cd tools/image && $(GO) run . -binary $(IMAGE_DIR)/dra-exporter -license $(CURDIR)/LICENSE -out $(IMAGE_DIR) -ref $(IMAGE_REF) \
		-version $(VERSION) -revision $(REVISION) \
		-agent-binary $(IMAGE_DIR)/agent/dra-exporter -agent-ref $(AGENT_IMAGE_REF) \
		$(if $(AGENT_BASE),-agent-base $(abspath $(AGENT_BASE)),-agent-rootfs $(IMAGE_DIR)/agent-rootfs -agent-packages "$$(cat $(IMAGE_DIR)/agent-packages)")

.PHONY: image-test
image-test: image ## Read both images back (entrypoint, user, labels) and run each binary inside with `version` (the agent's in a chroot of its root file system).
	cd tools/image && DRA_IMAGE_DIR=$(IMAGE_DIR) $(GO) test -count=1 ./...

.PHONY: controlplane
controlplane: $(CP_BIN)/.built ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager and the kubelet (cached).

K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean

$(CP_BIN)/.built: test/controlplane/go.mod test/controlplane/go.sum
	@echo "$$(date -u +%T) >> building the control plane $(K8S_VERSION) (cold: 9-20 min on 2 cores)"
	rm -rf $(CP_BIN).tmp && mkdir -p $(CP_BIN).tmp
	cd test/controlplane && time $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $(CP_BIN).tmp/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubelet ./etcd
	rm -rf $(CP_BIN) && mv $(CP_BIN).tmp $(CP_BIN) && touch $@

.PHONY: node-bins
node-bins: $(CONTAINERD_BIN)/.built $(DRA_DRIVER) ## Build containerd, ctr, the runc shim and dra-example-driver for the real node (cached).

$(CONTAINERD_BIN)/.built: tools/containerd/go.mod tools/containerd/go.sum
	@echo "$$(date -u +%T) >> building containerd $(CONTAINERD_VERSION) (cold: ~7 min)"
	rm -rf $(CONTAINERD_BIN).tmp && mkdir -p $(CONTAINERD_BIN).tmp
	cd tools/containerd && time CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -tags 'no_btrfs no_devmapper no_zfs no_aufs' \
		-o $(CONTAINERD_BIN).tmp/ github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
	rm -rf $(CONTAINERD_BIN) && mv $(CONTAINERD_BIN).tmp $(CONTAINERD_BIN) && touch $@

$(DRA_DRIVER): tools/draexample/go.mod tools/draexample/go.sum
	@echo "$$(date -u +%T) >> building dra-example-driver $(DRAEX_VERSION) (cold: ~8 min)"
	mkdir -p $(dir $@)
	cd tools/draexample && time $(GO) build -ldflags '-s -w' -o $@.tmp sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin
	mv $@.tmp $@

# runc and the CNI plugins are Debian's packages (runc 1.1.5, plugins 1.1.1
# on Debian 12): building runc needs cgo and libseccomp's headers, and the
# distribution's builds are what a node would run. iptables routes the
# `kubernetes` Service inside the node's network namespace.
NODE_PACKAGES := runc containernetworking-plugins iptables iproute2

.PHONY: node-packages
node-packages: ## Install runc, the CNI plugins, iptables and iproute2 from Debian (only those missing; needs root).
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" != 0 ]; then \
		echo ">> not root: cannot install $$missing; the real node's tests will say so, and the demo runs without it"; \
	elif [ -n "$$missing" ]; then \
		echo ">> installing $$missing (Debian packages)"; \
		apt-get install -y -qq --no-install-recommends $$missing >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }; \
	fi

# The tools that only the tests run, and no benchmark times (helm, krew, Argo Rollouts, Flagger, the
# registry, the older minors' control planes), are built without optimisation or inlining: a third
# less compile CPU on a cold machine (docs/testing.md "How long"), the same code. The control plane
# and kubelet of $(K8S_VERSION), Prometheus and promtool, containerd and the driver stay optimised:
# the benchmarks, the rules tests' evaluation and the real node's timing run on them.
HARNESS_GCFLAGS := -gcflags='all=-N -l'

.PHONY: tools
tools: $(TOOLS_BIN)/.built ## Build prometheus and promtool (cached).

# remove_all_sd (Prometheus' own build tag, plugins/plugin_*.go) leaves out the cloud service
# discoveries; file, http and kubernetes discovery stay. The tests scrape static targets.
$(TOOLS_BIN)/.built: tools/go.mod tools/go.sum
	@echo "$$(date -u +%T) >> building prometheus and promtool $(PROM_VERSION) (cold: 5-13 min)"
	rm -rf $(TOOLS_BIN).tmp && mkdir -p $(TOOLS_BIN).tmp
	cd tools && time $(GO) build -ldflags '-s -w' -tags remove_all_sd -o $(TOOLS_BIN).tmp/ \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
	rm -rf $(TOOLS_BIN) && mv $(TOOLS_BIN).tmp $(TOOLS_BIN) && touch $@

# The packages whose tests need a tool build (the control plane, Prometheus,
# promtool, helm); every other package's tests run beside those builds.
TOOL_PKGS := ./cmd/dra-exporter/ ./internal/objects/ ./rules/ ./deploy/helm/ ./bench/... ./test/e2e/

.PHONY: test
test: ## Run every test: lint, race, unit, golden, rules (promtool), e2e on a real control plane, a real node and Prometheus.
	@# Two lanes on the two cores (docs/testing.md "How long"): the build lane builds the tools one after
	@# another (each go build uses both cores), in the order the suites need them; the test lane runs lint,
	@# the race and unit tests and the images, then each suite as soon as its tools are built, so the suites'
	@# waiting (API servers, kubelets, Prometheus) overlaps the next build. The real node's suite runs last,
	@# beside no other suite: two control planes at once on two cores slow each other's timing.
	@# promtool check/test rules run inside go test ./rules/ (TestPromtool*), with DRA_PROMTOOL set above.
	$(MAKE) --no-print-directory -j2 test-suite-compat

# Every go command of make test builds with -trimpath, as make build, make image and the release do:
# one compiled copy of each package serves the binaries and the tests (a cold run compiles the
# exporter's dependencies once fewer). Test binaries link without DWARF (-w; a command's own -ldflags,
# as make build's and the release's, replace it): a third less link time, stack traces unchanged.
# GOGC=100: with GOGC unset, the compiler lets its heap grow to 128 MiB before its first collection
# (cmd/compile/internal/gc/main.go, base.AdjustStartingHeap); on this kind of VM every fresh page is a
# page fault of about 11 us, and a cold build spent a quarter of its CPU in the kernel. Set, the
# compiler collects at the usual 100%: 10% less CPU for a cold compile (docs/testing.md). It changes
# no output and no cache key.
TEST_GOFLAGS := GOFLAGS='-trimpath -ldflags=-w $(GOFLAGS)' GOGC=100

# The build lane: each step waits for the one before (a chain of phony targets; each recipe is a
# make of its own, -j1, so one go build runs at a time). The order is the suites' order of need.
.PHONY: test-build-exporter test-build-controlplane test-build-tools test-build-helm test-build-node-bins test-build-krew test-build-rollouts test-build-registry test-build-compat
# First, before the lanes split: the exporter and every package of the main module. The control
# plane and Prometheus share about 700 packages with it (client-go, apiserver, grpc, otel, x/net, at
# the versions TestSharedModuleVersions keeps equal), and two go builds compiling the same package at
# once both compile it; built first, the later builds find them in the Go cache.
test-build-exporter:
	@echo "$$(date -u +%T) >> building the exporter and the main module's packages"
	time $(TEST_GOFLAGS) $(GO) build ./...
test-build-controlplane: test-build-exporter
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 controlplane
test-build-tools: test-build-controlplane
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 tools
test-build-helm: test-build-tools
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 helm
test-build-node-bins: test-build-helm
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 node-bins
test-build-krew: test-build-node-bins
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 krew
test-build-rollouts: test-build-krew
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 rollouts
test-build-registry: test-build-rollouts
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 registry
# The oldest supported minor's control plane, last, at the lowest priority: it takes the cores the
# release's tests leave idle, then runs beside the real node's suite (about half a core), whose
# kubelet, containerd and driver keep their timing. (Built after the release's tests, at nice 10,
# the cold run of 9fa630f took 75:28, the suite 10:46 instead of 9:34 alone.)
test-build-compat: test-build-registry
	@$(TEST_GOFLAGS) nice -n 19 $(MAKE) --no-print-directory -j1 controlplane-compat K8S_COMPAT=$(COMPAT_OLDEST)

# The test lane: what needs no tool first (beside the control plane's build), then the suites.
.PHONY: test-units test-suite-tools test-suite-release test-suite-node
test-units: test-build-exporter
	@echo "$$(date -u +%T) >> the unit lane: build, lint, race, images, unit tests"
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 build node-packages lint test-race image-test
	time $(TEST_GOFLAGS) $(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e '/test/nodee2e$$' $(foreach p,$(TOOL_PKGS),-e '$(patsubst ./%/,/%$$,$(patsubst ./%/...,/%,$(p)))'))
# The packages whose tests need the control plane, Prometheus, promtool, helm (and, for the demo's
# real node, the node's programs).
test-suite-tools: test-units test-build-node-bins
	@echo "$$(date -u +%T) >> the tool packages' tests (e2e on the control plane, rules, chart, bench)"
	time $(TEST_GOFLAGS) $(GO) test -count=1 -timeout 40m $(TOOL_PKGS)
test-suite-release: test-suite-tools test-build-krew
	@echo "$$(date -u +%T) >> the release's tests (tools/release)"
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 release-test
test-suite-node: test-suite-release test-build-registry
	@echo "$$(date -u +%T) >> the real node's tests (test/nodee2e)"
	time $(TEST_GOFLAGS) $(GO) test -count=1 -timeout 20m ./test/nodee2e/
# The core e2e subset on the oldest supported minor (issue 41); the newest runs the whole e2e suite
# above (test-suite-tools), of which the subset is a part.
test-suite-compat: test-suite-node test-build-compat
	@$(TEST_GOFLAGS) $(MAKE) --no-print-directory -j1 test-compat-run K8S_COMPAT=$(COMPAT_OLDEST) COMPAT_WITH_NEWEST=

.PHONY: test-node
test-node: build controlplane tools helm node-bins rollouts node-packages image ## Run only the real node's tests (test/nodee2e: kubelet, containerd, dra-example-driver).
	$(GO) test -count=1 -timeout 20m -v ./test/nodee2e/

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (e2e, real-node and promtool tests skip when DRA_E2E_SKIP=1 and their programs are absent).
	DRA_E2E_SKIP=1 $(GO) test -count=1 ./...

# The packages where scrapes, informer handlers and GPU library calls run concurrently.
RACE_PKGS := ./collector/ ./internal/engine/ ./internal/index/ ./internal/allocator/ ./internal/kube/ ./internal/node/gpu/ ./internal/node/collector/

.PHONY: test-race
test-race: ## Run the concurrency-sensitive packages under the race detector.
	DRA_E2E_SKIP=1 $(GO) test -race -count=1 $(RACE_PKGS)

.PHONY: helm
helm: $(HELM) ## Build helm (cached); the chart tests find it through DRA_HELM.

$(HELM): tools/helm/go.mod tools/helm/go.sum
	@echo "$$(date -u +%T) >> building helm $(HELM_VERSION) (cold: ~4 min)"
	mkdir -p $(dir $@)
	cd tools/helm && time $(GO) build $(HARNESS_GCFLAGS) -ldflags '-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' \
		-o $@.tmp helm.sh/helm/v4/cmd/helm
	mv $@.tmp $@

CHART := deploy/helm/dra-exporter

.PHONY: chart-lint
chart-lint: $(HELM) ## helm lint the chart, and run its template tests (go test ./deploy/helm/).
	$(HELM) lint --strict $(CHART)
	$(GO) test -count=1 ./deploy/helm/

.PHONY: manifests
manifests: $(HELM) ## Render deploy/manifests and deploy/prometheus from the chart (default values), and docs/install.md's values table.
	$(GO) run ./deploy/helm/gen -helm $(HELM)

PINT_VERSION := v0.86.0
PINT := $(CACHE)/tools/pint-$(PINT_VERSION)/pint

$(PINT): tools/pint/go.mod tools/pint/go.sum
	@echo "$$(date -u +%T) >> building pint $(PINT_VERSION) (cold: ~5 min)"
	cd tools/pint && $(GO) build -o $@ github.com/cloudflare/pint/cmd/pint

.PHONY: pint
pint: $(PINT) ## Lint the rule bundle with pint (built once, cached).
	$(PINT) --no-color --offline --config rules/.pint.hcl lint rules/

.PHONY: rules-test
rules-test: tools ## Check and unit-test the rule bundle: promtool and its conventions (go test ./rules/); `make pint` lints it too.
	$(GO) test -count=1 ./rules/

.PHONY: bench
bench: ## Benchmark index build and scrape at 1k, 10k and 100k claims.
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -timeout 60m ./bench/

$(KSM): tools/ksm/go.mod tools/ksm/go.sum
	@echo "$$(date -u +%T) >> building kube-state-metrics $(KSM_VERSION) (cold: ~4 min)"
	cd tools/ksm && $(GO) build -o $@.tmp k8s.io/kube-state-metrics/v2
	mv $@.tmp $@

.PHONY: ksm
ksm: $(KSM) ## Build kube-state-metrics (cached), the neighbour bench-scale measures beside the exporter.

N ?= 10000
CHURN ?= 20
.PHONY: bench-scale
bench-scale: build controlplane $(KSM) ## Scale benchmark on a real etcd + kube-apiserver beside kube-state-metrics: make bench-scale N=100000 [CHURN=writes/s] (not part of make test).
	$(GO) run ./bench/scale -n $(N) -churn-rate $(CHURN) -controlplane-bin $(CP_BIN) -exporter $(BIN) -out bin/bench-scale \
		-compare-cmd '$(KSM) --kubeconfig={kubeconfig} --host=127.0.0.1 --port={port} --telemetry-host=127.0.0.1 --telemetry-port={telemetry_port} --resources=pods,nodes --enable-gzip-encoding'

DURATION ?= 30m
.PHONY: soak
soak: build controlplane ## Soak test: churn, API server and exporter restarts, etcd compactions for DURATION (default 30m), then a diff against a fresh exporter; report in bin/soak/ (not part of make test).
	DRA_SOAK_DURATION=$(DURATION) DRA_SOAK_OUT=$(CURDIR)/bin/soak $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./test/e2e/

.PHONY: fuzz
fuzz: ## Fuzz the index and classifier for 2 minutes.
	$(GO) test -run '^$$' -fuzz FuzzIndex -fuzztime 2m ./internal/classify/

.PHONY: docs
docs: ## Regenerate docs/metrics.md from the code.
	$(GO) run ./cmd/dra-exporter docs > docs/metrics.md

.PHONY: dashboards
dashboards: ## Regenerate the Grafana dashboards dashboards/*.json from the Go code in dashboards/.
	$(GO) run ./dashboards/gen -dir dashboards

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CACHE)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK): tools/staticcheck/go.mod tools/staticcheck/go.sum
	cd tools/staticcheck && time $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

.PHONY: lint
lint: $(STATICCHECK) actionlint ## gofmt, go vet, staticcheck (every module of the repository), actionlint (.github/workflows).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd test/controlplane && $(GO) vet ./... && $(STATICCHECK) ./...

.PHONY: demo
demo: build controlplane tools node-bins node-packages ## Start a local control plane with simulated GPU nodes and, where the machine allows, a real node; the exporter, node agents and Prometheus.
	$(GO) run ./test/demo

GPU_CHECK := $(CURDIR)/bin/gpu-check.sh

GPU_CHECK_FAKE_TOOLS := $(CURDIR)/bin/gpu-check-fake

.PHONY: gpu-check
gpu-check: build ## Prove the node agent on a GPU host in under 5 minutes: writes bin/gpu-check.sh (the script and the binary in one file, to copy to a GPU host) and runs it here; FAKE=fake.json runs it on a simulated node with fake nvidia-smi and gpu-burn.
	bash cmd/dra-exporter/gpu-check.sh --bundle $(BIN) $(GPU_CHECK)
ifneq ($(FAKE),)
	mkdir -p $(GPU_CHECK_FAKE_TOOLS)
	$(GO) build -o $(GPU_CHECK_FAKE_TOOLS)/nvidia-smi ./cmd/dra-exporter/testdata/fakenvidia
	ln -sf nvidia-smi $(GPU_CHECK_FAKE_TOOLS)/gpu-burn
	ln -sf nvidia-smi $(GPU_CHECK_FAKE_TOOLS)/nvidia-driver-proc
endif
	$(GPU_CHECK) $(if $(FAKE),--fake $(abspath $(FAKE)) --fake-tools $(GPU_CHECK_FAKE_TOOLS)) $(GPU_CHECK_ARGS)

# Argo Rollouts: the real controller runs deploy/rollouts/argo-analysistemplate.yaml against the
# real node (test/nodee2e/rollouts_test.go); its CRDs are read from the module's manifests/crds.
# The upstream go.mod asks for go 1.26.10: GOTOOLCHAIN=auto fetches that toolchain (a module of the
# proxy) when the installed go is older.
ARGO_ROLLOUTS_VERSION := v1.10.2
ARGO_ROLLOUTS := $(CACHE)/argo-rollouts/$(ARGO_ROLLOUTS_VERSION)/rollouts-controller
export DRA_ARGO_ROLLOUTS := $(ARGO_ROLLOUTS)

$(ARGO_ROLLOUTS): tools/argo-rollouts/go.mod tools/argo-rollouts/go.sum
	@echo "$$(date -u +%T) >> building rollouts-controller $(ARGO_ROLLOUTS_VERSION) (cold: see docs/testing.md)"
	mkdir -p $(dir $@)
	cd tools/argo-rollouts && GOTOOLCHAIN=auto $(GO) build $(HARNESS_GCFLAGS) -ldflags '-s -w' -o $@.tmp github.com/argoproj/argo-rollouts/cmd/rollouts-controller
	mv $@.tmp $@

.PHONY: argo-rollouts
argo-rollouts: $(ARGO_ROLLOUTS) ## Build the Argo Rollouts controller (cached) for the rollout test of the real node.

# Flagger: the real operator runs deploy/rollouts/flagger-metrictemplate.yaml with its kubernetes
# provider against the real node (test/nodee2e/flagger_test.go); its CRDs are read from the
# module's artifacts/flagger/crd.yaml.
FLAGGER_VERSION := v1.36.1
FLAGGER := $(CACHE)/flagger/$(FLAGGER_VERSION)/flagger
export DRA_FLAGGER := $(FLAGGER)

$(FLAGGER): tools/flagger/go.mod tools/flagger/go.sum
	@echo "$$(date -u +%T) >> building flagger $(FLAGGER_VERSION) (cold: see docs/testing.md)"
	mkdir -p $(dir $@)
	cd tools/flagger && $(GO) build $(HARNESS_GCFLAGS) -ldflags '-s -w' -o $@.tmp github.com/fluxcd/flagger/cmd/flagger
	mv $@.tmp $@

.PHONY: flagger
flagger: $(FLAGGER) ## Build Flagger (cached) for the rollout test of the real node.

# The rollout test (test/nodee2e/rollouts_test.go) runs inside the real node's network namespace,
# which has no network: the modules whose CRDs it applies must be in the module cache first.
PROM_OPERATOR_MODULE := github.com/prometheus-operator/prometheus-operator@v0.90.1

.PHONY: rollouts
rollouts: $(ARGO_ROLLOUTS) $(FLAGGER) ## Build Argo Rollouts and Flagger (cached) and fetch the CRDs the rollout test applies (prometheus-operator's).
	$(GO) mod download $(PROM_OPERATOR_MODULE)

.PHONY: clean
clean: ## Remove bin/ (the .cache/ builds stay; rm -rf .cache to rebuild them).
	rm -rf bin

# ---- Release (docs/install.md "Releases"; .github/workflows/release.yml runs these) ----

RELEASE_DIR = $(CURDIR)/bin/release/$(VERSION)
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := $(CACHE)/tools/actionlint-$(ACTIONLINT_VERSION)/actionlint
KREW_VERSION := v0.4.3
KREW_BIN := $(CACHE)/tools/krew-$(KREW_VERSION)

.PHONY: release
release: $(HELM) ## make release VERSION=vX.Y.Z: archives (linux, darwin; amd64, arm64), both images as multi-arch OCI indexes, the chart, the krew manifest and checksums in bin/release/VERSION, reproducibly, without Docker (Debian host).
	cd tools/release && $(GO) run . -version $(VERSION) -root $(CURDIR) -out $(RELEASE_DIR) -cache $(CACHE) -helm $(HELM)
	cd $(RELEASE_DIR) && sha256sum -c --quiet dra-exporter_$(VERSION)_checksums.txt

REGISTRY ?= ghcr.io/dra-exporter
.PHONY: push
push: $(HELM) ## make push VERSION=vX.Y.Z REGISTRY=host/namespace [INSECURE=1]: push what make release built: both images (multi-arch) and the chart (oci://REGISTRY/charts); REGISTRY_USER/REGISTRY_PASSWORD or the docker config log in.
	cd tools/release && $(GO) run . -push -version $(VERSION) -root $(CURDIR) -out $(RELEASE_DIR) -helm $(HELM) -registry $(REGISTRY) $(if $(INSECURE),-insecure)

.PHONY: release-test
release-test: $(HELM) $(KREW_BIN)/.built ## Build a release twice and compare the checksums, install its plugin with krew (tools/release).
	cd tools/release && DRA_RELEASE_CACHE=$(CACHE) DRA_KREW_BIN=$(KREW_BIN) $(GO) test -count=1 -timeout 40m ./...

$(KREW_BIN)/.built: tools/krew/go.mod tools/krew/go.sum
	@echo "$$(date -u +%T) >> building krew $(KREW_VERSION)"
	cd tools/krew && $(GO) build $(HARNESS_GCFLAGS) -o $(KREW_BIN)/ sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/cmd/validate-krew-manifest
	touch $@

.PHONY: krew
krew: $(KREW_BIN)/.built ## Build krew and validate-krew-manifest (cached): make release-test installs the release's plugin with them.

$(ACTIONLINT): tools/actionlint/go.mod tools/actionlint/go.sum
	cd tools/actionlint && $(GO) build -o $@ github.com/rhysd/actionlint/cmd/actionlint

.PHONY: actionlint
actionlint: $(ACTIONLINT) ## Check .github/workflows with actionlint (built once, cached).
	$(ACTIONLINT) -no-color

# ---- A real OCI registry (test/nodee2e registry_test.go: images and chart through a registry) ----

# The CNCF distribution project's registry, built from the Go module proxy at the version
# tools/registry's go.mod pins (a `tool` line). The real node's e2e runs it inside the node's
# network namespace, pushes the release to it with make push's code and installs the chart from it.
REGISTRY_VERSION := v3.1.2
REGISTRY_BIN := $(CACHE)/registry/$(REGISTRY_VERSION)/registry
export DRA_REGISTRY := $(REGISTRY_BIN)
export DRA_RELEASE_CACHE := $(CACHE)
export DRA_KREW_BIN := $(KREW_BIN)

$(REGISTRY_BIN): tools/registry/go.mod tools/registry/go.sum
	@echo "$$(date -u +%T) >> building the registry (distribution) $(REGISTRY_VERSION) (cold: see docs/testing.md)"
	mkdir -p $(dir $@)
	cd tools/registry && time $(GO) build $(HARNESS_GCFLAGS) -ldflags '-s -w -X github.com/distribution/distribution/v3/version.version=$(REGISTRY_VERSION)' \
		-o $@.tmp github.com/distribution/distribution/v3/cmd/registry
	mv $@.tmp $@

.PHONY: registry
registry: $(REGISTRY_BIN) ## Build the OCI registry (distribution, cached) that the real node's e2e pushes the release to and pulls from.

# TestRegistry (test/nodee2e) needs the registry and krew beside test-node's own prerequisites.
test-node: $(REGISTRY_BIN) $(KREW_BIN)/.built

# ---- Older Kubernetes minors (issue 41; docs/testing.md "Kubernetes versions") ----

# Each supported minor before $(K8S_VERSION) has a module of its own, test/controlplane/compat/v1.<minor>
# (its k8s.io/kubernetes release with the staging replaces, the etcd that release pins): its go.mod is
# the one place that names the release. Built: etcd, kube-apiserver, kube-scheduler and
# kube-controller-manager, no kubelet (the compatibility subset runs on simulated nodes).
COMPAT_VERSIONS := $(sort $(shell sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v1\.[0-9]*\.[0-9]*\).*|\1|p' test/controlplane/compat/*/go.mod))
# make controlplane-compat K8S_COMPAT=v1.34.5 builds one of them; the default, all.
K8S_COMPAT ?= $(COMPAT_VERSIONS)
COMPAT_OLDEST := $(firstword $(COMPAT_VERSIONS))
# make test-compat runs the subset on $(K8S_VERSION) too; make test does not (its e2e suite holds it).
COMPAT_WITH_NEWEST ?= $(K8S_VERSION)
compat_minor = $(word 2,$(subst ., ,$(1)))
compat_bin = $(CACHE)/controlplane/$(1)/bin

define COMPAT_BUILD
$(call compat_bin,$(1))/.built: test/controlplane/compat/v1.$(call compat_minor,$(1))/go.mod test/controlplane/compat/v1.$(call compat_minor,$(1))/go.sum
	@echo "$$$$(date -u +%T) >> building the control plane $(1) (cold: see docs/testing.md)"
	rm -rf $(call compat_bin,$(1)).tmp && mkdir -p $(call compat_bin,$(1)).tmp
	cd test/controlplane/compat/v1.$(call compat_minor,$(1)) && time $(GO) build $(HARNESS_GCFLAGS) -ldflags '-s -w \
		-X k8s.io/component-base/version.gitVersion=$(1) -X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=$(call compat_minor,$(1)) -X k8s.io/component-base/version.gitTreeState=clean' \
		-o $(call compat_bin,$(1)).tmp/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager ./etcd
	rm -rf $(call compat_bin,$(1)) && mv $(call compat_bin,$(1)).tmp $(call compat_bin,$(1)) && touch $$@
endef
$(foreach v,$(COMPAT_VERSIONS),$(eval $(call COMPAT_BUILD,$(v))))

.PHONY: controlplane-compat
controlplane-compat: ## Build the control planes of the older supported minors (cached; K8S_COMPAT=v1.34.5 picks one).
	@$(foreach v,$(K8S_COMPAT),$(if $(filter $(v),$(COMPAT_VERSIONS)),,echo "no module under test/controlplane/compat/ pins k8s.io/kubernetes $(v) (there: $(COMPAT_VERSIONS))"; exit 2;))
	@$(MAKE) --no-print-directory $(foreach v,$(K8S_COMPAT),$(call compat_bin,$(v))/.built)

# The core e2e subset: allocation (canary, shared claim), blocked reasons (capacity exhausted, class
# missing, negative control, prepare failed, not ready), leaks, release latency, the read-only contract
# and what the exporter says is served, rules loaded and alerts firing in a real Prometheus, the
# components' DRA series under the release's names. UPSTREAM_OUT=rules/testdata/upstream rewrites the
# series the rules' test replays (TestRulesOnRealUpstreamExpositions).
COMPAT_TESTS := ^(TestUpstreamMetricNames|TestCanaryFromTemplate|TestSharedNamedClaim|TestCapacityExhausted|TestMissingDeviceClass|TestNegativeControlSelector|TestNodePrepareFailed|TestRunningNotReady|TestReleaseCycles|TestLeaksClearWhenControllerReturns|TestExporterIsReadOnly|TestAlertsFireAndResolve)$$

.PHONY: test-compat test-compat-run
test-compat: build tools controlplane controlplane-compat ## Run the core e2e subset on a real control plane of every supported minor, oldest first (K8S_COMPAT picks the older ones; make test runs the oldest).
	@$(MAKE) --no-print-directory test-compat-run
test-compat-run:
	@failed=; for v in $(K8S_COMPAT) $(COMPAT_WITH_NEWEST); do \
		echo ">> the core e2e subset on Kubernetes $$v"; \
		start=$$(date +%s); \
		DRA_E2E_CONTROLPLANE_BIN=$(CACHE)/controlplane/$$v/bin $(if $(UPSTREAM_OUT),DRA_E2E_UPSTREAM_OUT=$(abspath $(UPSTREAM_OUT))) $(GO) test -count=1 -timeout 20m -run '$(COMPAT_TESTS)' -v ./test/e2e/ || failed="$$failed $$v"; \
		echo ">> Kubernetes $$v: the subset took $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo ">> the core e2e subset failed on:$$failed"; exit 1; fi
