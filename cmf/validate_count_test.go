package cmf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvg-project/nvg/arch"
	"github.com/nvg-project/nvg/testkit/jsontest"
)

// TestValidateCountsAllProblems: a model with a valid config and no tensors has one problem
// per expected tensor; the message counts all of them (it used to count the 20 shown) and
// says how many more there are.
func TestValidateCountsAllProblems(t *testing.T) {
	c, err := arch.ParseConfig(jsontest.Marshal(t, tinyConfigJSON(t)))
	if err != nil {
		t.Fatal(err)
	}
	n := len(c.Shapes())
	if n <= 20 {
		t.Fatalf("only %d expected tensors", n)
	}
	err = NewModel(c).Validate()
	for _, want := range []string{fmt.Sprintf("invalid model (%d problems):", n), fmt.Sprintf("… and %d more", n-20)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}
}
