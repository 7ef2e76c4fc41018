package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// checkMappedAgainstReference decodes data with f and with refMapped
// over m, f's mapping, and fails t unless they agree: the same reason,
// the same message unless malformed, the same Event. An accepted event
// is also checked against the contract directly.
func checkMappedAgainstReference(t *testing.T, m mapping, f *Format, data []byte, now int64) {
	t.Helper()
	got, gerr := f.Decode(data, now, testSkew)
	want, werr := refMapped(m, data, f.MaxPayload(), f.MaxName(), now, testSkew)
	switch {
	case gerr == nil && werr == nil:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%s) =\n %+v, reference\n %+v", show(data), got, want)
		}
		if got.Counted {
			checkMappedContract(t, data, got, f, now)
		}
	case gerr == nil || werr == nil:
		t.Fatalf("Decode(%s) = %+v, %v; reference %+v, %v", show(data), got, gerr, want, werr)
	case gerr.Reason != werr.Reason:
		t.Fatalf("Decode(%s): %v; reference %v", show(data), gerr, werr)
	case gerr.Reason != ReasonMalformed && gerr.Msg != werr.Msg:
		t.Fatalf("Decode(%s): %v; reference %v", show(data), gerr, werr)
	}
}

// checkMappedContract fails t unless ev, accepted from data, obeys
// docs/contract.md section 13, checked without either decoder.
func checkMappedContract(t *testing.T, data []byte, ev Event, f *Format, now int64) {
	t.Helper()
	if len(data) > f.MaxPayload() || !json.Valid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
		t.Fatalf("accepted a payload that is not one JSON object of at most %d bytes: %s", f.MaxPayload(), show(data))
	}
	for _, s := range []string{ev.Room, ev.User} {
		if err := checkName(s, f.MaxName()); err != nil {
			t.Fatalf("accepted bad room or user %q in %s: %v", s, show(data), err)
		}
	}
	if ev.TS > now+testSkew || ev.TS != now && (ev.TS < MinTS || ev.TS > MaxTS) {
		t.Fatalf("accepted ts %d in %s", ev.TS, show(data))
	}
}

func checkName(s string, maxLen int) error {
	ref := refNameLen("name", []byte(strconv.Quote(s)), s, maxLen)
	if ref != "" {
		return fmt.Errorf("%s", ref)
	}
	return nil
}

// matrixBases are the samples, parsed, for genMatrixPayload to vary.
func matrixBases(t testing.TB) [][]byte {
	var out [][]byte
	for _, data := range samples(t) {
		out = append(out, data)
	}
	return out
}

// genMatrixPayload varies a real Matrix event: the envelope and event
// types, membership, relations, state_key, room, sender, ts, body and ids
// each take good and bad values; then keys may be escaped or given twice,
// names given bad escapes, and a quarter are mutated.
func genMatrixPayload(r *rand.Rand, bases [][]byte) []byte {
	var env map[string]any
	dec := json.NewDecoder(bytes.NewReader(bases[r.IntN(len(bases))]))
	dec.UseNumber()
	if err := dec.Decode(&env); err != nil {
		panic(err)
	}
	// set sets key to one of choices, of which the first good ones are
	// all a clean payload takes.
	clean := r.IntN(2) == 0
	set := func(m map[string]any, key string, good int, choices ...any) {
		if r.IntN(2) == 0 {
			return
		}
		if clean {
			choices = choices[:good]
		}
		switch v := choices[r.IntN(len(choices))].(type) {
		case deleted:
			delete(m, key)
		default:
			m[key] = v
		}
	}
	set(env, "type", 3, "new_room_event", "new_room_event", "new_room_event", "redacted_event", "new_invite_event", 5, nil, deleted{})
	nre, _ := env["new_room_event"].(map[string]any)
	if nre == nil {
		nre = map[string]any{}
		if r.IntN(2) == 0 {
			env["new_room_event"] = nre
		}
	}
	ev, _ := nre["event"].(map[string]any)
	if ev == nil {
		ev = map[string]any{"room_id": "!x:localhost", "sender": "@x:localhost", "origin_server_ts": json.Number("1796155481077")}
		nre["event"] = ev
	}
	content, _ := ev["content"].(map[string]any)
	if content == nil {
		content = map[string]any{}
		ev["content"] = content
	}
	long := func(n int) string { return "@" + strings.Repeat("u", n-len("@:localhost")) + ":localhost" }
	names := []any{"!3rYnfsG2FsJdpctO:localhost", "@bob:localhost", long(255), "é:x", long(256), "", "!r\n:x", "é:x", 42, 4.5, map[string]any{}, nil, deleted{}}
	set(ev, "type", 4, "m.room.message", "m.room.message", "m.room.member", "m.room.member", "m.reaction", "m.room.redaction", "m.room.create", 1, deleted{})
	set(content, "membership", 4, "join", "join", "leave", "leave", "invite", "ban", nil, 3, deleted{})
	set(content, "m.relates_to", 3, map[string]any{"rel_type": "m.replace"}, map[string]any{"rel_type": "m.annotation"},
		map[string]any{"m.in_reply_to": map[string]any{"event_id": "$x"}}, map[string]any{"rel_type": 5}, "x", deleted{})
	set(ev, "state_key", 2, ev["sender"], ev["sender"], "@other:localhost", "", nil, 7, deleted{})
	set(ev, "room_id", 4, names...)
	set(ev, "sender", 4, names...)
	future := json.Number(strconv.Itoa(matrixNow + 10000))
	set(ev, "origin_server_ts", 4, json.Number("1796155481077"), future, future, future, json.Number("-1"), json.Number("1.5"),
		"1796155481077", "2026-12-01T10:44:41Z", json.Number("1e3"), json.Number("253402300800000"), nil, deleted{})
	set(content, "body", 4, "hello", "<b>&amp;</b> \u2028", "line\nbreak \"q\"", 5, nil, strings.Repeat("long text ", 100), deleted{})
	ids := []any{"@bob:localhost", "@bob:localhost", "@room", "@room 2", "@c\u00e9:x", "", 5, nil, []any{"@x:y"}}
	var userIDs []any
	for range r.IntN(12) {
		userIDs = append(userIDs, ids[r.IntN(len(ids))])
	}
	set(content, "m.mentions", 3, map[string]any{"user_ids": userIDs}, map[string]any{"user_ids": userIDs, "room": true},
		map[string]any{"room": r.IntN(2) == 0}, map[string]any{"user_ids": "@a:x", "room": "yes"}, []any{}, nil, deleted{})
	set(ev, "_event_id", 2, "$e1", "$e\u00e9", 5, deleted{})
	set(ev, "event_id", 2, "$e2", nil, deleted{})
	data, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	s := string(data)
	for range r.IntN(3) {
		switch r.IntN(5) {
		case 0: // a key twice
			if clean {
				continue
			}
			k := pick(r, []string{`"sender":`, `"content":`, `"room_id":`, `"type":`, `"event":`, `"depth":`, `"membership":`})
			s = strings.Replace(s, k, k+`"@dup:x",`+k, 1)
		case 1: // an escaped key
			s = strings.Replace(s, `"room_id"`, `"room\u005fid"`, 1)
			s = strings.Replace(s, `"sender"`, `"s\u0065nder"`, 1)
		case 2: // a bad name
			s = strings.Replace(s, `:localhost"`, pick(r, []string{`\ud800:localhost"`, "\xff:localhost\"", `\u0000:localhost"`, `\u0085:localhost"`}), 1)
		case 3: // white space
			s = strings.ReplaceAll(s, `,"`, pick(r, []string{`, "`, ",\n\t\"", ` ,"`}))
		default:
			s = strings.Replace(s, `"origin_server_ts":`, `"origin_server_ts": `, 1)
		}
	}
	data = []byte(s)
	if !clean && r.IntN(3) == 0 {
		data = mutate(r, data)
	}
	return data
}

type deleted struct{}

// genMappedPayload builds a payload for the test mapping: each of its
// places filled (or not) with good and bad values, noise around them,
// keys escaped or given twice, and a fifth mutated.
func genMappedPayload(r *rand.Rand, unit string) []byte {
	g := gen{r: r, clean: r.IntN(2) == 0}
	name := func() string {
		if g.clean {
			return pick(r, []string{`"lobby"`, `"alice"`, `42`, `"caf\u00e9"`, `"` + strings.Repeat("n", 255) + `"`, `"@a:example.org"`})
		}
		return pick(r, []string{`"lobby"`, `"alice"`, `42`, `-7`, `4.5`, `"` + strings.Repeat("n", 255) + `"`, `"` + strings.Repeat("n", 256) + `"`,
			`""`, `"a\u0007"`, `"\ud800"`, "\"\xff\"", `null`, `{}`, `[]`, `true`, `"caf\u00e9"`})
	}
	at := func() string {
		if g.clean {
			return pick(r, map[string][]string{
				"s":       {`1796022000`, `1796021999.123456`, `"1796021999.5"`, `1796022009`, `1796020000`},
				"ms":      {`1796022000123`, `"1796022000123"`, `1796022009000`, `1796020000000`},
				"rfc3339": {`"2026-11-30T07:00:00Z"`, `"2026-11-30T06:00:00.5+01:00"`, `"2026-11-30T07:00:09Z"`},
			}[unit])
		}
		return pick(r, []string{`1796022000`, `1796021999.123456`, `"1796021999.5"`, `1796022000e0`, `-1`, `true`, `253402300800`, `null`,
			`1796022000123`, `"1796022000123"`, `"-5"`, `"2026-11-30T07:00:00Z"`, `"2026-11-30T07:00:09Z"`, `"x"`, `01`, `1796022009`, `"1.5e3"`, `[]`})
	}
	var members []string
	add := func(p float64, key, val string) {
		if r.Float64() < p {
			members = append(members, key+":"+val)
		}
	}
	obj := func(parts ...string) string {
		var kept []string
		for _, p := range parts {
			if p != "" && (g.clean || r.IntN(5) > 0) {
				kept = append(kept, p)
			}
		}
		if !g.clean && r.IntN(6) == 0 && len(kept) > 0 {
			kept = append(kept, kept[r.IntN(len(kept))])
		}
		r.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
		return "{" + strings.Join(kept, ",") + "}"
	}
	add(0.8, pick(r, []string{`"chat"`, `"ch\u0061t"`}), pick(r, []string{obj(`"room":`+name(), `"x":`+g.value(1)), `"lobby"`, `[]`}))
	add(0.3, pick(r, []string{`"room/id"`, `"room\/id"`}), name())
	from := obj(pick(r, []string{`"name"`, `"n\u0061me"`})+":"+name(), `"z":`+g.value(1))
	add(0.9, `"from"`, pick(r, []string{`[` + from + `]`, `[` + from + `,{"name":"bob"}]`, `[]`, `{"0":` + from + `}`, `[[],` + from + `]`, `"x"`}))
	add(0.9, `"at"`, at())
	add(0.4, `"id"`, pick(r, []string{`"m-1"`, `184467`, `1.5`, `null`, `{}`, `"\u00e9"`}))
	add(0.4, `"body"`, pick(r, []string{`"hi"`, `"a\nb\ud800"`, `5`, `null`, `["hi"]`}))
	add(0.4, `"to"`, pick(r, []string{g.mentions(), g.mentions(), `null`, `"@a:x"`, `{}`, `[]`}))
	add(0.2, `"cc"`, pick(r, []string{`[` + g.mentions() + `]`, `[null,` + g.mentions() + `]`, `{"0":["a"]}`, `[]`}))
	add(0.5, `"kind"`, pick(r, []string{`"msg"`, `0`, `null`, `"hello"`, `"bye"`, `7`, `7.0`, `"edit"`, `{}`, `true`, `"m\u0073g"`, `-0`}))
	for range r.IntN(3) {
		add(1, pick(r, []string{`"x"`, `""`, `"meta"`}), g.value(1))
	}
	if !g.clean && r.IntN(8) == 0 && len(members) > 0 {
		members = append(members, members[r.IntN(len(members))])
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	data := []byte("{" + strings.Join(members, ",") + "}")
	if !g.clean && r.IntN(3) == 0 {
		data = mutate(r, data)
	}
	return data
}

var testUnits = []string{"s", "ms", "rfc3339"}

// testMappings are the test mapping with each unit of ts.
func testMappings(t testing.TB) []*Format {
	var out []*Format
	for _, unit := range testUnits {
		f, err := ParseMapping("test.yaml", []byte(strings.Replace(testMappingFile, "unit: s}", "unit: "+unit+"}", 1)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// Both mapped decoders agree with the reference on random payloads, and
// the generators reach every outcome.
func TestMappedAgreesWithReference(t *testing.T) {
	n := 30000
	if testing.Short() {
		n = 3000
	}
	r := rand.New(rand.NewPCG(3, 4))
	bases := matrixBases(t)
	formats := testMappings(t)
	outcomes := map[string]map[Reason]int{"matrix": {}, "mapping": {}}
	for i := range n {
		var data []byte
		var f *Format
		kind := "matrix"
		if i%2 == 0 {
			data, f = genMatrixPayload(r, bases), Matrix()
		} else {
			u := r.IntN(len(formats))
			kind, data, f = "mapping", genMappedPayload(r, testUnits[u]), formats[u]
		}
		now := int64(testNow)
		if kind == "matrix" {
			now = matrixNow
		}
		ev, err := f.Decode(data, now, testSkew)
		switch {
		case err != nil:
			outcomes[kind][err.Reason]++
		case ev.Counted:
			outcomes[kind]["counted"]++
		default:
			outcomes[kind]["ignored"]++
		}
		checkMappedAgainstReference(t, f.plan.spec, f, data, now)
		if t.Failed() {
			return
		}
	}
	for kind, got := range outcomes {
		for _, want := range []Reason{"counted", "ignored", ReasonMalformed, ReasonInvalid, ReasonUnmapped, ReasonFuture} {
			if got[want] < n/2/200 {
				t.Errorf("%s: only %d of %d payloads came out %s: %v", kind, got[want], n/2, want, got)
			}
		}
		t.Logf("%s outcomes: %v", kind, got)
	}
}

// Typical Matrix events, with nothing to unescape in what is read, decode
// without allocating; so do the test mapping's.
func TestMappedDecodeAllocs(t *testing.T) {
	for _, name := range []string{"011-message", "009-join", "023-leave", "017-edit-m.replace", "021-redacted_event", "001-room-create"} {
		data := sample(t, name)
		if allocs := testing.AllocsPerRun(100, func() {
			if _, err := Matrix().Decode(data, matrixNow, testSkew); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("%s: %v allocations per Decode, want 0", name, allocs)
		}
	}
	f := testMapping(t)
	data := []byte(mp(`,"id":184467,"body":"hi","kind":"hello"`))
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := f.Decode(data, testNow, testSkew); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("mapping: %v allocations per Decode, want 0", allocs)
	}
}
