#!/usr/bin/env bash
# go mod tidy for cmd/redlock, a module of its own that requires the library
# by version. go mod tidy ignores go.work, so for the run the library is
# replaced by this checkout, and the replace is dropped after it:
# `go install .../cmd/redlock@<version>` refuses a go.mod with replace
# directives.
set -euo pipefail
cd "$(dirname "$0")/../cmd/redlock"
go mod edit -replace github.com/redquorum/redquorum=../..
trap 'go mod edit -dropreplace github.com/redquorum/redquorum' EXIT
GOWORK=off go mod tidy
