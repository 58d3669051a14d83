package nearest

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"", "abc", 3}, {"steps", "steps", 0}, {"stpes", "steps", 2}, {"step", "steps", 1}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}} {
		if got := Distance(c.a, c.b); got != c.d || Distance(c.b, c.a) != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

func TestSuggest(t *testing.T) {
	flags := []string{"steps", "nb", "t", "k", "lr", "eval-every", "eval-windows", "keep", "o", "out", "teacher", "tokenizer"}
	for _, c := range []struct{ in, want string }{
		{"stpes", "steps"}, {"step", "steps"}, {"teacer", "teacher"}, {"eval-evry", "eval-every"},
		{"zzzzzz", ""}, // nothing near
		{"eval-windo", "eval-windows"},
		{"x", ""}, // "t", "k", "o" are all one edit away: a tie
	} {
		if got := Suggest(c.in, flags); got != c.want {
			t.Errorf("Suggest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Names("model.norm.weigth", []string{"a", "model.norm.weight", "model.layers.0.norm.weight"}, 2); !slices.Equal(got, []string{"model.norm.weight", "model.layers.0.norm.weight"}) {
		t.Errorf("Names = %v", got)
	}
}
