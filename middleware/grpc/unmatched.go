package guardgrpc

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
)

// UnmatchedMethod reports a method listed with WithMethods that no call
// has matched while calls of other methods went through the interceptor:
// most likely a name the server does not serve, so nothing is cached for
// it. CheckMethods finds such names before the server starts.
type UnmatchedMethod struct {
	// FullMethod is the name listed with WithMethods.
	FullMethod string
	// Called is a method called meanwhile that differs from FullMethod in
	// its service's package only: the name probably meant. "" when the
	// report came after 1,000 calls of other methods instead.
	Called string
	// OtherCalls is how many calls of methods not listed the interceptor
	// had let through when it reported.
	OtherCalls int64
}

// unmatchedAfter is how many calls of methods not listed an interceptor
// lets through before it reports a listed method that no call matched.
// A call of the same service and method in another package is reported at
// once.
const unmatchedAfter = 1000

// The states of a listed method, for its report.
const (
	waiting  uint32 = iota // no call matched it yet
	matched                // a call matched it: nothing to report
	reported               // reported as unmatched, once
)

// watch finds listed methods that no call matches, for WithUnmatchedHook
// and WithLogger. After every listed method was matched or reported it
// costs an atomic load per call.
type watch struct {
	report  func(context.Context, UnmatchedMethod)
	listed  []string                  // sorted
	state   map[string]*atomic.Uint32 // listed method → waiting, matched, reported
	byShort map[string][]string       // shortName → listed methods
	pending atomic.Int32              // listed methods still waiting
	others  atomic.Int64              // calls of methods not listed
}

// newWatch returns the watch of o's listed methods, or nil when nothing
// would hear its reports.
func newWatch(o *options) *watch {
	report := o.unmatched()
	if report == nil || len(o.methods) == 0 {
		return nil
	}
	w := &watch{report: report, state: map[string]*atomic.Uint32{}, byShort: map[string][]string{}}
	for m := range o.methods {
		w.listed = append(w.listed, m)
		w.state[m] = new(atomic.Uint32)
		w.byShort[shortName(m)] = append(w.byShort[shortName(m)], m)
	}
	slices.Sort(w.listed)
	w.pending.Store(int32(len(w.listed)))
	return w
}

// matched notes a call of the listed method m.
func (w *watch) matched(m string) {
	if w == nil || w.pending.Load() == 0 {
		return
	}
	if w.state[m].CompareAndSwap(waiting, matched) {
		w.pending.Add(-1)
	}
}

// other notes a call of method, which is not listed, and reports the
// listed methods it shows unmatched.
func (w *watch) other(ctx context.Context, method string) {
	if w == nil || w.pending.Load() == 0 {
		return
	}
	n := w.others.Add(1)
	for _, m := range w.byShort[shortName(method)] {
		w.settle(ctx, m, method, n)
	}
	if n == unmatchedAfter {
		for _, m := range w.listed {
			w.settle(ctx, m, "", n)
		}
	}
}

// settle reports m, once, if no call has matched it.
func (w *watch) settle(ctx context.Context, m, called string, n int64) {
	if w.state[m].CompareAndSwap(waiting, reported) {
		w.pending.Add(-1)
		w.report(ctx, UnmatchedMethod{FullMethod: m, Called: called, OtherCalls: n})
	}
}

// unmatched returns the func that reports an unmatched method to the hook
// and the logger configured, or nil if neither is.
func (o *options) unmatched() func(context.Context, UnmatchedMethod) {
	hook, l := o.unmatchedHook, o.logger
	if hook == nil && l == nil {
		return nil
	}
	return func(ctx context.Context, u UnmatchedMethod) {
		if l != nil {
			attrs := []slog.Attr{slog.String("method", u.FullMethod), slog.Int64("other_calls", u.OtherCalls)}
			if u.Called != "" {
				attrs = append(attrs, slog.String("called", u.Called))
			}
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: a method listed with WithMethods is never called; nothing is cached for it", attrs...)
		}
		if hook != nil {
			hook(ctx, u)
		}
	}
}
