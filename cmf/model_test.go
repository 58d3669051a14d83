package cmf

import "testing"

func TestOpenTinyTeacher(t *testing.T) {
	m, err := Open("tinyteacher/model")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.HiddenSize != 256 || !m.Config.IsFullAttention(3) || m.Config.IsFullAttention(0) || m.Config.RotaryDim() != 16 {
		t.Fatalf("config %+v", m.Config)
	}
	e, err := m.Tensor("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Float64()
	if err != nil || len(v) != 8192*256 {
		t.Fatal(err, len(v))
	}
}
