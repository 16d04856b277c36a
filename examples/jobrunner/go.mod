module github.com/redquorum/redquorum/examples/jobrunner

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redquorum/redquorum v0.0.0
	github.com/redquorum/redquorum/locktest/linearize v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/redquorum/redquorum => ../..
	github.com/redquorum/redquorum/locktest/linearize => ../../locktest/linearize
)
