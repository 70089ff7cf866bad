module github.com/stampede-go/stampede/cmd/stampede

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stampede-go/stampede v0.1.0
	github.com/stampede-go/stampede/contrib/prometheus v0.1.0
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// This repository's own builds and tests use the checkout of the modules
// below; a program that depends on this module ignores replace
// directives and gets the required releases (see release/README.md).
replace (
	github.com/stampede-go/stampede => ../..
	github.com/stampede-go/stampede/contrib/prometheus => ../../contrib/prometheus
)
