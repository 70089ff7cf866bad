package guard

import (
	"context"
	"strconv"
	"time"
)

// LoadFunc loads the value of a key from the origin. It returns ErrNotFound
// (possibly wrapped) when the key has no value.
type LoadFunc func(ctx context.Context) ([]byte, error)

// Status says where a value came from.
type Status uint8

const (
	// Hit: a fresh value, from Redis or from the in-process tier.
	Hit Status = iota + 1
	// Stale: a value past its fresh time, served while one node refreshes it
	// (or while refreshes fail and back off).
	Stale
	// Miss: there was no usable value and this caller's flight loaded it.
	Miss
	// Shared: the value was loaded by someone else: another caller of this
	// process (singleflight) or another node (woken by its fill).
	Shared
	// Degraded: Redis was unavailable; the value was loaded through this
	// process's singleflight alone.
	Degraded
	// Passed: the key is marked pass (a load answered Pass lately): this
	// call ran its own load, shared with no caller (see Pass).
	Passed
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

// Result is a value with where it came from and how old it is.
type Result struct {
	// Value is shared with the other callers that got the same value (and
	// with the in-process tier): read it, never modify it. Copying it for
	// every caller would cost each hit an allocation and a copy of the
	// value (a 100 KB hit a quarter more time); Fetch, Wrap and FetchMany,
	// which decode a value anyway, return values the caller owns.
	Value  []byte
	Status Status
	// Age is the time since the value was loaded, judged on the Redis clock
	// (0 for a value this call loaded).
	Age time.Duration
	// Fresh is how much longer the value is fresh, judged on the Redis
	// clock when it was read: its whole fresh window for a value this
	// call's flight stored, zero or less for a stale value (minus how long
	// it has been stale), zero for a value that was not stored (Degraded,
	// or a load the guard did not store).
	Fresh time.Duration
	// Oversize: the value is larger than Options.MaxValueBytes, so Redis
	// holds only a marker of it, and each node its own copy (see
	// MaxValueBytes).
	Oversize bool
}
