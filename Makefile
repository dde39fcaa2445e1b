# skiplock: make bench runs the main job, make test runs the tests.
GO ?= go
BIN := bin/skiplock

.PHONY: all setup build test bench lint clean

all: build

setup:
	@bash scripts/setup.sh

build:
	$(GO) build -o $(BIN) ./cmd/skiplock

test: setup
	$(GO) test -race -count=1 -timeout 25m ./...

# The seed's latency test, scaled down, on the embedded PostgreSQL.
bench: setup build
	$(BIN) local start
	$(BIN) migrate
	$(BIN) local status

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin
