# confighash — run `make help` for the targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CACHE ?= $(or $(CONFIGHASH_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/confighash)
CLUSTER_DIR ?= $(CURDIR)/.cluster
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CACHE)/tools/staticcheck-$(STATICCHECK_VERSION)
GOVULNCHECK_VERSION := v1.9.0
GOVULNCHECK := $(CACHE)/tools/govulncheck-$(GOVULNCHECK_VERSION)
# The vulnerability database govulncheck reads: vuln.go.dev, or a local copy in the v1
# layout where that cannot be reached (GOVULNDB=file:///path/to/vulndb).
GOVULNDB ?= https://vuln.go.dev
GO_TEST_TIMEOUT ?= 60m
# Fuzz targets, as package:target:executions. make test runs each for its executions
# (about 10 s on 2 cores): a count, because a -fuzztime duration can end in a spurious
# "context deadline exceeded" before Go 1.27 (go.dev/issue/75804). make fuzz runs each
# for FUZZTIME.
FUZZ_TARGETS := .:FuzzParsePolicy:50000 .:FuzzParseRecord:100000 .:FuzzWorkloadFromJSON:80000 .:FuzzModel:4000 ./webhook:FuzzAdmissionHandler:12000
FUZZTIME ?= 2m

export CONFIGHASH_CACHE := $(CACHE)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/confighash
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/confighash ./cmd/confighash

.PHONY: image
image: ## build the image without a Docker engine (ko): bin/image/confighash.tar and its SBOM
	VERSION=$(VERSION) tests/image/build.sh bin/image

.PHONY: release
release: ## build release VERSION=vX.Y.Z into dist/VERSION: binaries and kubectl plugin for linux and darwin with their krew manifest, the image index for amd64 and arm64 with SBOMs, the chart, confighash.yaml, provenance, checksums, notes from CHANGELOG.md
	tests/release/release.sh "$(VERSION)"

.PHONY: docker-image
docker-image: ## build the same image from the Dockerfile, with a Docker engine
	docker build --build-arg VERSION=$(VERSION) -t ghcr.io/confighash/confighash:$(VERSION) .

.PHONY: control-plane
control-plane: ## build the local control plane's binaries once per machine (cached in $CONFIGHASH_CACHE)
	@tests/cluster/build-binaries.sh etcd kwok kubernetes >/dev/null

.PHONY: helm
helm: ## build helm once per machine, for the chart tests
	@tests/cluster/build-binaries.sh helm >/dev/null

.PHONY: prometheus
prometheus: ## build Prometheus once per machine, for the tests of the metric gate
	@tests/cluster/build-binaries.sh prometheus >/dev/null

.PHONY: node-packages
node-packages: ## install the real node's Debian packages (containerd, runc, CNI plugins), where root
	@tests/node/install.sh

.PHONY: test
test: control-plane helm prometheus node-packages ## unit and end-to-end tests against a real local control plane (and a real node where root on Linux), and a short fuzz run
	@echo "==> go test ./... (each package prints its result when it is done)"
	@# The real node after the rest: a second control plane and containerd beside the
	@# fault suite would slow what it times.
	go test -count=1 -timeout $(GO_TEST_TIMEOUT) $$(go list ./... | grep -v /tests/node)
	go test -count=1 -timeout $(GO_TEST_TIMEOUT) ./tests/node/...
	$(MAKE) --no-print-directory fuzz FUZZTIME=

.PHONY: test-faults
test-faults: control-plane ## the fault suite alone, with its figures: API server killed, watches expired, slow reads, components killed, key deleted (docs/reliability.md)
	go test -count=1 -v -timeout $(GO_TEST_TIMEOUT) -run '^TestFault' ./tests/cluster ./tests/e2e ./webhook 2>&1 | grep --line-buffered -E '^(=== RUN|--- |ok|FAIL|PASS)|_test.go:[0-9]+:'

.PHONY: test-node
test-node: control-plane helm prometheus node-packages ## the real node's suite alone: the image installed as docs/install.md says, on containerd and kubelet (root on Linux)
	go test -count=1 -v -timeout $(GO_TEST_TIMEOUT) ./tests/node/...

.PHONY: run-node
run-node: control-plane node-packages ## the demo on a real node (root on Linux): the image installed with cert-manager, a page going from v1 to v2, then to v3 restarted in place; Ctrl-C stops all
	@go build -o bin/confighash-run-node ./tests/node/run
	@exec bin/confighash-run-node

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 2m; empty: make test's executions)
	for t in $(FUZZ_TARGETS); do IFS=: read -r pkg name execs <<<"$$t"; go test -run '^$$' -fuzz "^$$name$$" -fuzztime "$(or $(FUZZTIME),$${execs}x)" "$$pkg"; done

.PHONY: bench
bench: control-plane ## every benchmark and scenario (about 25 minutes on 2 cores, and the churn scenario's 100,000 cycles about 1¾ hours more, at the 16 a second of its short run); writes docs/benchmarks.md and .json; SCENARIOS=a,b for some
	go run ./tests/bench/run -scenarios "$(SCENARIOS)"

.PHONY: test-unit
test-unit: ## unit tests only, no control plane
	go test -count=1 -short ./...

.PHONY: test-compat
test-compat: ## the test suite against the oldest supported control plane (Kubernetes 1.30)
	CONFIGHASH_KUBE_VERSION=v1.30.14 $(MAKE) test

.PHONY: lint
lint: $(STATICCHECK) $(GOVULNCHECK) ## gofmt, go vet, staticcheck, govulncheck (GOVULNDB), and a syntax check of the shell scripts
	@unformatted="$$(gofmt -l .)"; if [[ -n "$$unformatted" ]]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(STATICCHECK) ./...
	@# Source, not the binary: a stripped binary has no symbols to tell a reachable call.
	$(GOVULNCHECK) -db $(GOVULNDB) ./...
	for f in tests/cluster/*.sh tests/image/*.sh tests/node/*.sh tests/release/*.sh; do bash -n "$$f"; done

# go-install PACKAGE@VERSION TARGET: a tool built once per machine into the cache.
go-install = mkdir -p $(CACHE)/tools; \
	tmp="$$(mktemp -d $(CACHE)/tools/tmp.XXXXXX)"; \
	GOBIN="$$tmp" go install $(1); \
	mv "$$tmp"/* $(2); rmdir "$$tmp"

$(STATICCHECK):
	$(call go-install,honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION),$@)

$(GOVULNCHECK):
	$(call go-install,golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION),$@)

.PHONY: cluster-up
cluster-up: control-plane ## start a local control plane that stays up; prints the KUBECONFIG
	go run ./tests/cluster/localcluster up --dir $(CLUSTER_DIR)

.PHONY: cluster-down
cluster-down: ## stop the local control plane
	go run ./tests/cluster/localcluster down --dir $(CLUSTER_DIR)

.PHONY: run
run: ## the demo: local control plane, webhook, watcher, a ConfigMap change and its rollout; Ctrl-C stops all
	@echo "==> compiling bin/confighash and the demo"; start=$$SECONDS; \
	$(MAKE) --no-print-directory -s build; \
	go build -o bin/confighash-demo ./tests/demo; \
	s=$$((SECONDS - start)); printf '    compiled in %dm%02ds\n' $$((s / 60)) $$((s % 60))
	@tests/cluster/build-binaries.sh etcd kwok kubernetes >/dev/null
	@# exec: the demo alone receives Ctrl-C, stops what it started and exits 0, so make ends quietly.
	@exec bin/confighash-demo --binary bin/confighash
