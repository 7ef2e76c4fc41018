package ingest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// benchEvents are realistic events of about 150 bytes.
var benchEvents = []struct {
	name    string
	json    string
	escapes bool // room, user or text needs unescaping (one allocation)
}{
	{"ts-string", `{"id":"m-184467","room":"lobby","user":"alice","ts":"2026-11-30T07:00:00.123Z","text":"hi there, how is everyone doing today?"}`, false},
	{"ts-int", `{"id":"m-184468","room":"support-eu","user":"bob_1987","ts":1796022000123,"text":"hi there, how is everyone doing today?"}`, false},
	{"ts-offset-typed", `{"id":"m-184469","type":"message","room":"lobby","user":"carol","ts":"2026-11-30T08:00:00.123+01:00","text":"see you all at 9"}`, false},
	{"no-ts-unicode", `{"id":"m-184470","room":"café-paris","user":"zoë","text":"¿qué tal? 👋 ça va bien, merci beaucoup à tous"}`, false},
	{"text-escapes", `{"id":"m-184471","room":"lobby","user":"dave","ts":1796022000123,"text":"line one\nline two: \"quoted\" caf\u00e9 \ud83d\ude00"}`, true},
}

// BenchmarkDecode compares, on the same events, Decode with the reference
// decoder (encoding/json plus the same rules) and with bare json.Unmarshal
// into a struct of strings (no validation at all, text assumed a string: a
// lower bound for any decoder built on encoding/json).
//
//	go test -run='^$' -bench=BenchmarkDecode -benchmem ./ingest/
func BenchmarkDecode(b *testing.B) {
	decoders := []struct {
		name   string
		decode func([]byte) error
	}{
		{"fast", func(data []byte) error {
			_, err := Decode(data, testNow, testSkew)
			return err
		}},
		{"encoding-json-reference", func(data []byte) error {
			if _, err := refDecode(data, testNow, testSkew); err != nil {
				return err
			}
			return nil
		}},
		{"encoding-json-unmarshal", func(data []byte) error {
			var ev struct {
				Room, User, Type, Text string
				TS                     json.RawMessage
			}
			return json.Unmarshal(data, &ev)
		}},
	}
	for _, ev := range benchEvents {
		data := []byte(ev.json)
		for _, d := range decoders {
			b.Run(ev.name+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if err := d.decode(data); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkDecodeFormats decodes one typical event of each input format
// side by side: chatpulse's own (about 130 bytes), Matrix's as Dendrite
// publishes them (about 1 KiB: five to eight times larger, most of it
// signatures and hashes that are checked and skipped), the same Matrix
// events through the mapping file that writes Matrix as a mapping, and a
// Zulip message through its mapping (docs/input.md). ns/byte says what the
// larger events cost per byte read.
//
//	go test -run='^$' -bench=BenchmarkDecodeFormats -benchmem ./ingest/
func BenchmarkDecodeFormats(b *testing.B) {
	matrixFile := loadMapping(b, "matrix.yaml")
	zulip := loadMapping(b, "zulip.yaml")
	zulipEvent, err := os.ReadFile(filepath.Join("testdata", "mappings", "zulip.json"))
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name   string
		format *Format
		data   []byte
		now    int64
	}{
		{"native/message", Native(), []byte(benchEvents[0].json), testNow},
		{"native/message-ts-int", Native(), []byte(benchEvents[1].json), testNow},
		{"native/join", Native(), []byte(`{"id":"m-184472","type":"join","room":"lobby","user":"erin","ts":1796022000123}`), testNow},
		{"matrix/message", Matrix(), sample(b, "011-message"), matrixNow},
		{"matrix/join", Matrix(), sample(b, "009-join"), matrixNow},
		{"matrix/edit-ignored", Matrix(), sample(b, "017-edit-m.replace"), matrixNow},
		{"matrix/message-escapes", Matrix(), sample(b, "1279-message-special-chars"), matrixNow},
		{"mapping-matrix/message", matrixFile, sample(b, "011-message"), matrixNow},
		{"mapping-matrix/join", matrixFile, sample(b, "009-join"), matrixNow},
		{"mapping-zulip/message", zulip, zulipEvent, testNow},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if _, err := c.format.Decode(c.data, c.now, testSkew); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				c.format.Decode(c.data, c.now, testSkew)
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(1e9/ns, "events/s")
			b.ReportMetric(ns/float64(len(c.data)), "ns/byte")
		})
	}
}

func loadMapping(t testing.TB, name string) *Format {
	t.Helper()
	path := filepath.Join("testdata", "mappings", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseMapping(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
