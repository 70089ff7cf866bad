package main

import (
	"context"
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
	// The first failure ends the run: Redis down or frozen would fail
	// every other call the same way, each after -timeout.
	for i, k := range keys {
		if err := r.g.Invalidate(ctx, k); err != nil {
			return untried(fmt.Errorf("key %s: %w", strconv.Quote(k), err), len(keys)-i-1+len(tags))
		}
		fmt.Fprintf(out, "invalidated key %s\n", strconv.Quote(k))
	}
	for i, tag := range tags {
		if err := r.g.InvalidateTag(ctx, tag); err != nil {
			return untried(fmt.Errorf("tag %s: %w", strconv.Quote(tag), err), len(tags)-i-1)
		}
		if t.u.url != "" {
			fmt.Fprintf(out, "invalidated %s (tag %s)\n", t.u.url, strconv.Quote(tag))
		} else {
			fmt.Fprintf(out, "invalidated tag %s\n", strconv.Quote(tag))
		}
	}
	return nil
}

// untried is err, the failure that ended an invalidate run, saying how
// many of the keys and tags named were not tried after it.
func untried(err error, n int) error {
	if n == 0 {
		return err
	}
	return fmt.Errorf("%w; %d more key(s) and tag(s) not tried (the ones after it)", err, n)
}
