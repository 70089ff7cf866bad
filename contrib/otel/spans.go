package stampedeotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
// stampede.result (ok, not_found or error). An error other than
// guard.ErrNotFound is recorded on the span and sets its status to Error; so
// does a panic, which goes on unchanged to the guard.
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
				span.SetAttributes(ResultKey.String("error"))
				span.SetStatus(codes.Error, "loader panicked")
			case err == nil:
				span.SetAttributes(ResultKey.String("ok"))
			case errors.Is(err, guard.ErrNotFound):
				span.SetAttributes(ResultKey.String("not_found"))
			default:
				span.SetAttributes(ResultKey.String("error"))
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
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
// stampede.age (the value's age in seconds). guard.ErrNotFound is an answer,
// not a failure; any other error is recorded and sets the status to Error.
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
	if err != nil && !errors.Is(err, guard.ErrNotFound) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return r, err
}
