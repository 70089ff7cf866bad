// Package modgraph holds no code: its test proves that a program importing
// only the core of stampede (the root package, guard, lock, guardhttp) does
// not inherit the dependencies of the adapters and suites that live in
// modules of their own (echo, gin, grpc, Toxiproxy, Prometheus,
// OpenTelemetry).
package modgraph
