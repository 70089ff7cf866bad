package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
)

var invalidateCommand = command{
	name: "invalidate", args: "KEY... | -tag TAG | -url 'GET URL'",
	summary: "Drop keys, tags or a URL's entries, fleet-wide.\n\n" +
		"As guard.Group.Invalidate and InvalidateTag do: the entry in Redis, every\n" +
		"node's in-process copy (they are told by Redis), and any refresh in flight (its fill is\n" +
		"rejected). -tag drops every key holding the hash tag; -url every entry of a URL (its variants\n" +
		"and spellings), as an unsafe request through the middleware does. It writes to Redis.",
	example: "stampede invalidate -redis localhost:6379 -namespace catalog: user:42",
	setup: func(fs *flag.FlagSet) action {
		var t target
		t.register(fs)
		var tags list
		fs.Var(&tags, "tag", "a hash tag whose keys to drop, as in the key \"{TAG}...\" (repeat it, or separate with commas)")
		return func(ctx context.Context, out io.Writer, args []string) error {
			return invalidate(ctx, out, &t, tags, args)
		}
	},
}

func invalidate(ctx context.Context, out io.Writer, t *target, tags []string, keys []string) error {
	const usage = "name keys, -tag or -url (one of them)"
	if err := t.one(usage, usage, len(keys), len(tags)); err != nil {
		return err
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	if err := checkTags(tags); err != nil {
		return err
	}
	r, stop, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if t.u.url != "" {
		tags = []string{r.tag}
	}
	var errs []error
	for _, k := range keys {
		if err := r.g.Invalidate(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strconv.Quote(k), err))
			continue
		}
		fmt.Fprintf(out, "invalidated key %s\n", strconv.Quote(k))
	}
	for _, tag := range tags {
		if err := r.g.InvalidateTag(ctx, tag); err != nil {
			errs = append(errs, fmt.Errorf("tag %s: %w", strconv.Quote(tag), err))
			continue
		}
		if t.u.url != "" {
			fmt.Fprintf(out, "invalidated %s (tag %s)\n", t.u.url, strconv.Quote(tag))
		} else {
			fmt.Fprintf(out, "invalidated tag %s\n", strconv.Quote(tag))
		}
	}
	return errors.Join(errs...)
}
