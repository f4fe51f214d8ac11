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

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/dra-exporter.
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/dra-exporter

IMAGE_DIR := $(CURDIR)/bin/image
IMAGE_REF ?= ghcr.io/dra-exporter/dra-exporter:$(VERSION)

.PHONY: image
image: ## Build the cluster exporter's OCI image without Docker (go-containerregistry): bin/image/oci and bin/image/dra-exporter.tar.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/dra-exporter ./cmd/dra-exporter
	cd tools/image && $(GO) run . -binary $(IMAGE_DIR)/dra-exporter -out $(IMAGE_DIR) -ref $(IMAGE_REF) \
		-version $(VERSION) -revision $(REVISION)

.PHONY: image-test
image-test: image ## Read the image back (entrypoint, user, labels) and run the binary inside with `version`.
	cd tools/image && DRA_IMAGE_DIR=$(IMAGE_DIR) $(GO) test -count=1 ./...

.PHONY: controlplane
controlplane: $(CP_BIN)/.built ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager (cached).

K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean

$(CP_BIN)/.built: test/controlplane/go.mod test/controlplane/go.sum
	@echo ">> building the control plane $(K8S_VERSION) (cold: 9-20 min on 2 cores)"
	rm -rf $(CP_BIN).tmp && mkdir -p $(CP_BIN).tmp
	cd test/controlplane && $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $(CP_BIN).tmp/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-controller-manager ./etcd
	rm -rf $(CP_BIN) && mv $(CP_BIN).tmp $(CP_BIN) && touch $@

.PHONY: tools
tools: $(TOOLS_BIN)/.built ## Build prometheus and promtool (cached).

$(TOOLS_BIN)/.built: tools/go.mod tools/go.sum
	@echo ">> building prometheus and promtool $(PROM_VERSION) (cold: 5-13 min)"
	rm -rf $(TOOLS_BIN).tmp && mkdir -p $(TOOLS_BIN).tmp
	cd tools && $(GO) build -ldflags '-s -w' -o $(TOOLS_BIN).tmp/ \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
	rm -rf $(TOOLS_BIN) && mv $(TOOLS_BIN).tmp $(TOOLS_BIN) && touch $@

.PHONY: test
test: build controlplane tools helm lint test-race image-test ## Run every test: lint, race, unit, golden, rules (promtool), e2e on a real control plane and Prometheus.
	@# promtool check/test rules run inside go test ./rules/ (TestPromtool*), with DRA_PROMTOOL set above.
	$(GO) test -count=1 -timeout 40m ./...

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (e2e and promtool tests skip when DRA_E2E_SKIP=1).
	DRA_E2E_SKIP=1 $(GO) test -count=1 ./...

# The packages where scrapes and informer handlers run concurrently.
RACE_PKGS := ./collector/ ./internal/index/ ./internal/kube/

.PHONY: test-race
test-race: ## Run the concurrency-sensitive packages under the race detector.
	DRA_E2E_SKIP=1 $(GO) test -race -count=1 $(RACE_PKGS)

.PHONY: helm
helm: $(HELM) ## Build helm (cached); the chart tests find it through DRA_HELM.

$(HELM): tools/helm/go.mod tools/helm/go.sum
	@echo ">> building helm $(HELM_VERSION) (cold: ~4 min)"
	mkdir -p $(dir $@)
	cd tools/helm && $(GO) build -ldflags '-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' \
		-o $@.tmp helm.sh/helm/v4/cmd/helm
	mv $@.tmp $@

CHART := deploy/helm/dra-exporter

.PHONY: chart-lint
chart-lint: $(HELM) ## helm lint the chart, and run its template tests (go test ./deploy/helm/).
	$(HELM) lint --strict $(CHART)
	$(GO) test -count=1 ./deploy/helm/

.PHONY: manifests
manifests: $(HELM) ## Render deploy/manifests and deploy/prometheus from the chart (default values), and README's values table.
	$(GO) run ./deploy/helm/gen -helm $(HELM)

PINT_VERSION := v0.86.0
PINT := $(CACHE)/tools/pint-$(PINT_VERSION)/pint

$(PINT): tools/pint/go.mod tools/pint/go.sum
	@echo ">> building pint $(PINT_VERSION) (cold: ~5 min)"
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
	@echo ">> building kube-state-metrics $(KSM_VERSION) (cold: ~4 min)"
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
	cd tools/staticcheck && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet, staticcheck (every module of the repository).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd test/controlplane && $(GO) vet ./... && $(STATICCHECK) ./...

.PHONY: demo
demo: build controlplane tools ## Start a local control plane with simulated GPU nodes, the exporter and Prometheus.
	$(GO) run ./test/demo

.PHONY: gpu-check
gpu-check: build ## On a host with an NVIDIA GPU and libdcgm: run the node agent with the real DCGM and print its series (under 5 min).
	@test -n "$${NODE_NAME:-}" || (echo "set NODE_NAME (and KUBECONFIG) to the node this host is"; exit 2)
	@rm -f bin/gpu-check.log; $(BIN) node --node-name=$$NODE_NAME --gpu.source=dcgm \
		--web.listen-address=127.0.0.1:19878 --log.level=debug > bin/gpu-check.log 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null' EXIT; \
	for i in $$(seq 1 60); do curl -sf http://127.0.0.1:19878/readyz >/dev/null && break; sleep 1; done; \
	sleep 5; curl -sf http://127.0.0.1:19878/metrics | grep -E '^dra_(gpu|node)_' || (cat bin/gpu-check.log; exit 1); \
	curl -sf http://127.0.0.1:19878/metrics | grep -q '^dra_gpu_source_up{source="dcgm"} 1' || \
		(echo ">> DCGM is not up; the agent's log:"; cat bin/gpu-check.log; exit 1)

.PHONY: clean
clean: ## Remove bin/ (the .cache/ builds stay; rm -rf .cache to rebuild them).
	rm -rf bin
