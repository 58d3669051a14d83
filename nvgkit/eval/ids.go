package eval

import (
	"encoding/json"
	"fmt"
)

// ParseIDs reads windows of token ids from JSON (nvg trace's IDS.json): a non-empty array of
// equally long, non-empty arrays of ids, e.g. [[1,2,3],[4,5,6]]. Errors: not such JSON, no
// windows or an empty first one, windows of different lengths (naming the first).
func ParseIDs(b []byte) ([][]int, error) {
	var ids [][]int
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("want a JSON array of windows of token ids: %w", err)
	}
	if len(ids) == 0 || len(ids[0]) == 0 {
		return nil, fmt.Errorf("no windows, or an empty first window")
	}
	for i, w := range ids {
		if len(w) != len(ids[0]) {
			return nil, fmt.Errorf("window %d has %d ids but window 0 has %d (windows must be of one length)", i, len(w), len(ids[0]))
		}
	}
	return ids, nil
}

// CheckIDs reports the first id of the windows outside the vocabulary [0, vocab), naming
// its window and position; nil when every id is inside.
func CheckIDs(ids [][]int, vocab int) error {
	for b, w := range ids {
		for i, id := range w {
			if id < 0 || id >= vocab {
				return fmt.Errorf("window %d, position %d: id %d is outside the vocabulary [0, %d)", b, i, id, vocab)
			}
		}
	}
	return nil
}
