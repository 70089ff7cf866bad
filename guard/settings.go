package guard

// Options returns the Group's settings with every default filled in.
func (g *Group) Options() Options { return g.opts }
