package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"
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
		var c conn
		var u urlFlags
		c.register(fs, 2*time.Second)
		u.register(fs)
		var tags list
		fs.Var(&tags, "tag", "a hash tag whose keys to drop, as in the key \"{TAG}...\" (repeat it, or separate with commas)")
		return func(ctx context.Context, out io.Writer, args []string) error {
			return invalidate(ctx, out, &c, &u, tags, args)
		}
	},
}

func invalidate(ctx context.Context, out io.Writer, c *conn, u *urlFlags, tags []string, keys []string) error {
	named := 0
	for _, n := range []int{len(keys), len(tags), len(u.url)} {
		if n > 0 {
			named++
		}
	}
	if named != 1 {
		return usagef("name keys, -tag or -url (one of them)")
	}
	if err := u.check(); err != nil {
		return err
	}
	g, _, stop, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if u.url != "" {
		_, tag, err := u.key(g)
		if err != nil {
			return err
		}
		tags = []string{tag}
	}
	var errs []error
	for _, k := range keys {
		if err := g.Invalidate(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", strconv.Quote(k), err))
			continue
		}
		fmt.Fprintf(out, "invalidated key %s\n", strconv.Quote(k))
	}
	for _, t := range tags {
		if err := g.InvalidateTag(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("tag %s: %w", strconv.Quote(t), err))
			continue
		}
		if u.url != "" {
			fmt.Fprintf(out, "invalidated %s (tag %s)\n", u.url, strconv.Quote(t))
		} else {
			fmt.Fprintf(out, "invalidated tag %s\n", strconv.Quote(t))
		}
	}
	return errors.Join(errs...)
}
