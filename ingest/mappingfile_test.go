package ingest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

func TestParseMapping(t *testing.T) {
	f := testMapping(t)
	if f.Name() != "mapping:test.yaml" || f.Native() || f.MaxName() != chat.MaxForeignNameLen || f.MaxPayload() != MaxPayload {
		t.Fatalf("format %s: native %v, names %d, payloads %d", f.Name(), f.Native(), f.MaxName(), f.MaxPayload())
	}
	m := f.plan.spec
	if got := m.ptrs[mRoom]; len(got) != 2 || got[0] != "/chat/room" || got[1] != "/room~1id" {
		t.Errorf("room pointers %q", got)
	}
	if m.unit != tsSeconds || m.absent == nil || *m.absent != chat.KindMessage {
		t.Errorf("unit %d, absent %v", m.unit, m.absent)
	}
	want := map[string]chat.Kind{"msg": chat.KindMessage, "0": chat.KindMessage, "hello": chat.KindJoin, "bye": chat.KindLeave, "7": chat.KindLeave}
	if len(m.kinds) != len(want) {
		t.Errorf("kinds %v, want %v", m.kinds, want)
	}
	for k, v := range want {
		if m.kinds[k] != v {
			t.Errorf("kinds %v, want %v", m.kinds, want)
		}
	}
	// Without a type every event is a message; ts is optional.
	f, err := ParseMapping("m.yaml", []byte("room: /r\nuser: /u\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, derr := f.Decode([]byte(`{"r":"a","u":"b","type":"edit"}`), testNow, testSkew)
	if derr != nil || !reflect.DeepEqual(got, Event{Event: chat.Event{Room: "a", User: "b", TS: testNow}, Counted: true}) {
		t.Fatalf("Decode = %+v, %v", got, derr)
	}
}

func TestParseMappingErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                                        "m.yaml: empty file: want a mapping of room, user, ts, id, text, type...",
		"- room\n":                                "m.yaml:1: want a mapping of room, user, ts, id, text, type...",
		"room: /r\nuser: [/u\n":                   "m.yaml:1: did not find expected ',' or ']'",
		"room: /r\n":                              "m.yaml:1: user: missing (room and user are required)",
		"room: /r\nuser: /u\ncolour: /c\n":        "m.yaml:3: colour: unknown field (valid: room, user, ts, id, text, type, mentions, message, join, leave)",
		"room: /r\nuser: /u\nroom: /x\n":          "m.yaml:3: room: defined twice",
		"room: r\nuser: /u\n":                     `m.yaml:1: room: "r" is not a JSON pointer: it must start with /`,
		"room: /r\nuser: /a~2b\n":                 `m.yaml:2: user: "/a~2b": ~ must be followed by 0 (for ~) or 1 (for /)`,
		"room: /r\nuser: /u~\n":                   `m.yaml:2: user: "/u~": ~ must be followed by 0 (for ~) or 1 (for /)`,
		"room: /r\nuser: []\n":                    "m.yaml:2: user: want a JSON pointer or a list of them, got an empty list",
		"room: /r\nuser: {a: b}\n":                "m.yaml:2: user: want a JSON pointer (a string such as /room) or a list of them",
		"room: /r\nuser: 5\n":                     "m.yaml:2: user: want a JSON pointer (a string such as /room) or a list of them",
		"room: /r\nuser: /u\nts: /t\n":            "m.yaml:3: ts: want {pointer: /..., unit: ms, s or rfc3339}",
		"room: /r\nuser: /u\nts: {pointer: /t}\n": "m.yaml:3: ts: want {pointer: /..., unit: ms, s or rfc3339}",
		"room: /r\nuser: /u\nts:\n  pointer: /t\n  unit: sec\n":              `m.yaml:5: ts.unit: "sec" is not a unit (valid: ms, s, rfc3339)`,
		"room: /r\nuser: /u\nts:\n  pointer: /t\n  unit: s\n  zone: utc\n":   "m.yaml:6: ts.zone: unknown field (valid: pointer, unit)",
		"room: /r\nuser: /u\nts:\n  pointer: /t\n  pointer: /t\n  unit: s\n": "m.yaml:5: ts.pointer: defined twice",
		"room: /r\nuser: /u\nts: {pointer: t, unit: s}\n":                    `m.yaml:3: ts.pointer: "t" is not a JSON pointer: it must start with /`,
		"room: /r\nuser: /u\ntype: /t\n":                                     "m.yaml:3: type: no value is listed as a message, join or leave: nothing would be counted",
		"room: /r\nuser: /u\njoin: [j]\n":                                    "m.yaml:3: join: type values without a type pointer",
		"room: /r\nuser: /u\ntype: /t\nmessage: [m]\njoin: [m]\n":            `m.yaml:5: join: "m" is listed twice`,
		"room: /r\nuser: /u\ntype: /t\nmessage: [~]\njoin: [null]\n":         "m.yaml:5: join: null is listed twice",
		"room: /r\nuser: /u\ntype: /t\nmessage: [[m]]\n":                     "m.yaml:4: message: want type values: strings, numbers or null",
		"room: /r\nuser: /" + strings.Repeat("a/", 64) + "a\n":               `m.yaml:2: user: "/` + strings.Repeat("a/", 64) + `a" is deeper than 64 levels`,
		"room: /r\nuser: [" + strings.Repeat("/u,", 31) + "/u]\n":            "m.yaml:1: user: more than 32 pointers in all",
	} {
		if _, err := ParseMapping("m.yaml", []byte(in)); err == nil || err.Error() != want {
			t.Errorf("ParseMapping(%q):\n got %v\nwant %s", in, err, want)
		}
	}
}

func TestParseInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(file, []byte("room: /r\nuser: /u\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{"chatpulse": "chatpulse", "matrix": "matrix", "mapping:" + file: "mapping:" + file} {
		f, err := ParseInput(spec)
		if err != nil || f.Name() != want {
			t.Errorf("ParseInput(%q) = %v, %v", spec, f, err)
		}
	}
	for spec, want := range map[string]string{
		"slack":                     `"slack": want chatpulse, matrix or mapping:FILE`,
		"mapping:" + file + ".none": "mapping: open " + file + ".none: no such file or directory",
	} {
		if _, err := ParseInput(spec); err == nil || err.Error() != want {
			t.Errorf("ParseInput(%q) = %v, want %s", spec, err, want)
		}
	}
	if !Native().Native() || Matrix().Native() || Matrix().MaxPayload() != 1<<20 || Matrix().MaxName() != 255 || Native().MaxName() != 128 {
		t.Error("the built-in formats' limits")
	}
	if _, err := Native().WithMaxPayload(1 << 20); err == nil {
		t.Error("chatpulse's own events took a limit of 1 MiB")
	}
	if _, err := Matrix().WithMaxPayload(0); err == nil {
		t.Error("a limit of 0 bytes")
	}
	f, err := Matrix().WithMaxPayload(2000)
	if err != nil || f.MaxPayload() != 2000 || Matrix().MaxPayload() != 1<<20 {
		t.Fatalf("WithMaxPayload: %v", err)
	}
	if _, err := f.Decode(make([]byte, 2001), matrixNow, testSkew); err == nil || err.Reason != ReasonTooLarge {
		t.Fatalf("2001 bytes with a limit of 2000: %v", err)
	}
}

// The mappings docs/input.md shows are the files here, and do what it
// says: Zulip's sample is the message it describes, and Matrix written as
// a mapping reads the samples as --input matrix does but for an edit.
func TestDocMappings(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "input.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"matrix.yaml", "zulip.yaml", "zulip.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "mappings", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "\n"+string(data)+"```\n") {
			t.Errorf("docs/input.md does not show testdata/mappings/%s as it is", name)
		}
	}
	zulip := loadMapping(t, "zulip.yaml")
	data, _ := os.ReadFile(filepath.Join("testdata", "mappings", "zulip.json"))
	got, derr := zulip.Decode(data, testNow, testSkew)
	want := Event{Event: chat.Event{Room: "design", User: "user11@zulip.example.com", TS: ms("2026-11-30T07:00:00Z"), ID: "1848",
		Text: "Has anyone tried the new build?"}, HasText: true, Counted: true}
	if derr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the Zulip sample: %+v, %v; want %+v", got, derr, want)
	}
	matrixFile := loadMapping(t, "matrix.yaml")
	for name, data := range samples(t) {
		builtin, err1 := Matrix().Decode(data, matrixNow, testSkew)
		file, err2 := matrixFile.Decode(data, matrixNow, testSkew)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v, %v", name, err1, err2)
		}
		if name == "017-edit-m.replace" {
			if builtin.Counted || !file.Counted {
				t.Errorf("%s: the edit is counted by --input matrix (%v) or not by the file (%v)", name, builtin.Counted, file.Counted)
			}
			continue
		}
		if !reflect.DeepEqual(builtin, file) {
			t.Errorf("%s: --input matrix reads\n %+v, the mapping file\n %+v", name, builtin, file)
		}
	}
}
