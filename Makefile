# baremetal-ccm. `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

BIN        ?= bin
COMMIT     ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
VERSION    ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-dev-$(COMMIT))
# The upstream CCM framework reports the Kubernetes library version it is built from
# (component-base requires a vX.Y.Z string); ours is in --version and baremetal_ccm_build_info.
K8S_VERSION := $(shell go list -m -f '{{.Version}}' k8s.io/cloud-provider 2>/dev/null | sed 's/^v0\./v1./')
PKG        := github.com/baremetal-ccm/baremetal-ccm
LDFLAGS    := -s -w -X $(PKG)/pkg/version.Version=$(VERSION) -X $(PKG)/pkg/version.Commit=$(COMMIT) \
              -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION)
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The CCM image (make image): its reference and the OCI archive it is written to.
IMAGE      ?= localhost/baremetal-ccm/baremetal-cloud-controller-manager:$(VERSION)
IMAGE_OUT  ?= dist/baremetal-cloud-controller-manager-image.tar
E2E_TIMEOUT ?= 60m

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the CCM and baremetal-ccmctl into bin/ (CGO_ENABLED=0, version stamped).
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/baremetal-cloud-controller-manager ./cmd/baremetal-cloud-controller-manager
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/baremetal-ccmctl ./cmd/baremetal-ccmctl

.PHONY: deps
deps: ## Install test dependencies (Debian packages as root; kube-apiserver and Helm built into ~/.cache/baremetal-ccm).
	hack/deps.sh

.PHONY: test
test: unit fuzz system e2e ## Run all tests: unit, fuzzing (fixed budget), systemd unit checks, packages, then the e2e suite against a real kube-apiserver.

.PHONY: system
system: deps ## Check the systemd unit (systemd-analyze verify and security score) and the deb/rpm packages.
	go test -tags systemd -count=1 -v ./test/systemd/
	go test -tags packaging -count=1 -timeout 30m -v ./test/packaging/

.PHONY: packages
packages: ## Build the deb and rpm packages into dist/ (nfpm from the Go module proxy).
	hack/packages.sh

.PHONY: unit
unit: ## Run the unit tests with the race detector (Redfish emulator and ipmi_sim BMCs on loopback).
	hack/deps.sh --packages-only
	go test -race -count=1 ./...

# Fuzzing budget per target; FuzzSpeakerReceive runs a real session per input and gets more.
FUZZTIME ?= 30s
FUZZTIME_SESSION ?= 60s

.PHONY: fuzz
fuzz: ## Fuzz what routers send, with a fixed budget: the BGP relay's decoders, a speaker over a real session, BFD.
	go test -run '^$$' -fuzz '^FuzzRouterBytes$$' -fuzztime $(FUZZTIME) ./pkg/bgp/wire/
	go test -run '^$$' -fuzz '^FuzzSpeakerUpdates$$' -fuzztime $(FUZZTIME) ./pkg/bgp/wire/
	go test -run '^$$' -fuzz '^FuzzSpeakerReceive$$' -fuzztime $(FUZZTIME_SESSION) ./pkg/bgp/
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./pkg/bfd/
	go test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime $(FUZZTIME) ./pkg/bfd/

.PHONY: image
image: ## Build the CCM image without Docker into dist/ (an OCI archive for ctr, podman or docker load), reproducibly.
	IMAGE='$(IMAGE)' IMAGE_OUT='$(IMAGE_OUT)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' hack/image.sh

.PHONY: e2e
e2e: deps image ## Run the e2e suite: real etcd + kube-apiserver, the CCM as a process and in real kubelets (the image).
	BAREMETAL_CCM_IMAGE='$(abspath $(IMAGE_OUT))' go test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

.PHONY: e2e-kubelet
e2e-kubelet: deps image ## Run only the real-kubelet e2e tests: the image as a static pod and a Deployment (root).
	BAREMETAL_CCM_IMAGE='$(abspath $(IMAGE_OUT))' go test -tags e2e -count=1 -timeout 20m -run '^TestKubelet' -v ./test/e2e/

.PHONY: generate
generate: ## Regenerate from the API types in pkg/apis: deepcopy, clients (code-generator) and CRDs (controller-gen).
	hack/generate.sh

.PHONY: lint
lint: ## go vet, staticcheck and gofmt (also on the test tags); generated code up to date; the Helm chart: helm lint, and helm template equal to the ctl's manifests (Helm 4 and 3, built from the Go module proxy).
	go vet ./...
	go vet -tags e2e,systemd,packaging,helm ./test/...
	@# Generated clients keep client-go's deprecated fields for older servers: not checked.
	go run $(STATICCHECK) $$(go list ./... | grep -v /pkg/generated/)
	hack/generate.sh --verify
	go run $(STATICCHECK) -tags e2e,systemd,packaging,helm ./test/...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	hack/build-helm.sh >/dev/null
	go test -tags helm -count=1 ./test/helm/

.PHONY: bench
bench: deps ## Run the benchmarks: inventory, IPAM, BGP, routes (root), 1000 Nodes, 200 BMCs, 1000 LoadBalancer Services.
	go test -run '^$$' -bench . -benchmem ./pkg/...
	go test -tags e2e -count=1 -timeout 30m -run '^$$' -bench . -benchtime 1x -v ./test/e2e/...

.PHONY: demo
demo: ## A local kube-apiserver, a Redfish BMC emulator and a BIRD router: Nodes initialized, a host powered off, LoadBalancer IPs and pod-CIDR routes in the router. Prints its time (deps, build and demo).
	@started=$$(date +%s); hack/deps.sh --demo && $(MAKE) --no-print-directory build && DEMO_STARTED=$$started hack/demo.sh

.PHONY: clean
clean: ## Remove build output.
	rm -rf $(BIN) dist
