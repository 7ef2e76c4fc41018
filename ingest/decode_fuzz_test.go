package ingest

import (
	"math/rand/v2"
	"testing"
)

// FuzzDecode checks that Decode never panics, agrees with the
// encoding/json reference and never accepts what the contract rejects.
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=60s ./ingest/
//
// Seeds are kept under 4 KiB: the fuzzer spends up to a minute minimizing
// each new interesting input, and a 64 KiB one stalls it for all of that.
// The table tests cover the big payloads.
func FuzzDecode(f *testing.F) {
	add := func(data []byte) {
		if len(data) <= 4096 {
			f.Add(data)
		}
	}
	for _, c := range decodeCases {
		add([]byte(c.in))
	}
	for _, ev := range benchEvents {
		add([]byte(ev.json))
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		add(genPayload(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, data, testNow, testSkew)
	})
}
