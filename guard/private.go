package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// Outcomes that belong to one caller. A load runs for the flight of its
// caller, but what it reads may be more than the key: an HTTP handler reads
// the request's headers, a gRPC handler its metadata. When such a load
// fails, or answers something that cannot be shared, its answer is its
// caller's alone, and the other callers of the flight must neither receive
// it nor all call the origin at once:
//
//   - Private: the load failed for its own caller. The others take turns:
//     each runs its own load under the key's lease, one at a time across
//     the fleet, until one load's value is stored, which every caller still
//     waiting then shares. A caller whose turn does not come within
//     WaitTimeout gets ErrBackoff (it is not handed the failure of another
//     caller's load).
//   - Pass: the load's answer may not be shared, for reasons of the answer
//     (an HTTP response that is private, say). The key is marked "pass" for
//     a while, fleet-wide: callers in that window run their own load at
//     once, with no flight, no lease and no waiting (hit-for-pass); the
//     first of them whose load returns a value stores it, which ends the
//     window (so the window never hides a shareable value for long).

// Private marks a loader's error as its own caller's: nothing is stored,
// and the other callers take turns, one load at a time across the fleet.
func Private(err error) error {
	if err == nil {
		err = errors.New("guard: private failure")
	}
	return &privateError{err: err}
}

// Pass marks a loader's error as its caller's (Private) and the key pass
// for d, fleet-wide: calls run their own loads, with Status Passed, until
// one stores a value.
func Pass(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("guard: not shared")
	}
	return &privateError{err: err, pass: d}
}

type privateError struct {
	err  error
	pass time.Duration // > 0: mark the key pass for this long
}

func (e *privateError) Error() string { return e.err.Error() }
func (e *privateError) Unwrap() error { return e.err }

// IsPass reports whether err carries a Pass answer: a loader's answer
// that may not be shared, not a failure (metrics count it apart).
func IsPass(err error) bool {
	pe, _ := firstOf[*privateError](err)
	return pe != nil && pe.pass > 0
}

// firstOf returns the first error of type T in err's tree, as errors.As
// finds it, without allocating (errors.As's target escapes): a metrics
// hook asks on every load.
func firstOf[T error](err error) (T, bool) {
	for err != nil {
		if t, ok := err.(T); ok {
			return t, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if t, ok := firstOf[T](e); ok {
					return t, true
				}
			}
			var zero T
			return zero, false
		default:
			var zero T
			return zero, false
		}
	}
	var zero T
	return zero, false
}

// privateOf returns the Private or Pass mark err carries, or nil.
func privateOf(err error) *privateError {
	var pe *privateError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// errTurn tells a caller that its flight ended with another caller's
// Private or Pass answer: it goes again, to take its own turn.
var errTurn = errors.New("guard: another caller's private answer")

// errPassing tells the callers of a miss flight that the key turned out to
// be marked pass: each runs its own load.
var errPassing = errors.New("guard: key marked pass")

// mine turns the outcome of a flight whose load was owner's into c's:
// another caller's Private or Pass answer becomes errTurn.
func mine(c, owner *call, err error) error {
	if owner != c && privateOf(err) != nil {
		return errTurn
	}
	return err
}

// takeTurns runs step, one pass of a call's read path, again as long as it
// ends with another caller's private answer, within WaitTimeout of the
// call's start.
func (g *Group) takeTurns(ctx context.Context, c *call, step func() (Result, error)) (Result, error) {
	for {
		res, err := step()
		if err != errTurn {
			return res, err
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		if time.Since(c.start) >= g.opts.WaitTimeout {
			return Result{}, turnTimeout(c.key)
		}
	}
}

// turnTimeout is the error of a caller that got no turn at a failing key.
func turnTimeout(key string) error {
	return fmt.Errorf("%w: key %q: other callers' loads failed, and this call got no turn within WaitTimeout", ErrBackoff, key)
}

// passLoad serves a call of a key marked pass (the marker e): the caller's
// own load, with no flight, no lease and no waiting. A value it returns is
// stored if the marker is still the one read, which ends the window.
func (g *Group) passLoad(ctx context.Context, c *call, e entry.Entry) (Result, error) {
	o := g.runLoader(context.WithoutCancel(ctx), c.key, c.load, nil)
	if o.err != nil {
		return Result{Status: Passed}, o.err
	}
	f := g.fillFor(c.co, 0, o, false)
	if f.mode == fillWrite && f.flags != flagNegative {
		f.mode = fillIfSame
		f.expect = strconv.FormatInt(e.Fence, 10) + "," + strconv.FormatInt(e.Written, 10)
		g.store(ctx, c.key, c.nm, f)
	}
	return Result{Value: o.v, Status: Passed}, nil
}

// passFor is how long a Pass answer marks its key.
func (g *Group) passFor(pe *privateError, co callOptions) time.Duration {
	return min(pe.pass, co.freshFor)
}
