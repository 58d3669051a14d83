// Package nearest finds the names nearest to a mistyped one, by Levenshtein distance: the
// "did you mean" of nvg's flags and commands and the nearest trained-vector names of a Lab.
package nearest

import "sort"

// Distance is the Levenshtein distance between a and b over bytes: the fewest
// single-byte insertions, deletions and substitutions that turn a into b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Names returns the n names of all nearest to name (by Distance; ties keep all's order).
func Names(name string, all []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	cs := make([]cand, len(all))
	for i, a := range all {
		cs[i] = cand{a, Distance(name, a)}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.s)
	}
	return out
}

// Suggest returns the name of all nearest to a mistyped name when it is near enough to be
// what was meant — at most 2 edits, or a third of name's length for longer names, and
// closer than any other — else "".
func Suggest(name string, all []string) string {
	best, bestD, tie := "", 1<<30, false
	for _, a := range all {
		switch d := Distance(name, a); {
		case d < bestD:
			best, bestD, tie = a, d, false
		case d == bestD:
			tie = true
		}
	}
	if best == "" || tie || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}
