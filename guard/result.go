package guard

import (
	"context"
	"strconv"
	"time"
)

// LoadFunc loads the value of a key; ErrNotFound: it has none.
type LoadFunc func(ctx context.Context) ([]byte, error)

// Status says where a value came from.
type Status uint8

const (
	Hit      Status = iota + 1 // a fresh value, from Redis or the in-process tier
	Stale                      // a stale value, served while one node refreshes it
	Miss                       // no usable value: this call's flight loaded it
	Shared                     // loaded by another caller or another node
	Degraded                   // Redis unavailable: served by this node alone
	Passed                     // the key is marked pass: this call's own load (see Pass)
)

func (s Status) String() string {
	switch s {
	case Hit:
		return "hit"
	case Stale:
		return "stale"
	case Miss:
		return "miss"
	case Shared:
		return "shared"
	case Degraded:
		return "degraded"
	case Passed:
		return "passed"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Result is a value, where it came from and how old it is.
type Result struct {
	// Value is shared: never modify it (Fetch's values are the caller's).
	Value  []byte
	Status Status
	// Age is the time since the value was loaded.
	Age time.Duration
	// Fresh is how much longer the value is fresh, as read.
	Fresh time.Duration
	// Oversize: the value is over MaxValueBytes, not in Redis.
	Oversize bool
	// Capped: the key's tag was full (MaxTagKeys): this call's own load.
	Capped bool
}
