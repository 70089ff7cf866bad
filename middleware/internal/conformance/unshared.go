package conformance

// neverSharedRows: never shared (§3, §3.5), in both configurations.
func neverSharedRows() []rfcRow {
	zero := &Config{}
	var rows []rfcRow
	add := func(r ...rfcRow) { rows = append(rows, r...) }
	for _, cfg := range []struct {
		name string
		c    *Config
	}{{"strict", nil}, {"zero Config", zero}} {
		add(
			rfcRow{"§5.2.2.5", cfg.name + ": no-store is not stored", cfg.c, always(200, "a", "Cache-Control", "no-store, max-age=3600"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§5.2.2.7", cfg.name + ": private is not stored", cfg.c, always(200, "a", "Cache-Control", "private, max-age=3600"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§3", cfg.name + ": Set-Cookie is not shared", cfg.c, always(200, "a", "Cache-Control", "max-age=3600", "Set-Cookie", "s=1"),
				[]step{{origin: 1}, {origin: 2, want: []string{"Set-Cookie", "s=1"}}}},
			rfcRow{"§3.5", cfg.name + ": a request with Authorization is not served from, nor stored for, others", cfg.c,
				always(200, "a", "Cache-Control", "public, s-maxage=3600"),
				[]step{{header: []string{"Authorization", "Bearer x"}, origin: 1}, {origin: 2}, {header: []string{"Authorization", "Bearer y"}, origin: 3}}},
			rfcRow{"§4.1", cfg.name + ": Vary: * is never shared", cfg.c, always(200, "a", "Cache-Control", "max-age=3600", "Vary", "*"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§3", cfg.name + ": a 5xx without explicit freshness is not stored", cfg.c, always(503, "down"),
				[]step{{status: 503, origin: 1}, {status: 503, origin: 2}}},
		)
	}
	return rows
}
