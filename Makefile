# redquorum: run `make demo` to see the lock at work, `make test` to run every test.
GO      ?= go
IMAGE   := redquorum/redis:7-local
COMPOSE := $(shell command -v docker-compose 2>/dev/null || echo "docker compose")

.PHONY: demo test gotests check lint unit oldest-go image up down bench vet fmt cover model

## demo: the oversell scenario on five embedded nodes (or NODES=host:port,...)
demo:
	cd $(CLIMOD) && $(GO) run . demo $(if $(NODES),--nodes $(NODES))

## CLIMOD: the nested module of the CLI, so that the library's module graph
## holds no embedded server (miniredis). Its go.work builds it against this
## checkout; scripts/tidy-cli.sh tidies it.
CLIMOD := cmd/redlock

## beside_cli runs the command $(1) ./... in the core module and in CLIMOD
## at once, as one go test ./... did when they were one module, and fails
## if either failed.
beside_cli = $(1) ./... & lib=$$!; (cd $(CLIMOD) && $(1) ./...); cli=$$?; wait $$lib && exit $$cli

## CONTRIB: the nested modules of the metrics and tracing adapters, tested and
## vetted with the core module.
CONTRIB := contrib/prometheus contrib/otel

## KIT: the nested modules of the test kit (locktest's porcupine check and
## Docker backend) and of the example that uses it as a user would, so that
## the core module depends on neither porcupine nor Docker's client.
KIT := locktest/linearize locktest/rig examples/jobrunner

## BENCHMOD: the nested module of the comparison with redsync; it has
## benchmarks only, so `make test` builds and vets it.
BENCHMOD := bench

## TESTMOD: the nested module of the integration, chaos and architecture tests
## and the Docker rig, so that the core module does not require Docker's client.
TESTMOD := test

## test: every test: unit, integration and chaos on real Redis in Docker (in
## TESTMOD), the adapters' tests in CONTRIB against redis-server, the test
## kit's modules in KIT, BENCHMOD built, and the model (make model). Builds
## the Redis image first (no registry needed). The model's searches run in
## the background at the lowest CPU priority while lint and the Go tests run
## (scripts/with-model.sh): those leave a core or more idle most of the time.
test: image
	./scripts/with-model.sh $(MAKE) oldest-go lint gotests

## gotests: the Go tests of make test. The chaos suite runs without -race
## (the race detector slows it below 10,000 acquisitions in its time budget)
## and from its own directory, so that `go test` prints its summary line
## (acquisitions, faults by kind, violations) even when it passes. The tests
## that count allocations run again without -race, which adds its own.
gotests:
	$(call beside_cli,$(GO) test -race -count=1 -timeout 9m)
	$(GO) test -count=1 -run 'TestLockUnlockAllocs|TestToken$$' ./redlock ./internal/protocol
	cd $(TESTMOD) && $(GO) test -race -count=1 -timeout 9m $$($(GO) list ./... | grep -v '/test/chaos$$')
	for m in $(CONTRIB) $(KIT); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done
	cd $(BENCHMOD) && $(GO) test -count=1 ./...
	cd $(TESTMOD)/chaos && $(GO) test -count=1 -timeout 12m

## model: the Promela models of the lock kernel (model/redlock.pml) and of
## the limit layer (model/layer.pml), every property and every negative
## control, checked with spin (installed from Debian when missing); see
## docs/SAFETY.md.
model:
	./scripts/ensure-deb.sh spin spin
	./model/check.sh

## check: the developer loop, a few minutes on two cores: lint, the unit
## tests, and the library's own tests on real redis-server processes
## (redlock, and CLIMOD's beside them), without the race detector, the
## model, Docker or the chaos suite, which make test adds.
check: lint
	./scripts/ensure-redis-server.sh
	$(call beside_cli,$(GO) test -count=1)

## lint: gofmt, go vet and staticcheck (STATICCHECK, installed by go
## install) on every module.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
MODULES := . $(CLIMOD) $(TESTMOD) $(BENCHMOD) $(CONTRIB) $(KIT)
lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above are not formatted (make fmt)"; exit 1; }
	$(GO) install $(STATICCHECK)
	for m in $(MODULES); do (cd $$m && $(GO) vet ./... && "$$($(GO) env GOPATH)/bin/staticcheck" ./...) || exit 1; done

## unit: the tests that need neither Docker nor a Redis server.
unit:
	$(GO) test -race -count=1 ./clock/... ./quorum/... ./internal/... ./redlock/...

## oldest-go: vet (the core module and TESTMOD) with the oldest Go that
## go.mod allows (its go directive, OLDEST_GO), which type-checks every
## package and its tests against that release's standard library; the
## tests themselves run once, with the current Go, below. The go command
## downloads that toolchain through the module proxy on the first run.
## When OLDEST_GO is a patch release of the current Go's minor release it
## is skipped: patch releases do not change the standard library's API, and
## the check costs a build of every dependency with the other toolchain
## (81 s of a clean-clone make test on 2 cores). OLDEST_GO_FORCE=1 runs it.
OLDEST_GO := go$(shell awk '$$1 == "go" { print $$2 }' go.mod)
oldest-go:
	@cur=$$($(GO) env GOVERSION); \
	if [ -z "$(OLDEST_GO_FORCE)" ] && [ "$$(echo $$cur | cut -d. -f1,2)" = "$$(echo $(OLDEST_GO) | cut -d. -f1,2)" ]; then \
		echo "oldest-go: $(OLDEST_GO) and $$cur are one minor release, with one API: skipped (OLDEST_GO_FORCE=1 runs it)"; \
	else \
		echo "GOTOOLCHAIN=$(OLDEST_GO) $(GO) vet ./... (and in $(TESTMOD))"; \
		GOTOOLCHAIN=$(OLDEST_GO) $(GO) vet ./... && (cd $(TESTMOD) && GOTOOLCHAIN=$(OLDEST_GO) $(GO) vet ./...); \
	fi

## image: build the Redis 7 image the tests use (REDIS_IMAGE_PULL=1 pulls redis:7 instead).
image:
	./scripts/redis-image.sh

## up / down: five independent masters on 127.0.0.1:7001..7005 for manual use.
up: image
	$(COMPOSE) up -d
down:
	$(COMPOSE) down

## bench: side-by-side benchmark with redsync (nested module bench/) on five
## native redis-server processes it starts itself; results in bench/results/.
bench:
	./scripts/ensure-redis-server.sh
	cd bench && $(GO) run . $(BENCHFLAGS)

## vet: the core module, CLIMOD, TESTMOD, BENCHMOD and the CONTRIB and KIT modules.
vet:
	$(GO) vet ./...
	for m in $(CLIMOD) $(TESTMOD) $(BENCHMOD) $(CONTRIB) $(KIT); do (cd $$m && $(GO) vet ./...) || exit 1; done
fmt:
	gofmt -l -w .
cover:
	$(GO) test -count=1 -coverprofile=cover.out ./... && $(GO) tool cover -func=cover.out | tail -1
