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
	files, err := data.ExpandSources(strings.Split(list, ","))
	if err != nil {
		return nil, usagef("--%s: %s", flagName, strings.TrimPrefix(err.Error(), "data: "))
	}
	return files, nil
}
