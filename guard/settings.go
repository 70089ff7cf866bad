package guard

// Options returns the Group's settings as it runs with them: the Options
// given to New, with every zero field at its default (and Disabled fields
// at 0). Adapters read it to check their own settings against the Group's
// (a body the Group would never store, say).
func (g *Group) Options() Options { return g.opts }
