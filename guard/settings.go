package guard

// Options returns the Group's settings with every default filled in (and
// Disabled fields at 0), for adapters that check their own settings against
// it.
func (g *Group) Options() Options { return g.opts }
