package conformance

// varyRows: Vary (§4.1).
func varyRows() []rfcRow {
	lang := always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Language")
	return []rfcRow{
		{"§4.1", "Vary: the same value selects the stored variant", nil, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 1, want: hit}}},
		{"§4.1", "Vary: another value goes to the origin", nil, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "de"}, origin: 2}, {header: []string{"Accept-Language", "fr"}, origin: 2}}},
		{"§4.1", "Vary: absent differs from present", nil, lang,
			[]step{{origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 2}, {origin: 2}}},
		{"§4.1", "Vary: values compared exactly (another spelling, which the handler may read otherwise, is another variant)", nil,
			always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Encoding"),
			[]step{{header: []string{"Accept-Encoding", "gzip, br"}, origin: 1}, {header: []string{"Accept-Encoding", "GZIP,br"}, origin: 2},
				{header: []string{"Accept-Encoding", "gzip, br"}, origin: 2, want: hit}}},
		{"§4.1", "Vary on two fields", nil, always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Language, X-Mode"),
			[]step{{header: []string{"Accept-Language", "fr", "X-Mode", "a"}, origin: 1}, {header: []string{"Accept-Language", "fr", "X-Mode", "b"}, origin: 2},
				{header: []string{"Accept-Language", "fr", "X-Mode", "a"}, origin: 2}}},
		{"§4.1", "Vary names that change: the new response is not shared, the next one relearns them", nil,
			byCount(reply{200, []string{"Cache-Control", "max-age=3600", "Vary", "Accept-Language"}, "by language"},
				reply{200, []string{"Cache-Control", "max-age=3600", "Vary", "X-Mode"}, "by mode"}),
			[]step{{header: []string{"Accept-Language", "fr"}, body: text("by language"), origin: 1},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 2, want: []string{"Cache-Status", `stampede; fwd=miss; detail="Vary changed"`}},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 3},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 3, want: hit}}},
		{"§4.1", "Vary on a KeyHeaders field", &Config{UpstreamWindows: true, HonorClientNoCache: true, RequireFreshness: true, KeyHeaders: []string{"Accept-Language"}}, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "de"}, origin: 2}}},
	}
}
