package main

import (
	"strings"

	"github.com/nvg-project/nvg/nvgkit/data"
)

// corpusFiles expands the comma-separated corpus sources of --flagName (files, directories,
// globs, .jsonl corpora: data.ExpandSources) into a list of files. An empty list returns
// nil (the flag was not given); a source that gives no file is a usage error naming it.
func corpusFiles(flagName, list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	return expandCorpus(flagName, strings.Split(list, ","))
}

// expandCorpus is corpusFiles for sources already split (a --config file's list, or
// fileList's): nil is no list (nil, nil); a list without any source ("," on the command
// line) is a usage error, like a source that gives no file.
func expandCorpus(flagName string, sources []string) ([]string, error) {
	if sources == nil {
		return nil, nil
	}
	if len(sources) == 0 {
		return nil, usagef("--%s: no files", flagName)
	}
	files, err := data.ExpandSources(sources)
	if err != nil {
		return nil, usagef("--%s: %s", flagName, strings.TrimPrefix(err.Error(), "data: "))
	}
	return files, nil
}
