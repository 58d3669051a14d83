package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// A checkpoint records every setting that decides the student's shape or the data it trains
// on — the Setup's teacher, tokenizer, student, corpus and compression (CheckpointMeta.Setup)
// and its TrainConfig (CheckpointMeta.Config) — so that a resume compares them with its own
// before any work and names the first that differs (issue 34: a checkpoint of a run at
// another --bpw was accepted, and the mismatch showed only after compressing again, as a
// misleading digest error).

// SettingMismatch is the error of a resume from a checkpoint trained with other settings
// than the run's (LoadResumePoint against distill.json, Assemble against its Setup): the
// first setting that differs, named as in distill.json and as a Setup field, with both
// values as JSON.
type SettingMismatch struct {
	// Checkpoint is the checkpoint's path; Against names the settings it was compared with
	// ("DIR/distill.json", "the Setup").
	Checkpoint, Against string
	// Setting is the setting's name in distill.json ("bits_per_weight_target",
	// "config.seed"); Field its Setup field ("BitsPerWeight", "Train.Seed").
	Setting, Field string
	// Trained is the checkpoint's value, Want the run's (JSON).
	Trained, Want string
}

func (e *SettingMismatch) Error() string {
	return fmt.Sprintf("checkpoint %s was trained with %s = %s (Setup.%s), but %s has %s: a checkpoint of another run (resume it with the settings it was trained with, or start a new run elsewhere)",
		e.Checkpoint, e.Setting, e.Trained, e.Field, e.Against, e.Want)
}

// settingsRecord is s's settings besides Train as JSON values by their distill.json name
// (CheckpointMeta.Setup).
func settingsRecord(s Setup) map[string]json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		return nil // a Setup is plain data: it always encodes
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	delete(m, "config")
	return m
}

// compareSettings returns a *SettingMismatch naming the first setting in which ck (loaded
// from path) was trained otherwise than s: every field of s that ck records (none in a
// checkpoint of an older nvg), then every field of s.Train, resolved, but those free zeroes
// (where the outputs go, how many are kept and such: a resume may change them) and
// BlockLayers (the student's layer count, which NewTrainer sets and checks). nil when they
// agree.
func compareSettings(path string, ck *Checkpoint, s Setup, against string, free func(*TrainConfig)) error {
	mismatch := func(setting, field string, trained, want []byte) error {
		show := func(v []byte) string {
			if v == nil {
				return "(not set)" // an omitempty field left out
			}
			return string(v)
		}
		return &SettingMismatch{Checkpoint: path, Against: against, Setting: setting, Field: field, Trained: show(trained), Want: show(want)}
	}
	if rec := ck.Meta.Setup; rec != nil {
		now := settingsRecord(s)
		for _, f := range jsonFields(reflect.TypeOf(s), "", "") {
			if f.key == "config" {
				continue // Train: compared below with the checkpoint's Config
			}
			if trained, want := rec[f.key], now[f.key]; !bytes.Equal(trained, want) {
				return mismatch(f.json, f.goPath, trained, want)
			}
		}
	}
	a, b := ck.Meta.Config.Resolved(), s.Train.Resolved()
	a.BlockLayers, b.BlockLayers = 0, 0
	free(&a)
	free(&b)
	ja, _ := json.Marshal(a) // plain data: it always encodes
	jb, _ := json.Marshal(b)
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(ja, &ma) != nil || json.Unmarshal(jb, &mb) != nil {
		return fmt.Errorf("train: comparing the settings of %s: cannot decode them", path)
	}
	for _, f := range jsonFields(reflect.TypeOf(a), "config.", "Train.") {
		if !bytes.Equal(ma[f.key], mb[f.key]) {
			return mismatch(f.json, f.goPath, ma[f.key], mb[f.key])
		}
	}
	return nil
}

// jsonField is a struct field's JSON key, and its JSON name and Go path with prefixes.
type jsonField struct{ key, json, goPath string }

// jsonFields lists the JSON-encoded fields of struct type t in their order, with those of
// embedded structs in place (as encoding/json flattens them), each with its JSON key, named
// jsonPrefix+that key and goPrefix+its field name; fields tagged "-" are left out.
func jsonFields(t reflect.Type, jsonPrefix, goPrefix string) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case !f.IsExported() || name == "-":
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonFields(f.Type, jsonPrefix, goPrefix)...)
		default:
			if name == "" {
				name = f.Name
			}
			out = append(out, jsonField{name, jsonPrefix + name, goPrefix + f.Name})
		}
	}
	return out
}
