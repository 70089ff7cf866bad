package main

import (
	"context"
	"flag"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// target are the flags of the subcommands that name keys or one URL
// (inspect, invalidate): the Redis to reach and the -url request.
type target struct {
	c conn
	u urlFlags
}

func (t *target) register(fs *flag.FlagSet) {
	t.c.register(fs, 2*time.Second)
	t.u.register(fs)
}

// reached is what open returns: the read Group and, with -url, the URL's
// key and the tag every key of the URL holds.
type reached struct {
	g        *guard.Group
	key, tag string
}

// one says whether the command line names exactly one kind of target:
// counts are the sizes of the other kinds, -url is added. It returns the
// usage error none when it names none, many when more than one.
func (t *target) one(none, many string, counts ...int) error {
	named := min(len(t.u.url), 1)
	for _, n := range counts {
		if n > 0 {
			named++
		}
	}
	switch {
	case named == 0:
		return usagef("%s", none)
	case named > 1:
		return usagef("%s", many)
	}
	return nil
}

// open checks the -url request, connects and, with -url, derives its key
// by g's HTTP engine: a bad request fails before Redis is reached. stop
// closes the Group and the client.
func (t *target) open(ctx context.Context) (r reached, stop func(), err error) {
	if err := t.u.check(); err != nil {
		return reached{}, nil, err
	}
	g, _, stop, err := t.c.open(ctx)
	if err != nil {
		return reached{}, nil, err
	}
	r.g = g
	if t.u.url != "" {
		if r.key, r.tag, err = t.u.key(g); err != nil {
			stop()
			return reached{}, nil, err
		}
	}
	return r, stop, nil
}
