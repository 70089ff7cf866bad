package metrics

import (
	"errors"

	"github.com/stampede-go/stampede/guard"
)

// The results of a loader call (guard.Hooks.Load), the values of the
// result label of the adapters' load counters. Only ResultError is a
// failure: the others are the loader's answers.
const (
	ResultOK          = "ok"          // a value
	ResultNotFound    = "not_found"   // guard.ErrNotFound
	ResultRevalidated = "revalidated" // guard.Revalidated: the previous value is current
	ResultPass        = "pass"        // guard.Pass: an answer that may not be shared
	ResultError       = "error"       // anything else, guard.NoStore and guard.Private included
)

// LoadResults returns every value LoadResult returns.
func LoadResults() []string {
	return []string{ResultOK, ResultNotFound, ResultRevalidated, ResultPass, ResultError}
}

// LoadResult returns the result of a loader call that ended with err. It
// neither locks nor allocates.
func LoadResult(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case guard.IsRevalidated(err):
		return ResultRevalidated
	case guard.IsPass(err):
		return ResultPass
	case errors.Is(err, guard.ErrNotFound):
		// A Private failure wrapping it too: a not-found is no failure.
		return ResultNotFound
	}
	return ResultError
}
