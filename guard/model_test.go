package guard

import (
	"flag"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// The model checks (model_foreign_test.go, model_history_test.go) make
// their own cases from a seed, run against a real redis-server for a fixed
// budget in CI, and longer on demand:
//
//	go test -run 'TestModel' -guard.soak=10m -timeout 0 ./guard/
//	STAMPEDE_SOAK=10m go test -run 'TestModel' -timeout 0 ./guard/
//
// Each prints its seed. -guard.seed=N replays the operations a seed
// generates (the interleaving of goroutines is the scheduler's, so a
// replay is likely, not certain, to fail the same way); a seed that found
// a defect is kept in the check's list of regression seeds, run first on a
// short budget.

var (
	soakFlag = flag.Duration("guard.soak", 0, "run each model check this long (default: its CI budget); also STAMPEDE_SOAK")
	seedFlag = flag.Uint64("guard.seed", 0, "run the model checks with this seed only")
)

// modelBudget is how long a model check generates cases: ci unless a soak
// is asked for.
func modelBudget(t *testing.T, ci time.Duration) time.Duration {
	t.Helper()
	if *soakFlag > 0 {
		return *soakFlag
	}
	if s := os.Getenv("STAMPEDE_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("STAMPEDE_SOAK=%q: want a positive duration", s)
		}
		return d
	}
	if testing.Short() {
		return ci / 4
	}
	return ci
}

// modelRun is one run of a model check: a seed and how long to run it.
type modelRun struct {
	seed   uint64
	budget time.Duration
}

// modelRuns returns the runs of a check: its regression seeds, briefly,
// then a new seed for the rest of the budget; or only -guard.seed.
func modelRuns(t *testing.T, regression []uint64, ci time.Duration) []modelRun {
	t.Helper()
	budget := modelBudget(t, ci)
	if *seedFlag != 0 {
		return []modelRun{{*seedFlag, budget}}
	}
	var runs []modelRun
	each := min(budget/4, 2*time.Second) / time.Duration(max(len(regression), 1))
	for _, s := range regression {
		runs = append(runs, modelRun{s, each})
		budget -= each
	}
	return append(runs, modelRun{uint64(time.Now().UnixNano()), max(budget, time.Second)})
}

// newRand returns the generator of one goroutine of a run: seed and the
// goroutine's number make its stream.
func newRand(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream*0x9e3779b97f4a7c15+1))
}
