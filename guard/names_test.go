package guard

import "testing"

func TestNamesShareOneTag(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	nm := g.names("a}b")
	want := []string{"ns:{a%7Db}", "ns:{a%7Db}:lease", "ns:{a%7Db}:fence", "ns:{a%7Db}:w", "ns:{a%7Db}:inv"}
	for i, w := range want {
		if nm.keys[i] != w {
			t.Fatalf("names %q, want %q", nm.keys, want)
		}
	}
	if nm.entry != want[0] {
		t.Fatalf("entry %q", nm.entry)
	}
}
