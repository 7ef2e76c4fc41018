package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/operating.md's flags table lists every flag chatpulse has, once,
// and no other. The flags are those ParseFlags defines, read from its
// --help. The table's are the --names in the first cell of each row
// under "## Flags".
func TestFlagsDocumented(t *testing.T) {
	defined := definedFlags(t)
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := flagsTable(t, string(doc))
	for _, name := range defined {
		if !slices.Contains(listed, name) {
			t.Errorf("docs/operating.md's flags table does not list --%s", name)
		}
	}
	for i, name := range listed {
		switch {
		case !slices.Contains(defined, name):
			t.Errorf("docs/operating.md's flags table lists --%s, which chatpulse does not have", name)
		case slices.Contains(listed[:i], name):
			t.Errorf("docs/operating.md's flags table lists --%s twice", name)
		}
	}
}

// definedFlags returns the names of the flags ParseFlags defines, from the
// flag list --help prints ("  -name type" and then the help, indented).
func definedFlags(t *testing.T) []string {
	t.Helper()
	var help bytes.Buffer
	m := NewMain()
	m.Stderr = &help
	if err := m.ParseFlags([]string{"--help"}, func(string) string { return "" }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	var names []string
	for _, sub := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(help.String(), -1) {
		names = append(names, sub[1])
	}
	if len(names) < 20 {
		t.Fatalf("found only %v in --help:\n%s", names, help.String())
	}
	return names
}

// flagsTable returns the flags named in the first cell of the rows of the
// table under "## Flags" (a row may name several: `--tls-cert`, `--tls-key`).
func flagsTable(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Flags\n")
	if !ok {
		t.Fatal(`docs/operating.md has no "## Flags" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var names []string
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, sub := range regexp.MustCompile("`--([a-z][a-z-]*)`").FindAllStringSubmatch(cells[1], -1) {
			names = append(names, sub[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf(`found only %v in the table under "## Flags"`, names)
	}
	return names
}
