package guard

import "context"

// cappedLoad serves a call of a key whose hash tag is full (see
// Options.MaxTagKeys): the caller's own load, with no lease, no wait and
// no fill, so that a stream of new keys of one tag costs each of them one
// load, as it would without the guard, and Redis nothing.
func (g *Group) cappedLoad(ctx context.Context, c *call) (Result, error) {
	g.tagFullHook(c.key)
	o := g.runLoader(context.WithoutCancel(ctx), c.key, c.load, nil)
	return Result{Value: o.v, Status: Passed, Capped: true}, o.err
}

// tagFullHook reports to Hooks.TagFull.
func (g *Group) tagFullHook(key string) {
	if h := g.opts.Hooks.TagFull; h != nil {
		h(key)
	}
}
