package stampedeotel

import (
	"context"
	"errors"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stampede-go/stampede/contrib/metrics"
	"github.com/stampede-go/stampede/guard"
)

// spanAttrs are the attributes every span of key starts with.
func (t *Telemetry) spanAttrs(key string) []attribute.KeyValue {
	if t.opts.KeyLabel == nil {
		return []attribute.KeyValue{t.group}
	}
	return t.guardKeys.Get(key).span
}

// WrapLoad returns load wrapped in a span named "stampede.load" with the
// attributes stampede.group, stampede.key (with Options.KeyLabel) and
// stampede.result (ok, not_found, revalidated, pass or error, as the
// stampede.loads counter). An error that is not one of the loader's answers
// (guard.ErrNotFound, guard.Revalidated, guard.Pass) is recorded on the span
// and sets its status to Error; so does a panic, which goes on unchanged to
// the guard. See Do for the text recorded.
//
// The guard runs a load with a context detached from its callers' deadlines
// but carrying the values of the caller that started the flight, so the
// span is a child of that caller's span (a background refresh's span is a
// child of the request that found the value stale, and may end after it).
// Callers that shared the flight get no load span: see Do for a span per
// call.
func (t *Telemetry) WrapLoad(key string, load guard.LoadFunc) guard.LoadFunc {
	return func(ctx context.Context) (v []byte, err error) {
		ctx, span := t.tracer.Start(ctx, SpanLoad,
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(t.spanAttrs(key)...))
		returned := false
		defer func() {
			switch {
			case !returned: // a panic or runtime.Goexit
				span.SetAttributes(ResultKey.String(metrics.ResultError))
				span.SetStatus(codes.Error, "loader panicked")
			default:
				r := metrics.LoadResult(err)
				span.SetAttributes(ResultKey.String(r))
				if r == metrics.ResultError {
					recordError(span, err)
				}
			}
			span.End()
		}()
		v, err = load(ctx)
		returned = true
		return v, err
	}
}

// Do calls g.Do in a span named "stampede.do", its load wrapped by WrapLoad.
// The span has the attributes stampede.group, stampede.key (with
// Options.KeyLabel), stampede.status (the guard.Status of the answer) and
// stampede.age (the value's age in seconds). guard.ErrNotFound and
// guard.Pass are answers, not failures; any other error is recorded, as an
// exception event, and sets the status to Error.
//
// The text recorded, as the status description and the exception.message,
// is made valid UTF-8 (metrics.Valid), as OTLP refuses a batch over one
// invalid string. The key is user data and never reaches the backend: the
// guard's errors that quote it (guard.BackoffError, a call that got no
// turn at a failing key) are recorded without it, a BackoffError as
// "guard: load failed recently (cause); backing off".
//
// Hooks have no context, so they cannot annotate a caller's span; Do is the
// way to see, in a trace, what the guard did for each call.
func (t *Telemetry) Do(ctx context.Context, g *guard.Group, key string, load guard.LoadFunc, opts ...guard.CallOption) (guard.Result, error) {
	ctx, span := t.tracer.Start(ctx, SpanDo,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(t.spanAttrs(key)...))
	defer span.End()
	r, err := g.Do(ctx, key, t.WrapLoad(key, load), opts...)
	if r.Status != 0 {
		span.SetAttributes(StatusKey.String(r.Status.String()), AgeKey.Float64(r.Age.Seconds()))
	}
	if metrics.LoadResult(err) == metrics.ResultError {
		recordError(span, err)
	}
	return r, err
}

// recordError records err on span as an exception event, with the status
// Error, under errorText.
func recordError(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	text := errorText(err)
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", reflect.TypeOf(err).String()),
		attribute.String("exception.message", text)))
	span.SetStatus(codes.Error, text)
}

// errorText is err's text fit for a backend: valid UTF-8, and without the
// key for the guard's errors that quote it.
func errorText(err error) string {
	var be *guard.BackoffError
	switch {
	case errors.As(err, &be):
		return "guard: load failed recently (" + metrics.Valid(be.Cause) + "); backing off"
	case errors.Is(err, guard.ErrBackoff):
		// A call that got no turn at a failing key (guard.Private).
		return guard.ErrBackoff.Error()
	}
	return metrics.Valid(err.Error())
}
