package conformance

// requestDirectiveRows: request directives (§5.2.1), under HonorClientNoCache.
func requestDirectiveRows() []rfcRow {
	zero := &Config{}
	return []rfcRow{
		{"§5.2.1.4", "request no-cache reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "no-cache"}, origin: 2}}},
		{"§5.4", "request Pragma: no-cache reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Pragma", "no-cache"}, origin: 2}}},
		{"§5.2.1.1", "request max-age=0 reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "max-age=0"}, origin: 2}}},
		{"§5.2.1.1", "request max-age below the stored Age reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "50"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "max-age=10"}, origin: 2, want: []string{"Cache-Status", "stampede; fwd=request"}}, {header: []string{"Cache-Control", "max-age=100"}, origin: 2}}},
		{"§5.2.1.3", "request min-fresh beyond the freshness left reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=100"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "min-fresh=200"}, origin: 2}, {header: []string{"Cache-Control", "min-fresh=10"}, origin: 2}}},
		{"§5.2.1.7", "only-if-cached with nothing stored: 504", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{header: []string{"Cache-Control", "only-if-cached"}, status: 504, origin: 0}}},
		{"§5.2.1.7", "only-if-cached with a stored response", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "only-if-cached"}, body: text("a"), origin: 1}}},
		{"DESIGN §6", "zero Config: a client's no-cache does not reach the origin", zero, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "no-cache"}, origin: 1}}},
	}
}
