package conformance

// cacheStatusRows: Cache-Status (RFC 9211).
func cacheStatusRows() []rfcRow {
	return []rfcRow{
		{"RFC 9211 §2", "Cache-Status: a stored miss, then a hit", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1, want: []string{"Cache-Status", "stampede; fwd=miss; stored"}}, {origin: 1, want: []string{"Cache-Status", "stampede; hit"}}}},
		{"RFC 9211 §2", "Cache-Status: not stored", nil, always(200, "a"),
			[]step{{origin: 1, want: []string{"Cache-Status", `stampede; fwd=miss; detail="no explicit freshness"`}}}},
		{"RFC 9211 §2", "Cache-Status: the upstream caches' members come first", nil, always(200, "a", "Cache-Control", "max-age=3600", "Cache-Status", "edge; hit"),
			[]step{{origin: 1, want: []string{"Cache-Status", "edge; hit, stampede; fwd=miss; stored"}}, {origin: 1, want: []string{"Cache-Status", "edge; hit, stampede; hit"}}}},
		{"RFC 9211 §2", "Cache-Status: the upstream caches' members come first, not stored", nil, always(200, "a", "Cache-Status", "edge; fwd=uri-miss"),
			[]step{{origin: 1, want: []string{"Cache-Status", `edge; fwd=uri-miss, stampede; fwd=miss; detail="no explicit freshness"`}}}},
	}
}
