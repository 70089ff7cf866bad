package redistest

// New starts a standalone server outside any test, for a TestMain whose
// examples need one (an Example has no testing.T to skip, fail or clean
// up with). It fails when redis-server is unavailable: check [ServerPath]
// and [Required] first. The caller must Close the server.
func New(opts ...Option) (*Server, error) {
	return startServer(newConfig(opts))
}

// Close kills a server started by [New] and removes its directory. Servers
// of [Start] and its friends are closed by their test's cleanup.
func (s *Server) Close() error { return s.shutdown() }
