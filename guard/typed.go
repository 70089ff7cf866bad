package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Fetch is Do for values of any type, stored as JSON ([]byte and string as
// they are). Each caller gets a value of its own.
func Fetch[T any](ctx context.Context, g *Group, key string, load func(context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	if load == nil {
		// Checked here: the LoadFunc below wraps load, so Do cannot see it
		// is nil, and calling it would store a panic's error marker.
		return zero, errors.New("guard: nil load func")
	}
	raw, err := g.Get(ctx, key, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		b, err := marshal(v)
		if err != nil {
			return nil, NoStore(err)
		}
		return b, nil
	}, opts...)
	if err != nil {
		return zero, err
	}
	return unmarshal[T](raw)
}

// Wrap returns load guarded by g: calls whose arguments map to one key
// share one load across the fleet. It panics on a nil argument.
func Wrap[A, T any](g *Group, key func(A) string, load func(context.Context, A) (T, error), opts ...CallOption) func(context.Context, A) (T, error) {
	switch {
	case g == nil:
		panic("guard: Wrap with a nil Group")
	case key == nil:
		panic("guard: Wrap with a nil key func")
	case load == nil:
		panic("guard: Wrap with a nil load func")
	}
	return func(ctx context.Context, a A) (T, error) {
		return Fetch(ctx, g, key(a), func(ctx context.Context) (T, error) { return load(ctx, a) }, opts...)
	}
}

func marshal[T any](v T) ([]byte, error) {
	// By T, as unmarshal decodes: a string held by an any is JSON, so
	// that it decodes as it was (a string, not the number its text
	// may read as).
	switch x := any(&v).(type) {
	case *[]byte:
		return *x, nil
	case *string:
		return []byte(*x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("guard: encoding value: %w", err)
	}
	return b, nil
}

func unmarshal[T any](raw []byte) (T, error) {
	var v T
	switch p := any(&v).(type) {
	case *[]byte:
		// The caller owns what it gets: raw is shared with the other
		// callers of the flight and the in-process tier (see Result.Value).
		*p = bytes.Clone(raw)
		return v, nil
	case *string:
		*p = string(raw)
		return v, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("guard: decoding cached value: %w", err)
	}
	return v, nil
}
