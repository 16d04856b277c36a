module github.com/redquorum/redquorum/locktest/linearize

go 1.26.0

require (
	github.com/redquorum/redquorum v0.0.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/redquorum/redquorum => ../..
